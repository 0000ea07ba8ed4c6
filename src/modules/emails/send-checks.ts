import { htmlToText } from 'html-to-text';
import { DomainError, invalidParam } from '../../lib/errors.ts';
import { newId } from '../../lib/ids.ts';
import { parseAddress, type ParsedAddress } from '../../lib/addresses.ts';
import type { EngagementDefaults } from '../../config.ts';
import type { NewRecipient } from './emails.repo.ts';
import { MAX_SCHEDULE_AHEAD_MS, type SendEmailInput } from './emails.schemas.ts';
import type { TrackingSettings } from './tracking.ts';

/*
 * A send's input checks: pure functions of the input (and the clock's now, the configured defaults), each
 * throwing a 4xx that names the field at fault (prefixed with `[i].` in a batch). No database, no template:
 * those come after, in send-prepare.ts.
 */

// Headers the service writes itself, or that only a receiving server or the signer may add: a caller who
// set them could forge the sender, break the MIME structure or the DKIM signature.
const RESERVED_HEADERS = new Set([
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

export const MAX_RECIPIENTS = 150;

/** Parses one address field (a string or a list), naming the exact item at fault. */
export function parseList(value: string | string[] | undefined, param: string): ParsedAddress[] {
  if (value === undefined) return [];
  const items = typeof value === 'string' ? [value] : value;
  return items.map((item, index) => {
    const where = typeof value === 'string' ? param : `${param}[${index}]`;
    const parsed = parseAddress(item);
    if (!parsed.ok) throw invalidParam(where, `${where} ${parsed.reason}.`, 'invalid_address');
    return parsed.value;
  });
}

export function checkHeaders(
  headers: Record<string, string> | undefined,
  prefix: string,
): Record<string, string> {
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
export function checkTags(tags: SendEmailInput['tags'], prefix: string): Record<string, string> {
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

export function checkScheduledAt(value: string | undefined, now: Date, prefix: string): string | null {
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

/** Whether a subject (given or rendered) has a line break, which would end its header. */
export const hasLineBreak = (text: string) => /[\r\n]/.test(text);

/** What the send asks for (its fields, else the defaults); refused when PUBLIC_URL is unset. */
export function resolveTracking(
  input: SendEmailInput,
  headers: Record<string, string>,
  prefix: string,
  engagement: { publicUrl: string | undefined; defaults: EngagementDefaults },
): Omit<TrackingSettings, 'links'> | undefined {
  const engagementDefaults = engagement.defaults;
  const wanted = {
    opens: input.tracking?.opens ?? engagementDefaults.trackOpens,
    clicks: input.tracking?.clicks ?? engagementDefaults.trackClicks,
    unsubscribe: input.unsubscribe ?? engagementDefaults.listUnsubscribe,
  };
  if (!wanted.opens && !wanted.clicks && !wanted.unsubscribe) return undefined;
  if (engagement.publicUrl === undefined) {
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

/** The SMTP recipients of to, cc and bcc, refused past MAX_RECIPIENTS. */
export function checkRecipients(
  lists: { to: ParsedAddress[]; cc: ParsedAddress[]; bcc: ParsedAddress[] },
  prefix: string,
): NewRecipient[] {
  const { to, cc, bcc } = lists;
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
  return recipients;
}

/** A send with a template gives no subject, html or text of its own. */
export function checkTemplateAlone(input: SendEmailInput, prefix: string): void {
  const given = (['subject', 'html', 'text'] as const).find((field) => input[field] !== undefined);
  if (given) {
    throw invalidParam(
      `${prefix}${given}`,
      `Send either template or ${given}: a template brings its own subject, html and text.`,
      'parameter_conflict',
    );
  }
}

/** A send without a template: its subject and its html, text or both (text derived from html if not given). */
export function checkOwnContent(
  input: SendEmailInput,
  prefix: string,
): { subject: string; html: string | null; text: string | null } {
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
  const html = input.html ?? null;
  // 78 columns: the line length RFC 5322 recommends, as for templates.
  const text = input.text ?? (html !== null ? htmlToText(html, { wordwrap: 78 }) : null);
  return { subject: input.subject, html, text };
}
