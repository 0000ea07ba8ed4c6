import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, toPageRequest } from '../../http/list.ts';
import {
  EventList,
  EventListQuery,
  EventParams,
  EventWithDeliveries,
  RedeliverBody,
  Redelivery,
} from './events.schemas.ts';
import type { EventService } from './events.service.ts';

const routes = routeOptions(['Events']);

export function registerEventRoutes(server: FastifyInstance, { events }: { events: EventService }): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/events',
    routes.readOnly({
      operationId: 'listEvents',
      summary: 'List events, newest first',
      description: 'Every event of the project, newest first, optionally of one kind (`type`).',
      querystring: EventListQuery,
      response: { 200: EventList, ...errorResponses() },
    }),
    async (request) => {
      const { type, ...query } = request.query;
      const page = await events.list(projectOf(request), toPageRequest(query, 'evt'), type);
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/events/:id',
    routes.readOnly({
      operationId: 'getEvent',
      summary: 'Retrieve an event with its deliveries',
      description: 'The event as webhooks receive it, plus one delivery per webhook it was sent to.',
      params: EventParams,
      response: { 200: EventWithDeliveries, ...errorResponses() },
    }),
    callUnderPath(events.get),
  );

  app.post(
    '/v1/events/:id/redeliver',
    // The body is optional: without one, the event goes again to every webhook it was delivered to.
    routes.fullAccess(
      {
        operationId: 'redeliverEvent',
        summary: 'Redeliver an event',
        description:
          'Creates a new delivery, due now and retried on the usual schedule, for every webhook the event was delivered to (disabled ones are skipped and listed), or for the one `webhook_id` names (409 if it is disabled). Earlier deliveries and their attempts are kept. The payload and its `webhook-id` are the same as before, so receivers can drop a duplicate.',
        params: EventParams,
        body: RedeliverBody,
        response: { 200: Redelivery, ...errorResponses(409) },
      },
      { optionalBody: true },
    ),
    async (request, reply) => {
      const webhookId = request.body.webhook_id;
      const plan = await events.prepareRedeliver(
        projectOf(request),
        request.params.id,
        webhookId !== undefined ? { webhookId } : {},
      );
      return reply.transact((transaction) => events.redeliver(transaction, plan));
    },
  );
}
