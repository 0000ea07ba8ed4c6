import { mapPage, type PageRequest } from '../../db/pagination.ts';
import type { EmailStatus } from '../../db/schema.ts';
import type { Clock } from '../../lib/clock.ts';
import { DomainError, notFound } from '../../lib/errors.ts';
import { isId } from '../../lib/ids.ts';
import { parseAddress } from '../../lib/addresses.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import { aligned } from '../domains/domains.service.ts';
import type { EventService } from '../events/events.service.ts';
import { PENDING } from './status.ts';
import type { EmailAttachment } from './email-rows.ts';
import type { EmailRecord, EmailRepo, RecipientRow } from './emails.repo.ts';
import type { EmailListFilters, EmailSummaryView, EmailView, RawEmailView } from './emails.schemas.ts';
import { attachmentContentType } from './attachments.ts';
import type { TrackingRepo } from './tracking.repo.ts';
import type { Transaction } from '../../db/transaction.ts';

/* An email as the API shows it: its summary (lists), its full view with recipients and timeline, its MIME. */

/** The status to show: a scheduled email whose time has come is queued, even before a worker has seen it. */
export const shownStatus = (email: EmailRecord, now: string): EmailStatus =>
  email.status === 'scheduled' && email.scheduledAt !== null && email.scheduledAt <= now
    ? 'queued'
    : email.status;

export function toEmailSummary(email: EmailRecord, now: string): EmailSummaryView {
  return {
    object: 'email',
    id: email.id,
    from: email.from,
    to: email.to,
    cc: email.cc,
    bcc: email.bcc,
    reply_to: email.replyTo,
    subject: email.subject,
    status: shownStatus(email, now),
    tags: email.tags,
    template_id: email.templateId,
    template_version: email.templateVersion,
    message_id: email.messageId,
    source: email.source,
    smtp_username: email.smtpUsername,
    broadcast_id: email.broadcastId ?? null,
    scheduled_at: email.scheduledAt,
    created_at: email.createdAt,
    updated_at: email.updatedAt,
  };
}

const toRecipientView = (row: RecipientRow) => ({
  address: row.address,
  type: row.type,
  status: row.status,
  attempts: Number(row.attempts),
  last_response: row.last_response,
  last_attempt_at: row.last_attempt_at,
  next_attempt_at: PENDING.has(row.status) ? row.next_attempt_at : null,
  throttled: throttledOf(row),
  completed_at: row.completed_at,
});

/** A recipient waiting for pacing (a warm-up's allowance, a destination's back-off) rather than a retry. */
function throttledOf(row: RecipientRow) {
  const reason = row.wait_reason;
  if (!PENDING.has(row.status) || row.wait_until === null) return null;
  if (reason !== 'warmup' && reason !== 'destination') return null;
  return { reason, until: row.wait_until } as const;
}

/** How an email is authenticated, as decided when it was accepted (null and false for older emails). */
function authenticationView(email: EmailRecord): EmailView['authentication'] {
  const parsed = parseAddress(email.from);
  const fromDomain = parsed.ok ? parsed.value.domain.toLowerCase() : '';
  return {
    dkim_domain: email.dkimDomain,
    return_path_domain: email.returnPathDomain,
    dmarc_aligned: email.dkimDomain !== null && aligned(email.dkimDomain, fromDomain),
  };
}

export interface EmailViewsDeps {
  repo: EmailRepo;
  clock: Clock;
  /** An email's timeline is its events. */
  events: Pick<EventService, 'forEmail'>;
  /** Where the tracking settings and recipients' engagement are read. */
  engagement: { repo: TrackingRepo };
}

