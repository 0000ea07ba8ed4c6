import { type Static, Type } from '@sinclair/typebox';
import { EMAIL_STATUSES, RECIPIENT_STATUSES } from '../../db/schema.ts';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { nullable, timeFilter, timestamp } from '../../http/schema-helpers.ts';

export const MAX_TO = 50;
export const MAX_CC = 50;
export const MAX_BCC = 50;
export const MAX_REPLY_TO = 10;
export const MAX_BATCH = 100;
export const MAX_SUBJECT_LENGTH = 998;
export const MAX_BODY_LENGTH = 512 * 1024;
export const MAX_HEADERS = 50;
export const MAX_TAGS = 50;
export const MAX_ATTACHMENTS = 50;
/** The attachments of one email together, decoded. */
export const MAX_ATTACHMENT_BYTES = 40 * 1024 * 1024;
/**
 * The body limit of the send routes (other routes keep 1 MiB): 40 MiB of attachments in base64, plus the
 * rest of an email, fits.
 */
export const EMAIL_BODY_LIMIT_BYTES = 56 * 1024 * 1024;
/**
 * Where a send's body carries its files in base64, and a batch's (the routes' `base64Fields`: a large body's
 * files are decoded on a thread, http/json-body.ts).
 */
export const SEND_FILES = ['attachments[].content'];
export const BATCH_FILES = ['[].attachments[].content'];
/** How far ahead a send can be scheduled. */
export const MAX_SCHEDULE_AHEAD_MS = 30 * 86_400_000;

const address = Type.String({
  minLength: 1,
  maxLength: 320,
  description: '`a@example.com` or `Name <a@example.com>`.',
});
// The array comes first so that a schema error names the array form (`must NOT have fewer than 1 items`),
// which is what most clients send; a single string is accepted too.
const addresses = (max: number, min: number, description: string) =>
  Type.Union([Type.Array(address, { minItems: min, maxItems: max }), address], { description });

const subject = Type.String({
  minLength: 1,
  maxLength: MAX_SUBJECT_LENGTH,
  description: 'Subject line (plain text, no line breaks).',
});
const html = Type.String({ maxLength: MAX_BODY_LENGTH, description: 'HTML body.' });
const text = Type.String({
  maxLength: MAX_BODY_LENGTH,
  description: 'Plain-text body; generated from html when absent.',
});

const TemplateRef = Type.Object(
  {
    id: Type.String({ minLength: 1, maxLength: 100, description: 'Template id (`tpl_…`) or alias.' }),
    version: Type.Optional(
      Type.Integer({ minimum: 1, description: 'A published version; the latest published one when absent.' }),
    ),
    variables: Type.Optional(
      Type.Record(Type.String(), Type.Unknown(), {
        description:
          'Values for the template (any JSON). Every variable the template declares must be given, and every one it prints outside a block (`if`, `for`…) without a `default` filter, declared or not.',
      }),
    ),
  },
  { additionalProperties: false, description: 'Send a published template instead of subject/html/text.' },
);

const Attachment = Type.Object(
  {
    filename: Type.String({
      minLength: 1,
      maxLength: 255,
      description:
        'The file name shown to the recipient; path separators and control characters are removed.',
    }),
    content: Type.String({
      minLength: 1,
      description:
        'The file, base64-encoded; line breaks (as MIME wraps it) and leaving out the `=` padding are fine.',
    }),
    content_type: Type.Optional(
      Type.String({
        minLength: 3,
        maxLength: 255,
        description:
          'Its media type (`application/pdf`). When absent, the one derived from the file name, as nodemailer derives it: `.pdf` → application/pdf; a name without a dot is looked up as an extension (`c` → text/plain); unknown → application/octet-stream.',
      }),
    ),
    content_id: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 255,
        description:
          'Makes it inline: the html refers to it as `cid:<content_id>`. Printable ASCII without spaces or angle brackets (it may be enclosed in one pair, `<id>`), so that it leaves as given.',
      }),
    ),
  },
  { additionalProperties: false },
);

const Tag = Type.Object({ name: Type.String(), value: Type.String() }, { additionalProperties: false });

