import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, toPageRequest } from '../../http/list.ts';
import { EventList, EventListQuery, EventParams, EventWithDeliveries } from './events.schemas.ts';
import type { EventService } from './events.service.ts';

const tags = ['Events'];

export function registerEventRoutes(server: FastifyInstance, { events }: { events: EventService }): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/events',
    {
      schema: {
        tags,
        summary: 'List events, newest first',
        querystring: EventListQuery,
        response: { 200: EventList, ...errorResponses() },
      },
    },
    async (request) => {
      const { type, ...query } = request.query;
      const page = await events.list(projectOf(request), toPageRequest(query), type);
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/events/:id',
    {
      schema: {
        tags,
        summary: 'Retrieve an event with its deliveries',
        description: 'The event as webhooks receive it, plus one delivery per webhook it was sent to.',
        params: EventParams,
        response: { 200: EventWithDeliveries, ...errorResponses() },
      },
    },
    async (request) => events.get(projectOf(request), request.params.id),
  );
}
