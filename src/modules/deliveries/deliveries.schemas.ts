import { type Static, Type } from '@sinclair/typebox';
import type { Row } from '../../db/schema.ts';

const timestamp = (description: string) =>
  Type.String({ format: 'date-time', description: `${description} ISO 8601 UTC with milliseconds.` });
const nullable = <T extends ReturnType<typeof Type.String> | ReturnType<typeof Type.Integer>>(schema: T) =>
  Type.Union([schema, Type.Null()]);

export const Delivery = Type.Object(
  {
    object: Type.Literal('delivery'),
    id: Type.String({ description: 'Delivery identifier (`dlv_…`): one event to one webhook.' }),
    webhook_id: Type.String(),
    event_id: Type.String(),
    status: Type.Union([Type.Literal('pending'), Type.Literal('succeeded'), Type.Literal('failed')], {
      description: '`pending` until an attempt succeeds (`succeeded`) or the retries run out (`failed`).',
    }),
    attempts: Type.Integer({ description: 'Attempts made so far.' }),
    next_attempt_at: nullable(timestamp('When the next attempt is due; null once no longer pending.')),
    last_attempt_at: nullable(timestamp('When the last attempt started.')),
    last_status_code: nullable(
      Type.Integer({ description: 'HTTP status of the last attempt, if any came.' }),
    ),
    last_error: nullable(Type.String({ description: 'Why the last attempt failed; null after a success.' })),
    created_at: timestamp('When the delivery was created, with its event.'),
    completed_at: nullable(timestamp('When it succeeded or failed for good.')),
  },
  { title: 'Delivery' },
);

export type DeliveryView = Static<typeof Delivery>;

export function toDeliveryView(row: Row<'deliveries'>): DeliveryView {
  return {
    object: 'delivery',
    id: row.id,
    webhook_id: row.webhook_id,
    event_id: row.event_id,
    status: row.status,
    attempts: Number(row.attempts),
    next_attempt_at: row.status === 'pending' ? row.next_attempt_at : null,
    last_attempt_at: row.last_attempt_at,
    last_status_code: row.last_status_code,
    last_error: row.last_error,
    created_at: row.created_at,
    completed_at: row.completed_at,
  };
}
