import { randomBytes } from 'node:crypto';
import { invalidParam } from '../../lib/errors.ts';
import { EVENT_KIND_NAMES, type EventKind, isEventKind } from '../event-kinds/event-kinds.ts';
import { resendEventType, resendPayload } from '../deliveries/resend-payload.ts';
import type { EventView } from '../events/events.schemas.ts';
import type { DeliveryAttemptView, DeliveryView } from '../deliveries/deliveries.schemas.ts';
import type { WebhookView } from '../webhooks/webhooks.schemas.ts';

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

// Resend's event names that Postwire emits under other names (their renderings: deliveries/resend-payload.ts).
// The other `email.*` names that both have (`email.sent`, `email.delivered`, `email.bounced`…) are the same;
// Postwire's own (`email.unsubscribed`, `domain.verified`, `domain.failed`) are taken as they are.
const POSTWIRE_KINDS: Record<string, EventKind[]> = {
  'domain.updated': ['domain.verified', 'domain.failed'],
};

function toPostwireEvents(events: unknown): unknown {
  if (!Array.isArray(events)) return events;
  const kinds = events.flatMap((event: unknown, index) => {
    if (typeof event !== 'string') return [event];
    const mapped = POSTWIRE_KINDS[event];
    if (mapped) return mapped;
    if (isEventKind(event)) return [event];
    throw invalidParam(
      `events[${index}]`,
      `Postwire has no event '${event}'; the events it sends are: ${[...EVENT_KIND_NAMES, ...Object.keys(POSTWIRE_KINDS)].join(', ')}.`,
    );
  });
  return [...new Set(kinds)];
}

/** Resend's webhook fields (`endpoint`, `status`, its event names) as Postwire's (`url`, `enabled`, kinds). */
export function toPostwireWebhook(body: unknown): unknown {
  if (!isObject(body)) return body;
  const { endpoint, events, status, ...rest } = body;
  return {
    ...rest,
    ...(endpoint !== undefined ? { url: endpoint } : {}),
    ...(events !== undefined ? { events: toPostwireEvents(events) } : {}),
    ...(status !== undefined
      ? { enabled: status === 'enabled' ? true : status === 'disabled' ? false : status }
      : {}),
  };
}

/**
 * Resend makes a webhook's signing secret itself and answers it at creation; Postwire takes the one its client
 * gives. The adapter gives one in Standard Webhooks' `whsec_` form, which Resend's `webhooks.verify` reads.
 */
export const newSigningSecret = (): string => `whsec_${randomBytes(32).toString('base64')}`;

const toResendEvents = (events: readonly EventKind[]) => [...new Set(events.map(resendEventType))];

/** A webhook as Resend lists it (its secret is shown once, at creation, and never again). */
export function toResendWebhook(webhook: WebhookView) {
  return {
    object: 'webhook' as const,
    id: webhook.id,
    created_at: webhook.created_at,
    status: webhook.enabled ? ('enabled' as const) : ('disabled' as const),
    endpoint: webhook.url,
    events: toResendEvents(webhook.events),
  };
}

/**
 * A delivery of Postwire's log as Resend's webhook event (one event at one webhook): its id is the delivery's
 * (`dlv_…`; the event's own id is the `webhook-id` header). A pending delivery already tried is `attempting`.
 */
export function toResendEventLog(delivery: DeliveryView) {
  const status =
    delivery.status === 'succeeded'
      ? ('success' as const)
      : delivery.status === 'failed'
        ? ('failed' as const)
        : delivery.attempts > 0
          ? ('attempting' as const)
          : ('pending' as const);
  return {
    id: delivery.id,
    type: resendEventType(delivery.event_type as EventKind),
    created_at: delivery.created_at,
    status,
  };
}

/** An attempt as Resend lists it: no answer (a refused connection, a timeout) is status 0. */
function toResendAttempt(attempt: DeliveryAttemptView) {
  return {
    id: attempt.id,
    http_status_code: attempt.status_code ?? 0,
    // What the receiver answered (the start of it); with no answer, why.
    response: (attempt.status_code === null ? attempt.error : attempt.response_excerpt) ?? '',
    sent_at: attempt.attempted_at,
  };
}

/** A delivery's attempts, oldest first, paged here: they are few (the retry schedule bounds them). */
export function pageOfAttempts(delivery: DeliveryView, query: { limit?: number; after?: string }) {
  const attempts = delivery.attempt_log.map(toResendAttempt);
  const { after, limit = attempts.length } = query;
  const start = after === undefined ? 0 : attempts.findIndex((attempt) => attempt.id === after) + 1;
  if (start === 0 && after !== undefined) {
    throw invalidParam('after', 'after must be an attempt id from this list.');
  }
  return { items: attempts.slice(start, start + limit), hasMore: start + limit < attempts.length };
}

/** A delivery and its event as Resend's `webhooks.events.get` answers: the payload in Resend's shape. */
export function toResendEventDetail(delivery: DeliveryView, event: EventView) {
  const payload = resendPayload({
    type: event.type,
    createdAt: event.created_at,
    data: JSON.stringify(event.data),
  });
  return {
    object: 'webhook_event' as const,
    ...toResendEventLog(delivery),
    next_attempt_at: delivery.next_attempt_at,
    payload: JSON.parse(payload) as unknown,
  };
}