export const SendEmailBody = Type.Object(
  {
    from: address,
    to: addresses(MAX_TO, 1, `1–${MAX_TO} recipients.`),
    cc: Type.Optional(addresses(MAX_CC, 0, `Up to ${MAX_CC} recipients.`)),
    bcc: Type.Optional(addresses(MAX_BCC, 0, `Up to ${MAX_BCC} recipients; not shown in the message.`)),
    reply_to: Type.Optional(addresses(MAX_REPLY_TO, 0, `Up to ${MAX_REPLY_TO} addresses for replies.`)),
    subject: Type.Optional(subject),
    html: Type.Optional(html),
    text: Type.Optional(text),
    template: Type.Optional(TemplateRef),
    headers: Type.Optional(
      Type.Record(Type.String(), Type.String({ maxLength: 998 }), {
        maxProperties: MAX_HEADERS,
        description:
          'Extra headers, name → value (`List-Unsubscribe`, `X-Entity-Ref-ID`). Headers the service sets itself (From, To, Subject, Message-ID, Date, Content-*, DKIM-Signature…) are refused.',
      }),
    ),
    tags: Type.Optional(
      Type.Union(
        [
          Type.Record(Type.String(), Type.String(), { maxProperties: MAX_TAGS }),
          Type.Array(Tag, { maxItems: MAX_TAGS }),
        ],
        {
          description:
            'Name → value labels carried in every event of the email, as an object or (as Resend takes them) a list of `{ name, value }`; names and values are 1–256 letters, digits, `_` or `-`.',
        },
      ),
    ),
    attachments: Type.Optional(
      Type.Array(Attachment, {
        maxItems: MAX_ATTACHMENTS,
        description: `Files sent with the email, up to ${MAX_ATTACHMENT_BYTES / 1024 / 1024} MiB together once decoded.`,
      }),
    ),
    scheduled_at: Type.Optional(
      Type.String({
        format: 'date-time',
        description: 'Send at this time (ISO 8601, up to 30 days ahead) instead of now.',
      }),
    ),
    tracking: Type.Optional(
      Type.Object(
        {
          opens: Type.Optional(
            Type.Boolean({ description: 'Add a 1×1 open pixel to the html (default TRACK_OPENS).' }),
          ),
          clicks: Type.Optional(
            Type.Boolean({
              description:
                'Point every http(s) link of the html at a tracking URL that redirects to it (default TRACK_CLICKS); a link with `data-postwire-track="off"` is left alone.',
            }),
          ),
        },
        {
          additionalProperties: false,
          description:
            'Open and click tracking, per recipient, on PUBLIC_URL (422 when PUBLIC_URL is unset).',
        },
      ),
    ),
    unsubscribe: Type.Optional(
      Type.Boolean({
        description:
          'One-click unsubscribe (RFC 8058): `List-Unsubscribe` and `List-Unsubscribe-Post` headers per recipient, and `{{ unsubscribe_url }}` in html, text and templates (default LIST_UNSUBSCRIBE). Cannot be combined with your own List-Unsubscribe headers.',
      }),
    ),
  },
  { additionalProperties: false, title: 'SendEmail' },
);
export type SendEmailInput = Static<typeof SendEmailBody>;

export const SendEmailBatchBody = Type.Array(SendEmailBody, {
  minItems: 1,
  maxItems: MAX_BATCH,
  title: 'SendEmailBatch',
  description: `1–${MAX_BATCH} emails, accepted (or refused) together.`,
});

export const AcceptedEmail = Type.Object(
  {
    id: Type.String({ description: 'Email identifier (`msg_…`).' }),
    object: Type.Literal('email'),
  },
  { title: 'AcceptedEmail' },
);
export type AcceptedEmailView = Static<typeof AcceptedEmail>;

export const AcceptedEmailList = listEnvelope(AcceptedEmail);

const emailStatus = Type.Union(
  EMAIL_STATUSES.map((status) => Type.Literal(status)),
  {
    description:
      '`scheduled` until due; `queued` or `delayed` while recipients are still being tried; once every recipient is done, their common status (`sent`, `delivered`, `bounced`, `failed`, `complained`, `cancelled`, `suppressed`), or `mixed` when they ended differently.',
  },
);

const recipientStatus = Type.Union(RECIPIENT_STATUSES.map((status) => Type.Literal(status)));

