import type { EventKind } from '../event-kinds/event-kinds.ts';

/**
 * A stored event as Resend's webhooks carry it (`{ type, created_at, data }`, the `resend` package's
 * `WebhookEventPayload`), for webhooks whose `format` is `resend`. It is the same event as Postwire's rendering
 * (webhookPayload in deliveries.worker.ts): same id (the `webhook-id` header), same time, same addresses, read
 * from the same stored data; only names and shape differ.
 *
 * One row per kind Postwire emits. A kind added to the catalogue without a row here is delivered under its
 * own name with its data as Postwire has it (a Resend handler's `switch` passes over a type it does not know).
 */

type Data = Record<string, unknown>;

interface Rendering {
  /** Resend's name of the kind. */
  type: string;
  /** Resend's `data`, from Postwire's; absent: the data as it is. */
  data?: (data: Data, event: StoredEvent) => Data;
}

export interface StoredEvent {
  type: string;
  createdAt: string;
  /** The event's data, as stored JSON text. */
  data: string;
}

const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
const object = (value: unknown): Data =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Data) : {};

/**
 * What every `email.*` event of Resend carries (`BaseEmailEventData`). Postwire's events are about one
 * recipient (`recipient`), kept beside Resend's fields; `created_at` is the event's time; `message_id` the
 * email's Message-ID header (empty for an event stored before events carried it).
 */
function emailData(data: Data, event: StoredEvent): Data {
  return {
    email_id: data.email_id,
    created_at: event.createdAt,
    message_id: text(data.message_id) ?? '',
    from: data.from,
    to: data.to,
    subject: data.subject,
    ...(data.template_id !== undefined ? { template_id: data.template_id } : {}),
    tags: data.tags,
    recipient: data.recipient,
  };
}

// Postwire's bounce types as Resend's (Amazon SES's): only a hard bounce is permanent.
const BOUNCE_TYPES: Record<string, string> = {
  hard: 'Permanent',
  soft: 'Transient',
  policy: 'Transient',
  undetermined: 'Undetermined',
};

/** What a server said about the attempt: its reply, or why no server replied. */
const attemptWords = (data: Data): string | undefined => text(data.smtp_response) ?? text(data.error);

const email =
  (extra?: (data: Data, event: StoredEvent) => Data) =>
  (data: Data, event: StoredEvent): Data => ({ ...emailData(data, event), ...extra?.(data, event) });

const RENDERINGS: Partial<Record<EventKind, Rendering>> = {
  'email.sent': { type: 'email.sent', data: email() },
  'email.delivered': { type: 'email.delivered', data: email() },
  'email.delivery_delayed': { type: 'email.delivery_delayed', data: email() },
  'email.complained': { type: 'email.complained', data: email() },
  'email.opened': { type: 'email.opened', data: email() },
  'email.bounced': {
    type: 'email.bounced',
    data: email((data) => {
      const bounce = object(data.bounce);
      const type = text(bounce.type) ?? 'undetermined';
      return {
        bounce: {
          message: text(bounce.diagnostic) ?? attemptWords(data) ?? '',
          subType: type === 'undetermined' ? 'Undetermined' : 'General',
          type: BOUNCE_TYPES[type] ?? 'Undetermined',
        },
      };
    }),
  },
  'email.clicked': {
    type: 'email.clicked',
    data: email((data, event) => {
      const click = object(data.click);
      return {
        click: {
          // Postwire does not keep the clicking address.
          ipAddress: '',
          link: text(click.url) ?? '',
          timestamp: event.createdAt,
          userAgent: text(click.user_agent) ?? '',
        },
      };
    }),
  },
  'email.failed': {
    type: 'email.failed',
    data: email((data) => ({ failed: { reason: attemptWords(data) ?? 'failed' } })),
  },
  'email.suppressed': {
    type: 'email.suppressed',
    data: email((data) => {
      const reason = text(object(data.suppression).reason) ?? 'suppressed';
      return {
        suppressed: {
          message: `The recipient is on the suppression list (${reason}): the message was not sent to it.`,
          type: reason,
        },
      };
    }),
  },
  'email.received': { type: 'email.received', data: receivedData },
  // Resend has one domain event for both: the domain's status says which.
  'domain.verified': { type: 'domain.updated', data: domainData },
  'domain.failed': { type: 'domain.updated', data: domainData },
};

const address = (value: unknown): string => text(object(value).address) ?? '';

/**
 * Resend's `ReceivedEmailEventData`. Postwire keeps no Bcc of a received message (it is not in its headers);
 * an attachment's `id` is its index, as GET /v1/received-emails/{id}/attachments/{index} takes it.
 */
function receivedData(data: Data): Data {
  const list = (value: unknown) => (Array.isArray(value) ? value.map(address) : []);
  return {
    email_id: data.received_email_id,
    created_at: data.received_at,
    from: address(data.from),
    to: list(data.to),
    bcc: [],
    cc: list(data.cc),
    received_for: [data.recipient],
    message_id: data.message_id ?? '',
    subject: data.subject ?? '',
    attachments: (Array.isArray(data.attachments) ? data.attachments.map(object) : []).map((attachment) => ({
      id: String(attachment.index),
      filename: attachment.filename ?? null,
      content_type: attachment.content_type,
      content_disposition: attachment.disposition ?? null,
      content_id: attachment.content_id ?? null,
    })),
  };
}

/** Resend's `DomainEventData`: the domain as Resend's domain views show it, its records included. */
function domainData(data: Data, event: StoredEvent): Data {
  const records = Array.isArray(data.records) ? data.records.map(object) : [];
  return {
    id: data.domain_id,
    name: data.name,
    status: data.status,
    created_at: event.createdAt,
    region: 'us-east-1',
    records: records.map((record) => ({
      record: text(record.purpose) ?? '',
      name: record.name,
      type: record.type,
      ttl: 'Auto',
      status: record.status === 'verified' ? 'verified' : record.status === 'failed' ? 'failed' : 'pending',
      value: record.value,
    })),
  };
}

/** Resend's name of a Postwire kind (its own when Resend has none). */
export const resendEventType = (kind: string): string => RENDERINGS[kind as EventKind]?.type ?? kind;

/** The body a `resend`-format webhook receives for the event. */
export function resendPayload(event: StoredEvent): string {
  const rendering = RENDERINGS[event.type as EventKind];
  const data = JSON.parse(event.data) as Data;
  return JSON.stringify({
    type: rendering?.type ?? event.type,
    created_at: event.createdAt,
    data: rendering?.data ? rendering.data(data, event) : data,
  });
}
