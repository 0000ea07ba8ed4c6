import { htmlToText } from 'html-to-text';
import type { Kysely } from 'kysely';
import type { PageRequest } from '../../db/pagination.ts';
import type { Database } from '../../db/schema.ts';
import { inTransaction, type Transaction } from '../../db/transaction.ts';
import type { EmailStatus } from '../../db/schema.ts';
import { createBoundedMemo } from '../../lib/memo.ts';
import type { Clock } from '../../lib/clock.ts';
import { DomainError, invalidParam, notFound, RetryLaterError } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { Notifier } from '../../queue/notifier.ts';
import { missingVariables, type TemplateRenderer } from '../templates/render.ts';
import type { TemplateRepo, TemplateVersionRecord } from '../templates/templates.repo.ts';
import { ALIAS_PATTERN } from '../templates/templates.schemas.ts';
import { formatAddress, parseAddress, type ParsedAddress } from '../../lib/addresses.ts';
import { PENDING } from './status.ts';
import {
  CancelRefused,
  RescheduleRefused,
  DailyLimitReached,
  type EmailRecord,
  type EmailRepo,
  type NewEmail,
  type NewRecipient,
  type RecipientRow,
} from './emails.repo.ts';
import type { SuppressionRecord } from '../suppressions/suppressions.repo.ts';

/** What the sending key allows (the caller's): `domainId`, the one domain it may send from, or null for any. */
export interface KeySender {
  domainId: string | null;
}

/** An SMTP submission as the emails service takes it (read by the submission module). */
export interface Submission {
  /** The From field (`Name <a@b>` or `a@b`). */
  from: string;
  /**
   * The addresses of the message's Sender, Resent-From and Resent-Sender fields, by field: each passes the
   * rule From passes (the API has no such fields: it refuses them as reserved headers).
   */
  senders: Array<{ field: string; address: string }>;
  /** The envelope's recipients (RCPT TO). */
  recipients: string[];
  /** The addresses of the To and Cc fields: which recipients are to and cc (the others are bcc). */
  to: string[];
  cc: string[];
  replyTo: string[];
  subject: string;
  messageId: string | null;
  tags: Record<string, string>;
  sendAt: string | undefined;
  /** One-click unsubscribe (List-Unsubscribe per recipient). */
  unsubscribe: boolean;
  /** Opens and clicks tracked in the message's html part(s), as an API send's tracking. */
  track: { opens: boolean; clicks: boolean };
  /** The SMTP AUTH username. */
  username: string;
  /** The message as it is sent, given its Message-ID and the time it was accepted. */
  build(messageId: string, acceptedAt: Date): Buffer[];
}

/** A client that submits the same Message-ID again within this gets the first email back. */
export const SUBMISSION_REPEAT_WINDOW_MS = 24 * 3_600_000;

/** A send checked and rendered before its transaction: its emails and the time it was accepted. */
export interface SendPlan {
  emails: NewEmail[];
  now: Date;
}

type SuppressedEntries = Map<string, SuppressionRecord>;
import {
  type AcceptedEmailView,
  type EmailListFilters,
  type EmailSummaryView,
  type EmailView,
  MAX_SCHEDULE_AHEAD_MS,
  type RawEmailView,
  type RescheduleEmailInput,
  type SendEmailInput,
} from './emails.schemas.ts';
import { aligned, type DomainService, type SenderAuthentication } from '../domains/domains.service.ts';
import type { EventService } from '../events/events.service.ts';
import { type SuppressionRepo, suppressionKey } from '../suppressions/suppressions.repo.ts';
import { createSendGroups } from './send-groups.ts';
import { overDailyLimit, quotaDay } from './fair-queue.repo.ts';
import { emailEventData } from './event-data.ts';
import { attachmentContentType, checkAttachments } from './attachments.ts';
import type { DecodedFields } from '../../lib/base64.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import type { EngagementDefaults } from '../../config.ts';
import { type MetricsRecorder, noMetrics } from '../metrics/instruments.ts';
import { trackedLinks, UNSUBSCRIBE_PLACEHOLDER } from './tracked-html.ts';
import { findSubmittedLinks } from './submitted-html.ts';
import type { EngagementStore, TrackingSettings } from './tracking.ts';