export const EmailRecipient = Type.Object(
  {
    address: Type.String({ description: 'The bare address.' }),
    type: Type.Union([Type.Literal('to'), Type.Literal('cc'), Type.Literal('bcc')]),
    status: recipientStatus,
    attempts: Type.Integer({ description: 'SMTP attempts made so far.' }),
    last_response: nullable(
      Type.String(),
      "The receiving server's reply to the last attempt, or why no reply came.",
    ),
    last_attempt_at: nullable(timestamp('When the last attempt started.')),
    next_attempt_at: nullable(timestamp('When the next attempt is due; null once done.')),
    throttled: nullable(
      Type.Object({
        reason: Type.Union([Type.Literal('warmup'), Type.Literal('destination')], {
          description:
            "`warmup`: its sending domain used the day's warm-up allowance for its destination; `destination`: its destination asked to slow down (a deferral such as `421 4.7.28`). Neither takes an attempt.",
        }),
        until: timestamp('When it may leave (it then goes in queue order, transactional mail first).'),
      }),
      'Set while it waits for pacing rather than for a retry (issue 38); null otherwise.',
    ),
    completed_at: nullable(timestamp('When the recipient reached its final status.')),
    first_opened_at: Type.Optional(
      nullable(timestamp('When its open pixel was first fetched (tracked opens).')),
    ),
    open_count: Type.Optional(Type.Integer({ description: 'How often its open pixel was fetched.' })),
    clicks: Type.Optional(
      Type.Array(
        Type.Object({
          url: Type.String({ description: 'The original URL.' }),
          clicked_at: timestamp('When.'),
          automated: Type.Boolean({
            description: 'A machine (a link scanner, a prefetch) rather than a person.',
          }),
        }),
        { description: 'Its tracked clicks, oldest first.' },
      ),
    ),
    unsubscribed_at: Type.Optional(nullable(timestamp('When it unsubscribed with one click.'))),
  },
  { title: 'EmailRecipient' },
);
export type EmailRecipientView = Static<typeof EmailRecipient>;

export const EmailEvent = Type.Object(
  {
    id: Type.String({ description: 'The event id (`evt_…`, the webhook-id of its deliveries).' }),
    type: Type.String({ description: 'The event kind.' }),
    recipient: Type.String(),
    created_at: timestamp('When it happened.'),
    smtp_response: nullable(Type.String(), "The server's reply that caused it, when there was one."),
    url: Type.Optional(Type.String({ description: 'For `email.clicked`: the URL clicked.' })),
    automated: Type.Optional(
      Type.Boolean({
        description: 'For `email.opened` and `email.clicked`: a machine rather than a person.',
      }),
    ),
    suppression_reason: Type.Optional(
      Type.String({
        description:
          'For `email.suppressed`: why the address was on the suppression list when the email was accepted (`hard_bounce`, `complaint`, `unsubscribe`, `manual`).',
      }),
    ),
  },
  { title: 'EmailEvent' },
);
export type EmailEventView = Static<typeof EmailEvent>;

const summaryFields = {
  object: Type.Literal('email'),
  id: Type.String({ description: 'Email identifier (`msg_…`).' }),
  from: Type.String(),
  to: Type.Array(Type.String()),
  cc: Type.Array(Type.String()),
  bcc: Type.Array(Type.String()),
  reply_to: Type.Array(Type.String()),
  subject: Type.String({ description: 'The subject as sent (rendered, for a template).' }),
  status: emailStatus,
  tags: Type.Record(Type.String(), Type.String()),
  template_id: nullable(Type.String()),
  template_version: nullable(Type.Integer()),
  message_id: Type.String({
    description: 'The Message-ID header, the same on every attempt, so a receiver can detect duplicates.',
  }),
  source: Type.Union([Type.Literal('api'), Type.Literal('smtp')], {
    description:
      '`api` (POST /v1/emails) or `smtp` (SMTP submission: the message travels as the application wrote it; `html` and `text` are null, GET …/raw shows it as sent).',
  }),
  smtp_username: nullable(Type.String(), 'The username the SMTP client gave in AUTH; null for API sends.'),
  broadcast_id: nullable(
    Type.String(),
    'The broadcast (`bc_…`) this email is a copy of; null for any other email.',
  ),
  scheduled_at: nullable(timestamp('When it is (was) scheduled to be sent.')),
  created_at: timestamp('When it was accepted.'),
  updated_at: timestamp('When its status last changed.'),
};

