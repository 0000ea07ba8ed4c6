import type { EmailEventView, EmailSummaryView, EmailView } from '../emails/emails.schemas.ts';
import { unsupportedField } from './resend-errors.ts';

// Resend's `last_event` values (GetEmailResponseSuccess in resend@6).
type LastEvent =
  | 'bounced'
  | 'canceled'
  | 'clicked'
  | 'complained'
  | 'delivered'
  | 'delivery_delayed'
  | 'failed'
  | 'opened'
  | 'queued'
  | 'scheduled'
  | 'sent'
  | 'suppressed';

const EVENT_NAMES = new Set<string>([
  'bounced',
  'clicked',
  'complained',
  'delivered',
  'delivery_delayed',
  'failed',
  'opened',
  'sent',
  'suppressed',
]);

// An email's status as Resend's last event. `mixed` (recipients that ended differently, which Resend's
// one-status model has no word for) shows as `sent`: every recipient was at least tried.
const EVENT_BY_STATUS: Record<EmailSummaryView['status'], LastEvent> = {
  scheduled: 'scheduled',
  queued: 'queued',
  delayed: 'delivery_delayed',
  sent: 'sent',
  delivered: 'delivered',
  bounced: 'bounced',
  failed: 'failed',
  complained: 'complained',
  cancelled: 'canceled',
  suppressed: 'suppressed',
  mixed: 'sent',
};

/** The latest event Resend has a name for (an open or click after delivery), else the email's status. */
function lastEvent(status: EmailSummaryView['status'], events: readonly EmailEventView[] = []): LastEvent {
  if (status === 'cancelled' || status === 'scheduled') return EVENT_BY_STATUS[status];
  for (const event of [...events].reverse()) {
    const name = event.type.replace(/^email\./, '');
    if (EVENT_NAMES.has(name)) return name as LastEvent;
  }
  return EVENT_BY_STATUS[status];
}

const orNull = (addresses: string[]) => (addresses.length === 0 ? null : addresses);

/** An email in a Resend list (ListEmail: no bodies, no tags). */
export function toResendListEmail(email: EmailSummaryView) {
  return {
    id: email.id,
    to: email.to,
    from: email.from,
    created_at: email.created_at,
    subject: email.subject,
    bcc: orNull(email.bcc),
    cc: orNull(email.cc),
    reply_to: orNull(email.reply_to),
    last_event: lastEvent(email.status),
    scheduled_at: email.scheduled_at,
    message_id: email.message_id,
  };
}

/** An email as Resend's `emails.get` answers it: `last_event`, tags as a list of `{ name, value }`. */
export function toResendEmail(email: EmailView) {
  return {
    object: 'email' as const,
    ...toResendListEmail(email),
    last_event: lastEvent(email.status, email.events),
    html: email.html,
    text: email.text,
    tags: Object.entries(email.tags).map(([name, value]) => ({ name, value })),
  };
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A send as Resend's SDK writes it, as Postwire's send takes it (which already takes Resend's `reply_to`,
 * `tags` list, `scheduled_at`, `template` and attachments' `content_type`/`content_id`): only what Postwire
 * has no equivalent for is refused here; everything else is checked by the /v1 schema and service after.
 */
export function toPostwireSend(body: unknown, prefix = ''): unknown {
  if (!isObject(body)) return body;
  const { topic_id: topic, attachments, ...rest } = body;
  if (topic !== undefined && topic !== null) {
    throw unsupportedField(
      `${prefix}topic_id`,
      'Postwire does not implement topics; leave topic_id out (one-click unsubscribe is `unsubscribe: true` on a send).',
    );
  }
  if (!Array.isArray(attachments)) return attachments === undefined ? rest : { ...rest, attachments };
  return {
    ...rest,
    attachments: attachments.map((attachment: unknown, index) => {
      if (!isObject(attachment)) return attachment;
      const { path, ...kept } = attachment;
      if (path !== undefined && path !== null) {
        throw unsupportedField(
          `${prefix}attachments[${index}].path`,
          'Postwire does not fetch attachments from a URL; send the file as base64 `content`.',
        );
      }
      return kept;
    }),
  };
}
