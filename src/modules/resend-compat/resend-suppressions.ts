import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import type { SuppressionReason } from '../../db/schema.ts';
import { AddSuppressionsBody, MAX_SUPPRESSIONS_PER_REQUEST } from '../suppressions/suppressions.schemas.ts';
import type { SuppressionRecord } from '../suppressions/suppressions.repo.ts';
import type { SuppressionService } from '../suppressions/suppressions.service.ts';
import { hide, IdParams, translated } from './resend-routing.ts';

// Resend's suppressions over Postwire's suppression list (docs/api/suppressions.md). Resend's `origin` is
// Postwire's reason: `bounce` a hard bounce, `complaint`, `manual`; an unsubscribe (Resend has no such origin)
// keeps Postwire's name, `unsubscribe`.

const ORIGINS = {
  hard_bounce: 'bounce',
  complaint: 'complaint',
  manual: 'manual',
  unsubscribe: 'unsubscribe',
} as const satisfies Record<SuppressionReason, string>;
const REASONS = Object.fromEntries(
  Object.entries(ORIGINS).map(([reason, origin]) => [origin, reason]),
) as Record<(typeof ORIGINS)[SuppressionReason], SuppressionReason>;

/** An entry as Resend's `SuppressionListEntry`: `source_id` is the email whose bounce or complaint added it. */
const toResendSuppression = (record: SuppressionRecord) => ({
  id: record.id,
  email: record.address,
  origin: ORIGINS[record.reason],
  source_id: record.emailId,
  created_at: record.createdAt,
});

const SuppressionListQuery = Type.Object(
  {
    ...ListQuery.properties,
    origin: Type.Optional(Type.Union(Object.values(ORIGINS).map((origin) => Type.Literal(origin)))),
  },
  { additionalProperties: false },
);

const BatchRemoveBody = Type.Union([
  Type.Object(
    { emails: Type.Array(Type.String(), { minItems: 1, maxItems: MAX_SUPPRESSIONS_PER_REQUEST }) },
    { additionalProperties: false },
  ),
  Type.Object(
    { ids: Type.Array(Type.String(), { minItems: 1, maxItems: MAX_SUPPRESSIONS_PER_REQUEST }) },
    { additionalProperties: false },
  ),
]);

const isObject = (body: unknown): body is Record<string, unknown> =>
  typeof body === 'object' && body !== null && !Array.isArray(body);

/** Resend's `{ email }` (one) or `{ emails }` (a batch) as /v1's `{ addresses }`. */
const toAddresses = (field: 'email' | 'emails') => (body: unknown) => {
  if (!isObject(body) || !(field in body)) return body;
  const { [field]: value, ...rest } = body;
  return { ...rest, addresses: field === 'email' ? [value] : value };
};

/** Resend's suppressions inside the /resend scope (resend.routes.ts). */
export function registerResendSuppressionRoutes(
  scope: FastifyInstance,
  { suppressions }: { suppressions: SuppressionService },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const write = { permission: 'full_access' } as const;
  const read = { permission: 'read_only' } as const;

  app.post(
    '/suppressions',
    {
      config: { ...write, resendFields: { 'addresses[0]': 'email', addresses: 'email' } },
      schema: { ...hide, body: AddSuppressionsBody },
      preValidation: translated(toAddresses('email')),
    },
    async (request, reply) => {
      const entries = suppressions.prepareAdd(projectOf(request), request.body);
      const [entry] = await reply.transact((transaction) => suppressions.add(transaction, entries));
      return { object: 'suppression', id: entry!.id };
    },
  );

  app.post(
    '/suppressions/batch/add',
    {
      config: { ...write, resendFields: { addresses: 'emails' } },
      schema: { ...hide, body: AddSuppressionsBody },
      preValidation: translated(toAddresses('emails')),
    },
    async (request, reply) => {
      const entries = suppressions.prepareAdd(projectOf(request), request.body);
      const added = await reply.transact((transaction) => suppressions.add(transaction, entries));
      return { data: added.map(({ id }) => ({ object: 'suppression', id })) };
    },
  );

  app.get(
    '/suppressions',
    { config: read, schema: { ...hide, querystring: SuppressionListQuery } },
    async (request) => {
      const { origin, ...query } = request.query;
      const reason = origin === undefined ? undefined : REASONS[origin];
      const page = await suppressions.list(projectOf(request), toPageRequest(query, 'sup'), reason);
      return list(page.items.map(toResendSuppression), page.hasMore);
    },
  );

  app.get('/suppressions/:id', { config: read, schema: { ...hide, params: IdParams } }, async (request) => ({
    object: 'suppression',
    ...toResendSuppression(await suppressions.getByIdOrAddress(projectOf(request), request.params.id)),
  }));

  const remove = async (projectId: string, entry: SuppressionRecord) => {
    await suppressions.remove(projectId, entry.address);
    return { object: 'suppression' as const, id: entry.id, deleted: true };
  };

  app.delete(
    '/suppressions/:id',
    { config: write, schema: { ...hide, params: IdParams } },
    async (request) => {
      const projectId = projectOf(request);
      return remove(projectId, await suppressions.getByIdOrAddress(projectId, request.params.id));
    },
  );

  // Every entry named must be on the list (else a 404 and none is removed), then each is removed.
  app.post(
    '/suppressions/batch/remove',
    { config: write, schema: { ...hide, body: BatchRemoveBody } },
    async (request) => {
      const projectId = projectOf(request);
      const named = 'emails' in request.body ? request.body.emails : request.body.ids;
      const entries = new Map<string, SuppressionRecord>();
      for (const idOrAddress of named) {
        const entry = await suppressions.getByIdOrAddress(projectId, idOrAddress);
        entries.set(entry.id, entry);
      }
      const data = [];
      for (const entry of entries.values()) data.push(await remove(projectId, entry));
      return { data };
    },
  );
}
