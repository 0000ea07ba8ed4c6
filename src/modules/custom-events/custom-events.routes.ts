import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath, writeUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import {
  CreateCustomEventBody,
  CustomEvent,
  CustomEventList,
  CustomEventParams,
  CustomEventSend,
  DeletedCustomEvent,
  SendCustomEventBody,
  UpdateCustomEventBody,
} from './custom-events.schemas.ts';
import type { CustomEventService } from './custom-events.service.ts';

// Custom events live under /v1/custom-events: /v1/events is the delivery events' (email.sent…), which
// webhooks receive. Declaring and sending need a full_access key; read_only keys read.
export function registerCustomEventRoutes(
  server: FastifyInstance,
  { customEvents }: { customEvents: CustomEventService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  const routes = routeOptions(['Custom events']);

  app.post(
    '/v1/custom-events',
    routes.fullAccess({
      operationId: 'createCustomEvent',
      summary: 'Declare a custom event',
      description:
        'Names an event your application sends, optionally with the types of its payload’s fields.',
      body: CreateCustomEventBody,
      response: { 201: CustomEvent, ...errorResponses(409) },
    }),
    async (request, reply) => {
      const record = customEvents.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact((transaction) => customEvents.create(transaction, record));
    },
  );

  app.post(
    '/v1/custom-events/send',
    routes.fullAccess({
      operationId: 'sendCustomEvent',
      summary: 'Send a custom event for a contact',
      description:
        'Records that the event happened to a contact (by `contact_id` or `email`; with `create_contact`, a contact is created for an unknown address). In the same transaction it starts a run of every enabled automation it triggers and resumes the contact’s runs waiting for it. Honours `Idempotency-Key`.',
      body: SendCustomEventBody,
      response: { 201: CustomEventSend, ...errorResponses() },
    }),
    async (request, reply) => {
      const plan = await customEvents.prepareSend(projectOf(request), request.body);
      reply.code(201);
      return reply.transact((transaction) => customEvents.send(transaction, plan));
    },
  );

  app.get(
    '/v1/custom-events',
    routes.readOnly({
      operationId: 'listCustomEvents',
      summary: 'List declared custom events, newest first',
      querystring: ListQuery,
      response: { 200: CustomEventList, ...errorResponses() },
    }),
    async (request) => {
      const page = await customEvents.list(projectOf(request), toPageRequest(request.query, 'cev'));
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/custom-events/:id',
    routes.readOnly({
      operationId: 'getCustomEvent',
      summary: 'Retrieve a custom event by id or name',
      params: CustomEventParams,
      response: { 200: CustomEvent, ...errorResponses() },
    }),
    callUnderPath(customEvents.get),
  );

  app.patch(
    '/v1/custom-events/:id',
    routes.fullAccess({
      operationId: 'updateCustomEvent',
      summary: 'Change a custom event’s payload schema',
      params: CustomEventParams,
      body: UpdateCustomEventBody,
      response: { 200: CustomEvent, ...errorResponses() },
    }),
    async (request, reply) =>
      reply.transact((transaction) =>
        customEvents.update(transaction, projectOf(request), request.params.id, request.body),
      ),
  );

  app.delete(
    '/v1/custom-events/:id',
    routes.fullAccess({
      operationId: 'deleteCustomEvent',
      summary: 'Delete a custom event’s declaration',
      description: 'The name may still be sent (unchecked); automations triggered by it keep running.',
      params: CustomEventParams,
      response: { 200: DeletedCustomEvent, ...errorResponses() },
    }),
    writeUnderPath(customEvents.delete),
  );
}
