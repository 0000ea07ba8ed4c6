import { type TSchema, Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import { invalidParam } from '../lib/errors.ts';
import { type IdPrefix, isId } from '../lib/ids.ts';
import type { Page, PageRequest } from '../db/pagination.ts';

export const DEFAULT_LIST_LIMIT = 100;

export const ListQuery = Type.Object(
  {
    // Optional with a default: validation fills it in, and a generated client may leave it out.
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100,
        default: DEFAULT_LIST_LIMIT,
        description: 'Items per page, 1–100.',
      }),
    ),
    after: Type.Optional(Type.String({ description: 'An id: return the items that come after it (older).' })),
    before: Type.Optional(
      Type.String({ description: 'An id: return the items that come before it (newer).' }),
    ),
  },
  { additionalProperties: false },
);

/** A list of `item`s; named `<item's title>List` in the OpenAPI document unless `title` says otherwise. */
export const listEnvelope = <T extends TSchema>(item: T, title?: string) =>
  Type.Object(
    {
      object: Type.Literal('list'),
      data: Type.Array(item),
      has_more: Type.Boolean({
        description: 'True when another page follows (pass the last id as `after`).',
      }),
    },
    typeof (title ?? item.title) === 'string' ? { title: title ?? `${String(item.title)}List` } : {},
  );

/**
 * The page a list query asks for. A cursor must be an id of the listed kind (`prefix`): anything else
 * (another kind's id, a NUL byte, text) is refused here, before it reaches a query.
 */
export function toPageRequest(
  query: { limit?: number | undefined; after?: string | undefined; before?: string | undefined },
  prefix: IdPrefix,
): PageRequest {
  if (query.after !== undefined && query.before !== undefined) {
    throw invalidParam('before', 'Send either after or before, not both.');
  }
  for (const param of ['after', 'before'] as const) {
    const cursor = query[param];
    if (cursor !== undefined && !isId(prefix, cursor)) {
      throw invalidParam(param, `${param} must be an id from this list (${prefix}_…).`);
    }
  }
  return { limit: query.limit ?? DEFAULT_LIST_LIMIT, after: query.after, before: query.before };
}

/**
 * Sends a body the route's own response schema has already serialized (`reply.serialize`): a page served
 * again unchanged is serialized once, and encoded once when kept as bytes (a string is measured and encoded
 * to UTF-8 for every answer: 6.5 KB of a 20-webhook page, in both passes). As JSON, so Fastify sends it as
 * it is.
 */
export function sendSerialized(reply: FastifyReply, body: string | Buffer): FastifyReply {
  return reply.type('application/json; charset=utf-8').send(body);
}

export const list = <T>(data: T[], hasMore: boolean) => ({
  object: 'list' as const,
  data,
  has_more: hasMore,
});

/** A page of the service's items as the API's list, each item answered as `view(item)`. */
export const listOf = <T, U>(page: Page<T>, view: (item: T) => U) => list(page.items.map(view), page.hasMore);