export const EmailSummary = Type.Object(summaryFields, { title: 'EmailSummary' });
export type EmailSummaryView = Static<typeof EmailSummary>;

const EmailAuthentication = Type.Object(
  {
    dkim_domain: nullable(
      Type.String(),
      'The DKIM `d=` it is signed with: a verified domain of the project, else the server-wide DKIM_DOMAIN; null: unsigned.',
    ),
    return_path_domain: nullable(
      Type.String(),
      "The envelope sender's domain: the domain's verified return path (`bounces.<domain>`), BOUNCE_DOMAIN, or the From domain.",
    ),
    dmarc_aligned: Type.Boolean({
      description: 'Whether the DKIM domain aligns with the From domain (relaxed), so DMARC passes on DKIM.',
    }),
  },
  { description: 'How the email is authenticated, decided when it was accepted.' },
);

export const Email = Type.Object(
  {
    ...summaryFields,
    html: nullable(Type.String()),
    text: nullable(Type.String()),
    headers: Type.Record(Type.String(), Type.String()),
    attachments: Type.Array(
      Type.Object(
        {
          filename: Type.String(),
          content_type: Type.String({
            description:
              'Its media type as the message gives it: the one sent, else the one derived from the file name (application/octet-stream when nothing matches).',
          }),
          content_id: nullable(Type.String()),
          size: Type.Integer({ description: 'Bytes, decoded.' }),
        },
        { title: 'EmailAttachment' },
      ),
      { description: 'The files sent with it (their content is in the MIME).' },
    ),
    recipients: Type.Array(EmailRecipient, { description: 'Status per recipient.' }),
    events: Type.Array(EmailEvent, { description: 'What happened to the email, oldest first.' }),
    authentication: EmailAuthentication,
    tracking: Type.Object(
      {
        opens: Type.Boolean({ description: 'Its opens were tracked (a pixel in its html).' }),
        clicks: Type.Boolean({ description: 'Its links were tracked.' }),
        unsubscribe: Type.Boolean({ description: 'It carried one-click unsubscribe.' }),
      },
      {
        description:
          "What the send asked for: recipients' `open_count` and `clicks` count only what was tracked (all false for an email that asked for none).",
      },
    ),
  },
  { title: 'Email' },
);
export type EmailView = Static<typeof Email>;

export const EmailList = listEnvelope(EmailSummary);

export const EmailListQuery = Type.Object(
  {
    ...ListQuery.properties,
    status: Type.Optional(emailStatus),
    recipient: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 320,
        description:
          'Emails with a recipient whose address contains this, in any case (`ada@`, `@example.org`).',
      }),
    ),
    tag: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z0-9_-]{1,256}:[A-Za-z0-9_-]{1,256}$',
        description: 'Emails carrying this tag, as `name:value`.',
      }),
    ),
    since: Type.Optional(timeFilter('Emails accepted at or after this time.')),
    until: Type.Optional(timeFilter('Emails accepted before this time.')),
  },
  { additionalProperties: false },
);
export type EmailListFilters = Omit<Static<typeof EmailListQuery>, 'limit' | 'after' | 'before'>;

export const RawEmail = Type.Object(
  {
    object: Type.Literal('raw_email'),
    id: Type.String(),
    content_type: Type.Literal('message/rfc822'),
    raw: Type.String({ description: 'The complete MIME message as captured.' }),
  },
  { title: 'RawEmail' },
);
export type RawEmailView = Static<typeof RawEmail>;

export const RescheduleEmailBody = Type.Object(
  {
    scheduled_at: Type.String({
      format: 'date-time',
      description: 'The new time to send at (ISO 8601, in the future, up to 30 days ahead).',
    }),
  },
  { additionalProperties: false, title: 'RescheduleEmail' },
);
export type RescheduleEmailInput = Static<typeof RescheduleEmailBody>;

export const EmailParams = Type.Object({ id: Type.String({ description: 'Email identifier (`msg_…`).' }) });