export function createEmailViews({ repo, clock, events: eventService, engagement }: EmailViewsDeps) {
  // Both read in `transaction` when given: the one that has just changed the email (scheduled-changes.ts).
  async function load(projectId: string, id: string, transaction?: Transaction): Promise<EmailRecord> {
    const email = isId('msg', id) ? await repo.find(projectId, id, transaction) : undefined;
    if (!email) throw notFound('email', id);
    return email;
  }

  async function view(email: EmailRecord, transaction?: Transaction): Promise<EmailView> {
    const [recipients, events, attachments, engaged, tracked] = await Promise.all([
      repo.recipients(email.projectId, email.id, transaction),
      eventService.forEmail(email.projectId, email.id, transaction),
      repo.attachments(email.id, transaction),
      engagement?.repo.recipientEngagement(email.projectId, email.id, transaction),
      engagement?.repo.settingsFor([email.id], transaction),
    ]);
    const timeline = events.map((event) => {
      const data = JSON.parse(event.data) as {
        recipient?: string;
        smtp_response?: string;
        open?: { automated?: boolean };
        click?: { url?: string; automated?: boolean };
        suppression?: { reason?: string };
      };
      const detail =
        event.type === 'email.clicked' ? data.click : event.type === 'email.opened' ? data.open : undefined;
      return {
        id: event.id,
        type: event.type,
        recipient: data.recipient ?? '',
        created_at: event.createdAt,
        smtp_response: data.smtp_response ?? null,
        ...(data.click?.url !== undefined && event.type === 'email.clicked' ? { url: data.click.url } : {}),
        ...(detail?.automated !== undefined ? { automated: Boolean(detail.automated) } : {}),
        ...(event.type === 'email.suppressed' && data.suppression?.reason !== undefined
          ? { suppression_reason: data.suppression.reason }
          : {}),
      };
    });
    const settings = tracked?.get(email.id);
    return {
      ...toEmailSummary(email, clock.now().toISOString()),
      html: email.html,
      text: email.text,
      headers: email.headers,
      attachments: attachments.map((attachment) => ({
        filename: attachment.filename,
        // Stored since sends derive it; an email accepted before has none stored, and gets the same answer.
        content_type: attachmentContentType(attachment.filename, attachment.contentType),
        content_id: attachment.contentId,
        size: attachment.size,
      })),
      authentication: authenticationView(email),
      tracking: {
        opens: settings?.opens ?? false,
        clicks: settings?.clicks ?? false,
        unsubscribe: settings?.unsubscribe ?? false,
      },
      recipients: recipients.map((row) => {
        const base = toRecipientView(row);
        // Only an email that asked for tracking or unsubscribe shows what came of it.
        if (!engaged || !settings) return base;
        const record = engaged.get(row.id);
        const address = row.address.toLowerCase();
        return {
          ...base,
          first_opened_at: record?.firstOpenedAt ?? null,
          open_count: record?.openCount ?? 0,
          clicks: timeline
            .filter((event) => event.type === 'email.clicked' && event.recipient.toLowerCase() === address)
            .map((event) => ({
              url: event.url ?? '',
              clicked_at: event.created_at,
              automated: event.automated ?? false,
            })),
          unsubscribed_at: record?.unsubscribedAt ?? null,
        };
      }),
      events: timeline,
    };
  }

  return {
    load,
    view,

    async get(projectId: string, id: string): Promise<EmailView> {
      return view(await load(projectId, id));
    },

    async list(projectId: string, page: PageRequest, filters: EmailListFilters = {}) {
      const result = await repo.list(projectId, page, filters);
      const now = clock.now().toISOString();
      return mapPage(result, (email) => toEmailSummary(email, now));
    },

    /** The captured MIME: the view's fields, and the message as the chunks it is kept in (`raw`). */
    async raw(projectId: string, id: string): Promise<{ head: Omit<RawEmailView, 'raw'>; raw: ByteChunks }> {
      const email = await load(projectId, id);
      const raw = await repo.raw(projectId, email.id);
      if (raw === undefined) {
        throw new DomainError(
          'not_found',
          'raw_not_available',
          `Email '${id}' has no captured message: the MIME is kept only by the capture transport, once the email has been processed.`,
          'id',
        );
      }
      return { head: { object: 'raw_email', id: email.id, content_type: 'message/rfc822' }, raw };
    },

    /** The email's attachments (without content), in order: the `index` of each is its place here. */
    async attachments(projectId: string, id: string): Promise<EmailAttachment[]> {
      return repo.attachments((await load(projectId, id)).id);
    },

    /** One attachment with its bytes; 404 for an index the email does not have. */
    async attachment(projectId: string, id: string, index: number): Promise<Required<EmailAttachment>> {
      const email = await load(projectId, id);
      const attachment = await repo.attachmentAt(email.id, index);
      if (!attachment) throw notFound('attachment', `${email.id}/attachments/${index}`);
      return attachment;
    },
  };
}

export type EmailViews = ReturnType<typeof createEmailViews>;