export interface EmailServiceDeps {
  repo: EmailRepo;
  templates: TemplateRepo;
  renderer: TemplateRenderer;
  clock: Clock;
  /** Recipients a project may send to per UTC day; 0: no limit. */
  dailyLimit: number;
  /** Wakes this process's sending worker when emails are accepted. */
  notifier: Notifier;
  /** An email's timeline is its events; a suppressed recipient's event is emitted with the email. */
  events: Pick<EventService, 'forEmail' | 'emit'>;
  /** Counts accepted emails (/metrics); nothing is counted when absent. */
  metrics?: Pick<MetricsRecorder, 'emailsAccepted'> | undefined;
  /** The projects' suppression lists: read before a grouped send's transaction, in a keyed send's. */
  suppressions: Pick<SuppressionRepo, 'matchingIn'>;
  /** Where sends outside an Idempotency-Key's transaction open their own. */
  db: Kysely<Database>;
  /** Concurrent sends written together, at most this many emails a group (send-groups.ts); unset: each alone. */
  sendGroups?: { maxEmails: number } | undefined;
  /** Which From domains the project may send as, and how they are signed (the domains module). */
  senders?: Pick<DomainService, 'authorizeSender' | 'authorizeKeyDomain'> | undefined;
  /** Opens, clicks and one-click unsubscribe: PUBLIC_URL, the defaults, and where the settings are kept. */
  engagement: EmailEngagementDeps;
}

export interface EmailEngagementDeps {
  /** Unset: a send asking for tracking or unsubscribe is refused (422). */
  publicUrl: string | undefined;
  defaults: EngagementDefaults;
  repo: EngagementStore;
}

/** A 429 that also says when the limit resets (the route sends it as `retry-after`). */
export class DailyLimitError extends RetryLaterError {
  constructor(message: string, retryAfterSeconds: number) {
    super('daily_send_limit', message, retryAfterSeconds);
  }
}

// Headers the service writes itself, or that only a receiving server or the signer may add: a caller who
// set them could forge the sender, break the MIME structure or the DKIM signature.
const RESERVED_HEADERS = new Set([
  'from',
  'to',
  'cc',
  'bcc',
  'subject',
  'reply-to',
  'sender',
  'message-id',
  'date',
  'mime-version',
  'content-type',
  'content-transfer-encoding',
  'dkim-signature',
  'return-path',
  'received',
  'authentication-results',
  'x-mailer',
]);
const RESERVED_PREFIXES = ['content-', 'resent-', 'arc-'];
// RFC 5322 field-name: printable ASCII except the colon.
const HEADER_NAME = /^[\x21-\x39\x3b-\x7e]{1,76}$/;
/** A tag's name and its value: 1–256 letters, digits, '_' or '-' (the API's and SMTP submission's rule). */
export const TAG_PATTERN = /^[A-Za-z0-9_-]{1,256}$/;
const aliasShape = new RegExp(ALIAS_PATTERN);

export const MAX_RECIPIENTS = 150;
/** The status to show: a scheduled email whose time has come is queued, even before a worker has seen it. */
const shownStatus = (email: EmailRecord, now: string): EmailStatus =>
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
  completed_at: row.completed_at,
});

const USED_VARIABLES_CACHE_SIZE = 1000;
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

const secondsUntilNextUtcDay = (now: Date): number => {
  const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return Math.max(1, Math.ceil((next - now.getTime()) / 1000));
};

