import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { errorResponses } from '../../http/error-schema.ts';
import { EVENT_KIND_NAMES, EVENT_KINDS } from './event-kinds.ts';

const EventKindSchema = Type.Object({
  object: Type.Literal('event_kind'),
  type: Type.String(),
  description: Type.String(),
});

const catalogue = {
  object: 'list' as const,
  data: EVENT_KIND_NAMES.map((type) => ({
    object: 'event_kind' as const,
    type,
    description: EVENT_KINDS[type],
  })),
  has_more: false,
};

export function registerEventKindRoutes(app: FastifyInstance): void {
  app.get(
    '/v1/event-kinds',
    {
      schema: {
        tags: ['Events'],
        summary: 'List the event kinds a webhook can subscribe to',
        response: {
          200: Type.Object({
            object: Type.Literal('list'),
            data: Type.Array(EventKindSchema),
            has_more: Type.Boolean(),
          }),
          ...errorResponses(),
        },
      },
    },
    async () => catalogue,
  );
}
