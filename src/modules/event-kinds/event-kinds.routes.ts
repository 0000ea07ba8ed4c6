import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { errorResponses } from '../../http/error-schema.ts';
import { routeOptions } from '../../http/route-options.ts';
import { listEnvelope } from '../../http/list.ts';
import { EventType } from './event-payloads.ts';
import { EVENT_KIND_NAMES, EVENT_KINDS } from './event-kinds.ts';

const EventKindSchema = Type.Object(
  { object: Type.Literal('event_kind'), type: EventType, description: Type.String() },
  { title: 'EventKind' },
);

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
    routeOptions(['Events']).readOnly({
      operationId: 'listEventKinds',
      summary: 'List the event kinds a webhook can subscribe to',
      description:
        "Every event kind a webhook can subscribe to, with what it means. The same list is the `EventType` enum of this document, and each kind's payload is in its `webhooks` section.",
      response: {
        200: listEnvelope(EventKindSchema),
        ...errorResponses(),
      },
    }),
    async () => catalogue,
  );
}
