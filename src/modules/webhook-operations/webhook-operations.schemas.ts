import { type Static, Type } from '@sinclair/typebox';
import type { DeliveryStatus } from '../../db/schema.ts';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { timeFilter, timestamp } from '../../http/schema-helpers.ts';
import { Delivery, DeliveryStatusSchema } from '../deliveries/deliveries.schemas.ts';
import { eventKindEnum } from '../event-kinds/event-payloads.ts';

export const DeliveryList = listEnvelope(Delivery);

const DELIVERY_STATUSES: DeliveryStatus[] = ['pending', 'succeeded', 'failed'];

export const DeliveryListQuery = Type.Object(
  {
    ...ListQuery.properties,
    // An enum (not a union of literals) so a wrong value is refused with the allowed ones named.
    status: Type.Optional(
      Type.Unsafe<DeliveryStatus>({
        type: 'string',
        enum: DELIVERY_STATUSES,
        description: 'Only deliveries in this status: `pending`, `succeeded` or `failed`.',
      }),
    ),
  },
  { additionalProperties: false },
);

export const TestWebhookBody = Type.Object(
  {
    type: Type.Optional(
      eventKindEnum({
        default: 'email.sent',
        description: 'The event kind to send (see GET /v1/event-kinds); default `email.sent`.',
      }),
    ),
  },
  { additionalProperties: false, title: 'TestWebhookRequest' },
);

const nullable = <T extends ReturnType<typeof Type.String> | ReturnType<typeof Type.Integer>>(schema: T) =>
  Type.Union([schema, Type.Null()]);

export const WebhookTest = Type.Object(
  {
    object: Type.Literal('webhook_test'),
    webhook_id: Type.String(),
    event_id: Type.String({ description: 'The test event (`evt_…`); its data carries `test: true`.' }),
    delivery_id: Type.String({
      description: 'Its delivery (`dlv_…`), retried on the schedule if it failed.',
    }),
    success: Type.Boolean({ description: 'True when the first attempt got a 2xx in time.' }),
    delivery_status: DeliveryStatusSchema,
    attempted_at: nullable(
      timestamp('When the first attempt started; null when none was made while the request waited.'),
    ),
    status_code: nullable(Type.Integer({ description: 'The HTTP status the receiver answered.' })),
    duration_ms: nullable(Type.Integer({ description: 'How long the attempt took.' })),
    error: nullable(
      Type.String({
        description:
          'Why it failed: the attempt’s error, or that no worker attempted it in time (it stays queued).',
      }),
    ),
    response_excerpt: nullable(Type.String({ description: 'The first 4 KiB of the response body.' })),
  },
  { title: 'WebhookTest' },
);

export const RecoverWebhookBody = Type.Object(
  {
    since: timeFilter(
      'A time within the last 30 days: the failed deliveries created since then are re-queued.',
    ),
  },
  { additionalProperties: false, title: 'RecoverWebhookRequest' },
);

export const WebhookRecovery = Type.Object(
  {
    object: Type.Literal('webhook_recovery'),
    webhook_id: Type.String(),
    since: timestamp('The start of the recovered period, as understood.'),
    requeued: Type.Integer({ description: 'How many failed deliveries are pending again, due now.' }),
  },
  { title: 'WebhookRecovery' },
);

export type TestWebhookInput = Static<typeof TestWebhookBody>;
export type RecoverWebhookInput = Static<typeof RecoverWebhookBody>;
export type WebhookTestView = Static<typeof WebhookTest>;
export type WebhookRecoveryView = Static<typeof WebhookRecovery>;
