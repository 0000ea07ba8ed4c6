import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { listUnderPath, writeUnderPath, writeUnderPathWithBody } from '../../http/path-handlers.ts';
import { ListQuery, toPageRequest, listOf } from '../../http/list.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import { SegmentNameBody, type SegmentView } from '../segments/segments.schemas.ts';
import type { SegmentService } from '../segments/segments.service.ts';
import { toResendListContact } from './resend-contacts.ts';
import { hide, IdParams } from './resend-routing.ts';

const MembershipParams = Type.Object({
  id: Type.String({ minLength: 1 }),
  segment_id: Type.String({ minLength: 1 }),
});

/** A segment as Resend's API answers it (`Segment`). */
const toResendSegment = (segment: SegmentView) => ({
  id: segment.id,
  name: segment.name,
  created_at: segment.created_at,
});

/**
 * Resend's segments (and so its deprecated audiences, which the SDK sends to /segments), a segment's contacts
 * and a contact's segments, over the /v1 services, inside the /resend scope (resend.routes.ts).
 */
export function registerResendSegmentRoutes(
  scope: FastifyInstance,
  { segments, contacts }: { segments: SegmentService; contacts: ContactService },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const write = { permission: 'full_access' } as const;
  const read = { permission: 'read_only' } as const;

  app.post(
    '/segments',
    { config: write, schema: { ...hide, body: SegmentNameBody } },
    async (request, reply) => {
      const record = await segments.prepareCreate(projectOf(request), request.body);
      return reply.transact(async (transaction) => {
        const segment = await segments.create(transaction, record);
        return { object: 'segment', id: segment.id, name: segment.name };
      });
    },
  );

  app.get('/segments', { config: read, schema: { ...hide, querystring: ListQuery } }, async (request) => {
    const page = await segments.list(projectOf(request), toPageRequest(request.query, 'seg'));
    return listOf(page, toResendSegment);
  });

  app.get('/segments/:id', { config: read, schema: { ...hide, params: IdParams } }, async (request) => ({
    object: 'segment',
    ...toResendSegment(await segments.get(projectOf(request), request.params.id)),
  }));

  app.patch(
    '/segments/:id',
    { config: write, schema: { ...hide, params: IdParams, body: SegmentNameBody } },
    writeUnderPathWithBody(async (transaction, projectId, id, body: { name: string }) => ({
      object: 'segment',
      id: (await segments.rename(transaction, projectId, id, body.name)).id,
    })),
  );

  app.delete(
    '/segments/:id',
    { config: write, schema: { ...hide, params: IdParams } },
    writeUnderPath(segments.delete),
  );

  // contacts.list({ segmentId }) (and { audienceId }).
  app.get(
    '/segments/:id/contacts',
    { config: read, schema: { ...hide, params: IdParams, querystring: ListQuery } },
    async (request) => {
      const page = await contacts.list(projectOf(request), toPageRequest(request.query, 'con'), {
        segment_id: request.params.id,
      });
      return listOf(page, toResendListContact);
    },
  );

  app.get(
    '/contacts/:id/segments',
    { config: read, schema: { ...hide, params: IdParams, querystring: ListQuery } },
    listUnderPath('seg', segments.ofContact, toResendSegment),
  );

  app.post(
    '/contacts/:id/segments/:segment_id',
    { config: write, schema: { ...hide, params: MembershipParams } },
    async (request, reply) =>
      reply.transact(async (transaction) => {
        const { id, segment_id } = request.params;
        const added = await segments.addContact(transaction, projectOf(request), id, segment_id);
        return { id: added.segment_id };
      }),
  );

  app.delete(
    '/contacts/:id/segments/:segment_id',
    { config: write, schema: { ...hide, params: MembershipParams } },
    async (request, reply) =>
      reply.transact(async (transaction) => {
        const { id, segment_id } = request.params;
        const removed = await segments.removeContact(transaction, projectOf(request), id, segment_id);
        return { id: removed.segment_id, deleted: true };
      }),
  );
}
