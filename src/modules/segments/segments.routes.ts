import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath, listUnderPath, writeUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import { ContactList, ContactParams } from '../contacts/contacts.schemas.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import {
  CreateSegmentBody,
  DeletedSegment,
  MembershipParams,
  RemovedSegmentMembership,
  Segment,
  SegmentList,
  SegmentMembership,
  SegmentParams,
  UpdateSegmentBody,
} from './segments.schemas.ts';
import type { SegmentService } from './segments.service.ts';

// Segments are the audience's data, as contacts are: writes (the segments and who is in them) need a
// full_access key; read_only keys read.
export function registerSegmentRoutes(
  server: FastifyInstance,
  { segments, contacts }: { segments: SegmentService; contacts: ContactService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  const routes = routeOptions(['Segments']);

  app.post(
    '/v1/segments',
    routes.fullAccess({
      operationId: 'createSegment',
      summary: 'Create a segment',
      description:
        'A named list of contacts, empty until contacts are added to it; or, with `filter`, the contacts that match its conditions whenever it is read.',
      body: CreateSegmentBody,
      response: { 201: Segment, ...errorResponses() },
    }),
    async (request, reply) => {
      const record = await segments.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact((transaction) => segments.create(transaction, record));
    },
  );

  app.get(
    '/v1/segments',
    routes.readOnly({
      operationId: 'listSegments',
      summary: 'List segments, newest first',
      querystring: ListQuery,
      response: { 200: SegmentList, ...errorResponses() },
    }),
    async (request) => {
      const page = await segments.list(projectOf(request), toPageRequest(request.query, 'seg'));
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/segments/:id',
    routes.readOnly({
      operationId: 'getSegment',
      summary: 'Retrieve a segment',
      params: SegmentParams,
      response: { 200: Segment, ...errorResponses() },
    }),
    callUnderPath(segments.get),
  );

  app.patch(
    '/v1/segments/:id',
    routes.fullAccess({
      operationId: 'updateSegment',
      summary: 'Update a segment',
      description: 'Its name, or a filter segment’s filter (a list stays a list).',
      params: SegmentParams,
      body: UpdateSegmentBody,
      response: { 200: Segment, ...errorResponses() },
    }),
    async (request, reply) => {
      const projectId = projectOf(request);
      const input = await segments.prepareUpdate(projectId, request.body);
      return reply.transact((transaction) =>
        segments.update(transaction, projectId, request.params.id, input),
      );
    },
  );

  app.delete(
    '/v1/segments/:id',
    routes.fullAccess({
      operationId: 'deleteSegment',
      summary: 'Delete a segment',
      description: 'The segment and its list go; its contacts stay.',
      params: SegmentParams,
      response: { 200: DeletedSegment, ...errorResponses() },
    }),
    writeUnderPath(segments.delete),
  );

  app.get(
    '/v1/segments/:id/contacts',
    routes.readOnly({
      operationId: 'listSegmentContacts',
      summary: 'List a segment’s contacts, newest first',
      description: 'The same as GET /v1/contacts?segment_id={id}.',
      params: SegmentParams,
      querystring: ListQuery,
      response: { 200: ContactList, ...errorResponses() },
    }),
    async (request) => {
      const page = await contacts.list(projectOf(request), toPageRequest(request.query, 'con'), {
        segment_id: request.params.id,
      });
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/contacts/:id/segments',
    routes.readOnly({
      operationId: 'listContactSegments',
      summary: 'List the segments a contact is in, newest first',
      params: ContactParams,
      querystring: ListQuery,
      response: { 200: SegmentList, ...errorResponses() },
    }),
    listUnderPath('seg', segments.ofContact),
  );

  app.post(
    '/v1/contacts/:id/segments/:segment_id',
    routes.fullAccess({
      operationId: 'addContactToSegment',
      summary: 'Add a contact to a segment',
      description: 'Adding a contact the segment has already changes nothing (`added: false`).',
      params: MembershipParams,
      response: { 200: SegmentMembership, ...errorResponses() },
    }),
    async (request, reply) =>
      reply.transact((transaction) =>
        segments.addContact(transaction, projectOf(request), request.params.id, request.params.segment_id),
      ),
  );

  app.delete(
    '/v1/contacts/:id/segments/:segment_id',
    routes.fullAccess({
      operationId: 'removeContactFromSegment',
      summary: 'Remove a contact from a segment',
      description: 'A contact that is not in the segment is a 404.',
      params: MembershipParams,
      response: { 200: RemovedSegmentMembership, ...errorResponses() },
    }),
    async (request, reply) =>
      reply.transact((transaction) =>
        segments.removeContact(transaction, projectOf(request), request.params.id, request.params.segment_id),
      ),
  );
}
