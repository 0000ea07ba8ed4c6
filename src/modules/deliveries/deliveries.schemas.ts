import { type Static, Type } from '@sinclair/typebox';
import type { Row } from '../../db/schema.ts';
import { nullable, timestamp } from '../../http/schema-helpers.ts';

export const DeliveryStatusSchema = Type.Union(
  [Type.Literal('pending'), Type.Literal('succeeded'), Type.Literal('failed')],
  {
    description:
      '`pending` until an attempt succeeds (`succeeded`) or the retries run out (`failed`). Recovering a webhook makes its failed deliveries pending again.',
  },
);

export const DeliveryAttempt = Type.Object(
  {
    id: Type.String({ description: 'Attempt identifier (`att_…`).' }),
    attempted_at: timestamp('When the attempt started.'),
    status_code: nullable(
      Type.Integer({ description: 'The HTTP status the receiver answered; null when no response came.' }),
    ),
    duration_ms: Type.Integer({
      description: 'From connecting to the end of the response (or the failure).',
    }),
    error: nullable(
      Type.String({
        description: 'Why the attempt failed (no response, timeout, a non-2xx status…); null on success.',
      }),
    ),
    response_excerpt: nullable(
      Type.String({ description: 'The first 4 KiB of the response body; null when no response came.' }),
    ),
  },
  { title: 'DeliveryAttempt' },
);

export const Delivery = Type.Object(
  {
    object: Type.Literal('delivery'),
    id: Type.String({ description: 'Delivery identifier (`dlv_…`): one event to one webhook.' }),
    webhook_id: Type.String(),
    event_id: Type.String(),
    event_type: Type.String({ description: 'The kind of the event delivered.' }),
    status: DeliveryStatusSchema,
    attempts: Type.Integer({ description: 'Attempts made so far (the length of attempt_log).' }),
    next_attempt_at: nullable(timestamp('When the next attempt is due; null once no longer pending.')),
    last_attempt_at: nullable(timestamp('When the last attempt started.')),
    last_status_code: nullable(
      Type.Integer({ description: 'HTTP status of the last attempt, if any came.' }),
    ),
    last_error: nullable(Type.String({ description: 'Why the last attempt failed; null after a success.' })),
    created_at: timestamp('When the delivery was created, with its event (or by a redelivery).'),
    completed_at: nullable(timestamp('When it succeeded or failed for good.')),
    attempt_log: Type.Array(DeliveryAttempt, { description: 'Every attempt, oldest first.' }),
  },
  { title: 'Delivery' },
);

export type DeliveryView = Static<typeof Delivery>;
export type DeliveryAttemptView = Static<typeof DeliveryAttempt>;

export function toAttemptView(row: Row<'delivery_attempts'>): DeliveryAttemptView {
  return {
    id: row.id,
    attempted_at: row.attempted_at,
    status_code: row.status_code,
    duration_ms: Number(row.duration_ms),
    error: row.error,
    response_excerpt: row.response_excerpt,
  };
}

/** One view for every place a delivery is shown (an event's deliveries, a webhook's delivery log). */
export function toDeliveryView(
  row: Row<'deliveries'>,
  eventType: string,
  attempts: readonly Row<'delivery_attempts'>[],
): DeliveryView {
  return {
    object: 'delivery',
    id: row.id,
    webhook_id: row.webhook_id,
    event_id: row.event_id,
    event_type: eventType,
    status: row.status,
    // From the log rather than the row's counter, which recovery resets to start the schedule over.
    attempts: attempts.length,
    next_attempt_at: row.status === 'pending' ? row.next_attempt_at : null,
    last_attempt_at: row.last_attempt_at,
    last_status_code: row.last_status_code,
    last_error: row.last_error,
    created_at: row.created_at,
    completed_at: row.completed_at,
    attempt_log: attempts.map(toAttemptView),
  };
}
