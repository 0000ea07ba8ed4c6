import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { timestamp } from '../../http/schema-helpers.ts';
import { Delivery } from '../deliveries/deliveries.schemas.ts';
import { EventType } from '../event-kinds/event-payloads.ts';

const eventFields = {
  object: Type.Literal('event'),
  id: Type.String({
    description: 'Event identifier (`evt_…`); also the `webhook-id` header of its deliveries.',
  }),
  type: EventType,
  created_at: timestamp('When the event happened.'),
  data: Type.Record(Type.String(), Type.Unknown(), {
    description: 'The event payload, as sent to webhooks.',
  }),
};

export const Event = Type.Object(eventFields, { title: 'Event' });

export const EventWithDeliveries = Type.Object(
  {
    ...eventFields,
    deliveries: Type.Array(Delivery, { description: 'One delivery per webhook the event was sent to.' }),
  },
  { title: 'EventWithDeliveries' },
);

export const EventList = listEnvelope(Event);

export const EventListQuery = Type.Object(
  {
    ...ListQuery.properties,
    type: Type.Optional(EventType),
  },
  { additionalProperties: false },
);

export const EventParams = Type.Object({ id: Type.String() });

export const RedeliverBody = Type.Object(
  {
    webhook_id: Type.Optional(
      Type.String({
        description:
          'Redeliver to this webhook only: one the event was delivered to, or one subscribed to its kind. Without it, every webhook the event was delivered to.',
      }),
    ),
  },
  { additionalProperties: false, title: 'RedeliverEventRequest' },
);

export const Redelivery = Type.Object(
  {
    object: Type.Literal('redelivery'),
    event_id: Type.String(),
    delivery_ids: Type.Array(Type.String(), {
      description: 'The new deliveries (`dlv_…`), pending and due now; see GET /v1/events/{id}.',
    }),
    skipped_webhook_ids: Type.Array(Type.String(), {
      description: 'Webhooks the event was delivered to that are disabled now, so got nothing.',
    }),
  },
  { title: 'Redelivery' },
);

export type EventView = Static<typeof Event>;
export type EventWithDeliveriesView = Static<typeof EventWithDeliveries>;
export type RedeliverInput = Static<typeof RedeliverBody>;
export type RedeliveryView = Static<typeof Redelivery>;