export function createEmailService({
  repo,
  templates,
  renderer,
  clock,
  dailyLimit,
  notifier,
  events: eventService,
  metrics = noMetrics,
  suppressions,
  db,
  sendGroups,
  senders,
  engagement,
}: EmailServiceDeps) {
  // What each published version needs, read from its Liquid once: versions never change, and a batch of
  // sends of one template would otherwise parse it once per email. Bounded, oldest entries dropped first.
  const usedVariables = createBoundedMemo<string, string[]>(USED_VARIABLES_CACHE_SIZE);
  const variablesUsedBy = (version: TemplateVersionRecord): string[] =>
    usedVariables(`${version.templateId}:${version.version}`, () => renderer.requiredVariables(version));

  const engagementDefaults = engagement.defaults;

  /** What the send asks for (its fields, else the defaults); refused when PUBLIC_URL is unset. */
  function resolveTracking(
    input: SendEmailInput,
    headers: Record<string, string>,
    prefix: string,
  ): Omit<TrackingSettings, 'links'> | undefined {
    const wanted = {
      opens: input.tracking?.opens ?? engagementDefaults.trackOpens,
      clicks: input.tracking?.clicks ?? engagementDefaults.trackClicks,
      unsubscribe: input.unsubscribe ?? engagementDefaults.listUnsubscribe,
    };
    if (!wanted.opens && !wanted.clicks && !wanted.unsubscribe) return undefined;
    if (engagement?.publicUrl === undefined) {
      const [param, what] = wanted.opens
        ? ['tracking.opens', 'Open tracking']
        : wanted.clicks
          ? ['tracking.clicks', 'Click tracking']
          : ['unsubscribe', 'One-click unsubscribe'];
      throw invalidParam(
        `${prefix}${param}`,
        `${what} needs PUBLIC_URL, the base URL recipients' mail clients reach; it is not configured.`,
        'public_url_missing',
      );
    }
    if (wanted.unsubscribe) {
      const own = Object.keys(headers).find((name) => name.toLowerCase().startsWith('list-unsubscribe'));
      if (own !== undefined) {
        throw invalidParam(
          `${prefix}headers.${own}`,
          `With unsubscribe: true Postwire sets List-Unsubscribe and List-Unsubscribe-Post itself; remove your ${own} header or send unsubscribe: false.`,
          'parameter_conflict',
        );
      }
    }
    return wanted;
  }

  /** Parses one address field (a string or a list), naming the exact item at fault. */
  function parseList(value: string | string[] | undefined, param: string): ParsedAddress[] {
    if (value === undefined) return [];
    const items = typeof value === 'string' ? [value] : value;
    return items.map((item, index) => {
      const where = typeof value === 'string' ? param : `${param}[${index}]`;
      const parsed = parseAddress(item);
      if (!parsed.ok) throw invalidParam(where, `${where} ${parsed.reason}.`, 'invalid_address');
      return parsed.value;
    });
  }

  function checkHeaders(headers: Record<string, string> | undefined, prefix: string): Record<string, string> {
    const checked: Record<string, string> = {};
    const seen = new Set<string>();
    for (const [name, value] of Object.entries(headers ?? {})) {
      const param = `${prefix}headers.${name}`;
      if (!HEADER_NAME.test(name)) {
        throw invalidParam(param, `'${name}' is not a header name (printable ASCII without ':', up to 76).`);
      }
      const lower = name.toLowerCase();
      if (RESERVED_HEADERS.has(lower) || RESERVED_PREFIXES.some((reserved) => lower.startsWith(reserved))) {
        throw invalidParam(
          param,
          `The ${name} header is set by the service and cannot be given in headers.`,
          'header_reserved',
        );
      }
      if (seen.has(lower)) throw invalidParam(param, `The ${name} header is given twice.`);
      seen.add(lower);
      // A line break in a value would start a header of the caller's choosing (header injection).
      // eslint-disable-next-line no-control-regex
      if (/[\r\n\u0000]/.test(value)) {
        throw invalidParam(param, `The ${name} header's value contains a line break.`);
      }
      checked[name] = value;
    }
    return checked;
  }

  /** Tags as an object, or as Resend sends them (a list of `{ name, value }`), into one object. */
  function checkTags(tags: SendEmailInput['tags'], prefix: string): Record<string, string> {
    if (Array.isArray(tags)) {
      const named: Record<string, string> = {};
      for (const [index, tag] of tags.entries()) {
        if (Object.hasOwn(named, tag.name)) {
          throw invalidParam(`${prefix}tags[${index}].name`, `The tag '${tag.name}' is given twice.`);
        }
        named[tag.name] = tag.value;
      }
      tags = named;
    }
    for (const [name, value] of Object.entries(tags ?? {})) {
      const param = `${prefix}tags.${name}`;
      if (!TAG_PATTERN.test(name)) {
        throw invalidParam(param, `Tag name '${name}' must be 1–256 letters, digits, '_' or '-'.`);
      }
      if (!TAG_PATTERN.test(value)) {
        throw invalidParam(param, `The value of tag '${name}' must be 1–256 letters, digits, '_' or '-'.`);
      }
    }
    return { ...tags };
  }

  function checkScheduledAt(value: string | undefined, now: Date, prefix: string): string | null {
    if (value === undefined) return null;
    const param = `${prefix}scheduled_at`;
    const time = Date.parse(value);
    if (Number.isNaN(time)) throw invalidParam(param, `${param} must be an ISO 8601 date-time.`);
    if (time - now.getTime() > MAX_SCHEDULE_AHEAD_MS) {
      throw invalidParam(param, `${param} can be at most 30 days ahead.`);
    }
    // A time that has come (or passed) means "now".
    return time <= now.getTime() ? null : new Date(time).toISOString();
  }

  const hasLineBreak = (text: string) => /[\r\n]/.test(text);

  async function renderTemplate(
    projectId: string,
    ref: NonNullable<SendEmailInput['template']>,
    prefix: string,
    unsubscribe: boolean,
  ): Promise<{ subject: string; html: string | null; text: string | null; id: string; version: number }> {
    const param = (name: string) => `${prefix}template.${name}`;
    let template;
    if (isId('tpl', ref.id)) template = await templates.find(projectId, ref.id);
    else if (aliasShape.test(ref.id)) template = await templates.findByAlias(projectId, ref.id);
    if (!template) {
      throw new DomainError('not_found', 'resource_missing', `No template with id '${ref.id}'.`, param('id'));
    }
    const number = ref.version ?? template.publishedVersion;
    if (number === null) {
      throw invalidParam(
        param('id'),
        `Template '${ref.id}' has no published version; publish it first.`,
        'template_not_published',
      );
    }
    const version = await templates.findVersion(projectId, template.id, number);
    if (!version) {
      throw new DomainError(
        'not_found',
        'resource_missing',
        `Template '${ref.id}' has no version ${number}.`,
        param('version'),
      );
    }
    // `{{ unsubscribe_url }}` renders as itself; each recipient's copy gets its own URL there at send time.
    const variables = unsubscribe
      ? { ...ref.variables, unsubscribe_url: UNSUBSCRIBE_PLACEHOLDER }
      : (ref.variables ?? {});
    // The declared variables, and the ones the template prints unconditionally, declared or not.
    const missing = missingVariables([...version.variables, ...variablesUsedBy(version)], variables);
    if (missing.length > 0) {
      throw invalidParam(
        param('variables'),
        `Missing template variable${missing.length > 1 ? 's' : ''}: ${missing.join(', ')}.`,
        'template_variables_missing',
      );
    }
    let rendered;
    try {
      rendered = await renderer.render(version, variables);
    } catch (error) {
      // The renderer names the template's field; here the fault is in the send, so it points at the template.
      if (error instanceof DomainError)
        throw new DomainError(error.kind, error.code, error.message, param('variables'));
      throw error;
    }
    if (rendered.subject === null || rendered.subject.trim() === '') {
      throw invalidParam(
        param('id'),
        `Template '${ref.id}' renders an empty subject.`,
        'template_subject_missing',
      );
    }
    if (hasLineBreak(rendered.subject)) {
      throw invalidParam(param('variables'), 'The rendered subject contains a line break.');
    }
    return {
      subject: rendered.subject,
      html: rendered.html,
      text: rendered.text,
      id: template.id,
      version: number,
    };
  }

  /**
   * The sender-domain rule, for From (and over SMTP for Sender, Resent-From and Resent-Sender too): a
   * domain-limited key sends only from its domain, and the project only as a domain SENDER_DOMAINS lets it
   * (domains.service). Refused: a 4xx naming `param`. Decisions are kept in `decided`, by domain.
   */
  async function authorizeSenderDomain(
    projectId: string,
    domain: string,
    param: string,
    /** The sending key's one domain (api_keys.domain_id), when it is limited to one. */
    keyDomainId: string | null,
    decided: Map<string, SenderAuthentication>,
  ): Promise<SenderAuthentication | undefined> {
    let authentication = decided.get(domain);
    if (!authentication && keyDomainId !== null) {
      // Without the domains module nothing can say what the domain is: refused rather than let through.
      if (!senders) throw new Error('a domain-limited key needs the domains service');
      await senders.authorizeKeyDomain(projectId, keyDomainId, domain, param);
    }
    if (senders && !authentication) {
      authentication = await senders.authorizeSender(projectId, domain, param);
      decided.set(domain, authentication);
    }
    return authentication;
  }

  /** Validates and renders one send; throws a 4xx naming the field (prefixed with `[i].` in a batch). */
  async function prepare(
    projectId: string,
    input: SendEmailInput,
    now: Date,
    prefix: string,
    /** The sending key's one domain (api_keys.domain_id), when it is limited to one. */
    keyDomainId: string | null,
    /** The files of a large body, decoded before it reached the route (lib/base64.ts). */
    decoded: DecodedFields | undefined,
    /** Sender decisions already made in this request, by From domain (a batch often repeats one). */
    decided = new Map<string, SenderAuthentication>(),
  ): Promise<NewEmail> {
    const from = parseList(input.from, `${prefix}from`)[0]!;
    const authentication = await authorizeSenderDomain(
      projectId,
      from.domain,
      `${prefix}from`,
      keyDomainId,
      decided,
    );
    const to = parseList(input.to, `${prefix}to`);
    const cc = parseList(input.cc, `${prefix}cc`);
    const bcc = parseList(input.bcc, `${prefix}bcc`);
    const replyTo = parseList(input.reply_to, `${prefix}reply_to`);

    // One SMTP recipient per address: the same address in to and cc gets one copy.
    const recipients: NewRecipient[] = [];
    const seen = new Set<string>();
    for (const [type, list] of [
      ['to', to],
      ['cc', cc],
      ['bcc', bcc],
    ] as const) {
      for (const parsed of list) {
        const key = parsed.address.toLowerCase();
        if (seen.has(key)) continue;
        seen.add(key);
        recipients.push({
          id: newId('rcpt'),
          position: recipients.length,
          type,
          address: parsed.address,
          host: parsed.domain,
        });
      }
    }
    if (recipients.length > MAX_RECIPIENTS) {
      throw invalidParam(`${prefix}to`, `At most ${MAX_RECIPIENTS} recipients in to, cc and bcc together.`);
    }

    const headers = checkHeaders(input.headers, prefix);
    const tags = checkTags(input.tags, prefix);
    const attachments = checkAttachments(input.attachments, prefix, decoded);
    const scheduledAt = checkScheduledAt(input.scheduled_at, now, prefix);
    const wanted = resolveTracking(input, headers, prefix);

    let subject: string;
    let html: string | null;
    let text: string | null;
    let templateId: string | null = null;
    let templateVersion: number | null = null;
    if (input.template) {
      const given = (['subject', 'html', 'text'] as const).find((field) => input[field] !== undefined);
      if (given) {
        throw invalidParam(
          `${prefix}${given}`,
          `Send either template or ${given}: a template brings its own subject, html and text.`,
          'parameter_conflict',
        );
      }
      const rendered = await renderTemplate(projectId, input.template, prefix, wanted?.unsubscribe ?? false);
      ({ subject, html, text } = rendered);
      templateId = rendered.id;
      templateVersion = rendered.version;
    } else {
      if (input.subject === undefined) {
        throw new DomainError(
          'validation',
          'parameter_missing',
          `The field '${prefix}subject' is required (or send a template).`,
          `${prefix}subject`,
        );
      }
      if (hasLineBreak(input.subject)) {
        throw invalidParam(`${prefix}subject`, 'The subject must not contain line breaks.');
      }
      if (input.html === undefined && input.text === undefined) {
        throw new DomainError(
          'validation',
          'parameter_missing',
          'Send html, text or both (or a template).',
          `${prefix}html`,
        );
      }
      subject = input.subject;
      html = input.html ?? null;
      // 78 columns: the line length RFC 5322 recommends, as for templates.
      text = input.text ?? (html !== null ? htmlToText(html, { wordwrap: 78 }) : null);
    }

    const id = newId('msg');
    return {
      id,
      projectId,
      from: formatAddress(from),
      to: to.map(formatAddress),
      cc: cc.map(formatAddress),
      bcc: bcc.map(formatAddress),
      replyTo: replyTo.map(formatAddress),
      subject,
      html,
      text,
      headers,
      tags,
      attachments,
      templateId,
      templateVersion,
      // Made now and stored, so every attempt (and every duplicate a crash may cause) carries the same one.
      messageId: `<${id}@${from.domain}>`,
      source: 'api',
      smtpUsername: null,
      dkimDomain: authentication?.dkimDomain ?? null,
      returnPathDomain: authentication?.returnPathDomain ?? null,
      scheduledAt,
      createdAt: now.toISOString(),
      recipients,
      // The links are found once, here, and stored with the email; each recipient's copy points at them.
      tracking: wanted && {
        ...wanted,
        links: wanted.clicks && html !== null ? trackedLinks(html) : [],
      },
    };
  }

  /**
   * The suppression entries of the emails' recipients, each recipient marked; through `via` when given (the
   * caller's transaction), else before the transaction that writes them: an entry added in between is
   * honoured from the next send on, as with any list read at send time.
   */
  async function markSuppressed(emails: NewEmail[], via?: Kysely<Database>): Promise<SuppressedEntries> {
    const addresses = emails.flatMap((email) => email.recipients.map((recipient) => recipient.address));
    const suppressed = await suppressions.matchingIn(
      emails.map((email) => email.projectId),
      addresses,
      via,
    );
    for (const email of emails) {
      for (const recipient of email.recipients) {
        recipient.suppressed = suppressed.has(suppressionKey(email.projectId, recipient.address));
      }
    }
    return suppressed;
  }

  /**
   * Writes the emails (of one send, or of many sent together), their recipients and, for recipients on the
   * suppression list, their `suppressed` status and `email.suppressed` event, in `transaction`: the
   * suppressed recipients' events and the tracking settings commit with the email, or none does. Throws
   * DailyLimitReached when a project passes its daily limit.
   */
  async function writeIn(
    transaction: Transaction,
    emails: NewEmail[],
    suppressed: SuppressedEntries,
  ): Promise<void> {
    await repo.insert(transaction, emails, { dailyLimit });
    for (const email of emails) {
      for (const recipient of email.recipients) {
        const entry = recipient.suppressed
          ? suppressed.get(suppressionKey(email.projectId, recipient.address))
          : undefined;
        if (!entry) continue;
        const data = emailEventData(email, recipient.address, {
          suppression: { reason: entry.reason, created_at: entry.createdAt },
        });
        await eventService.emit(email.projectId, 'email.suppressed', data, {
          emailId: email.id,
          transaction,
        });
      }
    }
    const tracked = emails.filter((email) => email.tracking !== undefined);
    if (tracked.length > 0 && engagement) {
      await engagement.repo.insertSettings(
        tracked.map((email) => ({
          emailId: email.id,
          projectId: email.projectId,
          settings: email.tracking!,
          createdAt: email.createdAt,
        })),
        transaction.db,
      );
    }
  }

  /**
   * Writes the emails in a transaction of their own; `inside` hears of a failure inside the transaction
   * (rolled back, nothing stored), as against one of its COMMIT.
   */
  async function write(emails: NewEmail[], inside?: { failed(error: unknown): void }): Promise<void> {
    const suppressed = await markSuppressed(emails);
    await inTransaction(db, async (transaction) => {
      try {
        await writeIn(transaction, emails, suppressed);
      } catch (error) {
        inside?.failed(error);
        throw error;
      }
    });
  }

  /** Wakes this process's sending worker when some of the emails stored are due now. */
  function stored(emails: NewEmail[]): void {
    metrics.emailsAccepted(emails.map((email) => email.source));
    const due = emails.some(
      (email) => email.scheduledAt === null && email.recipients.some((r) => !r.suppressed),
    );
    if (due) notifier.notify();
  }

  /** A project past its daily limit: the 429 that says when it resets; any other error as it is. */
  function refusal(error: unknown, emails: NewEmail[], now: Date): unknown {
    if (!(error instanceof DailyLimitReached)) return error;
    const count = emails.reduce((sum, email) => sum + email.recipients.length, 0);
    return new DailyLimitError(
      `This project may send to ${dailyLimit} recipients a day (UTC); ${error.usedBefore} are used and this ` +
        `request has ${count}. The limit resets at midnight UTC.`,
      secondsUntilNextUtcDay(now),
    );
  }

  /** Stores one send's emails (a single send, or a batch: all or none), answering 429 past the limit. */
  async function store(emails: NewEmail[], now: Date): Promise<void> {
    try {
      await write(emails);
    } catch (error) {
      throw refusal(error, emails, now);
    }
    stored(emails);
  }

  // Sends are written in groups (send-groups.ts), except those with an Idempotency-Key, which are written
  // in the key's transaction (`writeSend`), so that they commit with the saved answer.
  const groups =
    sendGroups &&
    createSendGroups({ writeTogether: write, storeAlone: store, stored, maxEmails: sendGroups.maxEmails });

  async function load(projectId: string, id: string): Promise<EmailRecord> {
    const email = isId('msg', id) ? await repo.find(projectId, id) : undefined;
    if (!email) throw notFound('email', id);
    return email;
  }

  async function view(email: EmailRecord): Promise<EmailView> {
    const [recipients, events, attachments, engaged, tracked] = await Promise.all([
      repo.recipients(email.projectId, email.id),
      eventService.forEmail(email.projectId, email.id),
      repo.attachments(email.id),
      engagement?.repo.forEmail(email.projectId, email.id),
      engagement?.repo.settingsFor([email.id]),
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

  /**
   * Runs `store` with the plan's large content — submitted messages and files larger than one piece — written
   * to its pieces first (before the transaction that stores the emails, never inside it: see
   * db/message-pieces.ts), and removes them again when `store` fails. A plan whose content is already in its
   * pieces is stored as it is.
   */
  async function withContentInPieces<T>(plan: SendPlan, store: (plan: SendPlan) => Promise<T>): Promise<T> {
    const emails = await repo.keepLargeContentInPieces(plan.emails);
    try {
      return await store({ ...plan, emails });
    } catch (error) {
      // Best effort: pieces left when even this fails are named by no row, and retention removes them.
      await repo.removePieces(emails).catch(() => undefined);
      throw error;
    }
  }

  const acceptedViews = (plan: SendPlan): AcceptedEmailView[] =>
    plan.emails.map((email) => ({ id: email.id, object: 'email' as const }));

  return {
    /**
     * Validates and renders one send (reading its template and sender), before any transaction. `decoded`: its
     * files, when the body was large enough to be decoded on a thread (the request's `decodedFields`).
     */
    async prepareSend(
      projectId: string,
      input: SendEmailInput,
      sender: KeySender,
      decoded?: DecodedFields,
    ): Promise<SendPlan> {
      const now = clock.now();
      return { emails: [await prepare(projectId, input, now, '', sender.domainId, decoded)], now };
    },

    /**
     * Checks an SMTP submission as a send (the same rules: sender domain, addresses, tags, schedule, recipient
     * cap), before any transaction; `accept` then stores it. The envelope's recipients are who receives it:
     * those in To or Cc as such, the others as bcc. The message travels as submitted (`submitted`): its Message-ID
     * is the client's when it gave one.
     */
    async prepareSubmission(projectId: string, submission: Submission, sender: KeySender): Promise<SendPlan> {
      const now = clock.now();
      const inHeader = (list: readonly string[]) => new Set(list.map((address) => address.toLowerCase()));
      const to = inHeader(submission.to);
      const cc = inHeader(submission.cc);
      const role = (address: string) =>
        to.has(address.toLowerCase()) ? 'to' : cc.has(address.toLowerCase()) ? 'cc' : 'bcc';
      const decided = new Map<string, SenderAuthentication>();
      const email = await prepare(
        projectId,
        {
          from: submission.from,
          to: submission.recipients.filter((address) => role(address) === 'to'),
          cc: submission.recipients.filter((address) => role(address) === 'cc'),
          bcc: submission.recipients.filter((address) => role(address) === 'bcc'),
          ...(submission.replyTo.length > 0 ? { reply_to: submission.replyTo } : {}),
          subject: submission.subject,
          text: '',
          tags: submission.tags,
          ...(submission.sendAt !== undefined ? { scheduled_at: submission.sendAt } : {}),
          tracking: submission.track,
          unsubscribe: submission.unsubscribe,
        },
        now,
        '',
        sender.domainId,
        undefined,
        decided,
      );
      // Who sent it for the author, or sent it on: a mailing list's Sender, a forward's Resent-From. Each is a
      // sending address like From, so each passes From's rule (a foreign one would be signed as ours too).
      for (const { field, address } of submission.senders) {
        const [parsed] = parseList(address, field);
        await authorizeSenderDomain(projectId, parsed!.domain, field, sender.domainId, decided);
      }
      const messageId = submission.messageId ?? email.messageId;
      const submitted = submission.build(messageId, now);
      // The links are found in the html part(s) as sent, once, as for an API send's html; a message whose
      // MIME cannot be read part by part is refused here rather than failing at each attempt.
      let tracking = email.tracking;
      if (tracking && (tracking.opens || tracking.clicks)) {
        let links: string[];
        try {
          links = await findSubmittedLinks(submitted);
        } catch {
          throw invalidParam(
            'X-Postwire-Track',
            "X-Postwire-Track: the message's MIME parts cannot be read to find its html; send it without tracking",
          );
        }
        tracking = { ...tracking, links: tracking.clicks ? links : [] };
      }
      return {
        emails: [
          {
            ...email,
            html: null,
            text: null,
            messageId,
            source: 'smtp',
            smtpUsername: submission.username,
            submitted,
            tracking,
          },
        ],
        now,
      };
    },

    /** The email an SMTP client already submitted with this Message-ID in the last 24 hours. */
    submittedBefore(projectId: string, messageId: string): Promise<string | undefined> {
      const since = new Date(clock.now().getTime() - SUBMISSION_REPEAT_WINDOW_MS).toISOString();
      return repo.submittedSince(projectId, messageId, since);
    },

    /**
     * The daily limit's early answer, for SMTP's RCPT: whether a message to `recipients` (those accepted so
     * far with the one asked about) still fits the project's count for today. Counted as the store counts
     * (each address once, suppressed recipients not), against the sends committed so far. Only the count in
     * the storing transaction holds: two sessions may both hear yes, and the one that passes the limit is
     * refused at DATA (452) with nothing stored.
     */
    async fitsDailyLimit(projectId: string, recipients: readonly string[]): Promise<boolean> {
      if (dailyLimit <= 0) return true;
      const addresses = [...new Set(recipients.map((address) => address.toLowerCase()))];
      const used = await repo.usedOn(projectId, quotaDay(clock.now().toISOString()));
      if (!overDailyLimit(used + addresses.length, dailyLimit)) return true;
      // Only at the limit is the suppression list read: a suppressed recipient is recorded, never counted.
      const suppressed = await suppressions.matchingIn([projectId], addresses);
      const counted = addresses.filter((address) => !suppressed.has(suppressionKey(projectId, address)));
      return !overDailyLimit(used + counted.length, dailyLimit);
    },

    /** All or nothing: one bad email refuses the batch (its index leads the param: `[3].to[0]`). */
    async prepareBatch(
      projectId: string,
      inputs: SendEmailInput[],
      sender: KeySender,
      decoded?: DecodedFields,
    ): Promise<SendPlan> {
      const now = clock.now();
      const emails: NewEmail[] = [];
      const decided = new Map<string, SenderAuthentication>();
      for (const [index, input] of inputs.entries())
        emails.push(await prepare(projectId, input, now, `[${index}].`, sender.domainId, decoded, decided));
      return { emails, now };
    },

    /** What a send answers once its emails are stored. */
    acceptedViews,

    withContentInPieces,

    /** Stores a prepared send with others (send groups); resolves once it is committed (it will be sent). */
    async accept(plan: SendPlan): Promise<void> {
      await withContentInPieces(plan, ({ emails }) =>
        groups ? groups.accept(emails, plan.now) : store(emails, plan.now),
      );
    },

    /**
     * Stores a prepared send in `transaction` (an Idempotency-Key's), its large content already in pieces
     * (`withContentInPieces`); the worker wakes at its commit.
     */
    async writeSend(transaction: Transaction, plan: SendPlan): Promise<void> {
      try {
        await writeIn(transaction, plan.emails, await markSuppressed(plan.emails, transaction.db));
      } catch (error) {
        throw refusal(error, plan.emails, plan.now);
      }
      transaction.afterCommit(() => stored(plan.emails));
    },

    async get(projectId: string, id: string): Promise<EmailView> {
      return view(await load(projectId, id));
    },

    async list(projectId: string, page: PageRequest, filters: EmailListFilters = {}) {
      const result = await repo.list(projectId, page, filters);
      const now = clock.now().toISOString();
      return { items: result.items.map((email) => toEmailSummary(email, now)), hasMore: result.hasMore };
    },

    /** Reads the email to cancel and its view, before any transaction; `cancel` then cancels it. */
    async prepareCancel(projectId: string, id: string): Promise<{ email: EmailRecord; view: EmailView }> {
      const email = await load(projectId, id);
      return { email, view: await view(email) };
    },

    /**
     * Cancels the email in `transaction` and answers its view as cancelled: every recipient was still
     * waiting (else nothing changes and this is a 409), so what the cancel changed is known without a read.
     */
    async cancel(
      transaction: Transaction,
      { email, view: before }: { email: EmailRecord; view: EmailView },
    ): Promise<EmailView> {
      const now = clock.now().toISOString();
      try {
        await repo.cancel(transaction, email.projectId, email.id, now);
      } catch (error) {
        if (!(error instanceof CancelRefused)) throw error;
        throw new DomainError(
          'conflict',
          'email_not_cancellable',
          `Email '${email.id}' is ${shownStatus(email, now)}; only a scheduled email whose time has not come can be cancelled.`,
          'id',
        );
      }
      return {
        ...before,
        status: 'cancelled',
        updated_at: now,
        recipients: before.recipients.map((recipient) => ({
          ...recipient,
          status: 'cancelled',
          next_attempt_at: null,
          completed_at: now,
        })),
      };
    },

    /**
     * Reads the email to reschedule and checks the new time with a send's rule (up to 30 days ahead), before
     * any transaction; `reschedule` then moves it. A time that has come is refused: to send now, a client
     * cancels and sends again, rather than a reschedule sending at once by surprise.
     */
    async prepareReschedule(
      projectId: string,
      id: string,
      input: RescheduleEmailInput,
    ): Promise<{ email: EmailRecord; view: EmailView; at: string }> {
      const email = await load(projectId, id);
      const at = checkScheduledAt(input.scheduled_at, clock.now(), '');
      if (at === null) {
        throw invalidParam('scheduled_at', 'scheduled_at must be in the future to reschedule an email.');
      }
      return { email, view: await view(email), at };
    },

    /**
     * Moves the email to its new time in `transaction` and answers its view: every recipient not suppressed
     * was still waiting (else nothing changes and this is a 409), so the new view is known without a read.
     */
    async reschedule(
      transaction: Transaction,
      { email, view: before, at }: { email: EmailRecord; view: EmailView; at: string },
    ): Promise<EmailView> {
      const now = clock.now().toISOString();
      try {
        await repo.reschedule(transaction, email.projectId, email.id, at, now);
      } catch (error) {
        if (!(error instanceof RescheduleRefused)) throw error;
        throw new DomainError(
          'conflict',
          'email_not_reschedulable',
          `Email '${email.id}' is ${shownStatus(email, now)}; only a scheduled email whose time has not come can be rescheduled.`,
          'id',
        );
      }
      // The worker reads the next waiting time again on its next claim (an earlier time, sooner).
      transaction.afterCommit(() => notifier.notify());
      return {
        ...before,
        scheduled_at: at,
        updated_at: now,
        recipients: before.recipients.map((recipient) =>
          recipient.status === 'queued' ? { ...recipient, next_attempt_at: at } : recipient,
        ),
      };
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
  };
}

export type EmailService = ReturnType<typeof createEmailService>;
