import type { ReceivedEmailRecord } from './received.repo.ts';
import type { ParsedReceived } from './received-reader.ts';
import type { ReceivedEmailSummaryView, ReceivedEmailView } from './received.schemas.ts';

// A received email as the API shows it, and as `email.received` carries it: one shape, the bodies in the
// event only up to a size.

/**
 * The bodies an `email.received` payload carries at most, in UTF-8 bytes (text, reply text and html together):
 * a webhook receiver is not a mail store. What would go past it is left out (null) with `truncated: true`;
 * GET /v1/received-emails/{id} has it whole.
 */
export const RECEIVED_EVENT_BODY_BYTES = 256 * 1024;

type Readable = Extract<ParsedReceived, { readable: true }>;

const contentOf = (record: ReceivedEmailRecord): ParsedReceived =>
  (record.content as ParsedReceived | undefined) ?? { readable: false, reason: 'not loaded', subject: null };

export function toReceivedSummary(record: ReceivedEmailRecord): ReceivedEmailSummaryView {
  const content = record.content as ParsedReceived | undefined;
  return {
    object: 'received_email',
    id: record.id,
    route_id: record.routeId,
    recipient: record.recipient,
    mailbox_hash: record.mailboxHash,
    received_at: record.receivedAt,
    status: record.status,
    mail_from: record.mailFrom,
    from: content?.readable
      ? content.from
      : record.fromAddress
        ? { address: record.fromAddress, name: '' }
        : null,
    subject: record.subject,
    message_id: record.messageId,
    in_reply_to_email_id: record.inReplyToEmailId,
    in_reply_to_recipient: record.inReplyToRecipient,
    size: record.size,
    attachment_count: record.attachmentCount,
    authentication: (record.authentication ?? null) as ReceivedEmailSummaryView['authentication'],
    spam: (record.spam ?? null) as ReceivedEmailSummaryView['spam'],
  };
}

/** The whole received email (its content loaded). */
export function toReceivedView(record: ReceivedEmailRecord): ReceivedEmailView {
  const content = contentOf(record);
  const readable: Readable | undefined = content.readable ? content : undefined;
  return {
    ...toReceivedSummary(record),
    unreadable_reason: content.readable ? null : content.reason,
    to: readable?.to ?? [],
    cc: readable?.cc ?? [],
    reply_to: readable?.reply_to ?? [],
    date: readable?.date ?? null,
    in_reply_to: readable?.in_reply_to ?? null,
    references: readable?.references ?? [],
    text: readable?.text ?? null,
    html: readable?.html ?? null,
    reply_text: readable?.reply_text ?? null,
    attachments: (readable?.attachments ?? []).map((attachment, index) => ({ index, ...attachment })),
    headers: readable?.headers ?? [],
  };
}

/**
 * The data of `email.received`: the view without the header list, the bodies while they fit in
 * RECEIVED_EVENT_BODY_BYTES (text first, then the reply text, then the html), never attachment bytes.
 */
export function receivedEventData(record: ReceivedEmailRecord): Record<string, unknown> {
  const { headers: _headers, object: _object, id, ...view } = toReceivedView(record);
  let room = RECEIVED_EVENT_BODY_BYTES;
  let truncated = false;
  const fit = (body: string | null): string | null => {
    if (body === null) return null;
    const bytes = Buffer.byteLength(body);
    if (bytes > room) {
      truncated = true;
      return null;
    }
    room -= bytes;
    return body;
  };
  const text = fit(view.text);
  const replyText = fit(view.reply_text);
  const html = fit(view.html);
  return {
    received_email_id: id,
    ...view,
    text,
    reply_text: replyText,
    html,
    truncated,
    url: `/v1/received-emails/${id}`,
  };
}
