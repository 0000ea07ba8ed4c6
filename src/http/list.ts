import { type TSchema, Type } from '@sinclair/typebox';
import { invalidParam } from '../lib/errors.ts';
import type { PageRequest } from '../db/pagination.ts';

export const ListQuery = Type.Object(
  {
    limit: Type.Integer({ minimum: 1, maximum: 100, default: 100, description: 'Items per page, 1–100.' }),
    after: Type.Optional(Type.String({ description: 'An id: return the items that come after it (older).' })),
    before: Type.Optional(
      Type.String({ description: 'An id: return the items that come before it (newer).' }),
    ),
  },
  { additionalProperties: false },
);

export const listEnvelope = <T extends TSchema>(item: T) =>
  Type.Object({ object: Type.Literal('list'), data: Type.Array(item), has_more: Type.Boolean() });

export function toPageRequest(query: {
  limit: number;
  after?: string | undefined;
  before?: string | undefined;
}): PageRequest {
  if (query.after !== undefined && query.before !== undefined) {
    throw invalidParam('before', 'Send either after or before, not both.');
  }
  return { limit: query.limit, after: query.after, before: query.before };
}

export const list = <T>(data: T[], hasMore: boolean) => ({
  object: 'list' as const,
  data,
  has_more: hasMore,
});
