import type { Headers } from 'mailparser';
import { headerText, readMime, Refused, unreadableReason } from './mime-stream.ts';

// Reads what mail systems send back after they accepted a message: delivery status notifications
// (RFC 3464, `multipart/report; report-type=delivery-status`), feedback reports (RFC 5965 ARF,
// `report-type=feedback-report`) and auto-replies (RFC 3834), which are neither. Every byte is hostile.
// The MIME (structure, transfer and charset decoding, RFC 2047 words) is mailparser's; what is ours is
// reading the report's fields and the caps below. Nothing here throws on odd input: what cannot be read,
// or breaks a cap, is `unreadable`, with why. It runs on a parse thread (report-reader.ts), never on the
// event loop that answers HTTP: the caps bound the work, the thread's budget bounds the rest.

export type DsnAction = 'failed' | 'delayed' | 'delivered' | 'relayed' | 'expanded';

export interface DsnRecipient {
  /** `Final-Recipient`, the address part (`rfc822; a@b` → `a@b`), lowercased. */
  finalRecipient: string | null;
  /** `Original-Recipient`, the address part, lowercased. */
  originalRecipient: string | null;
  action: DsnAction;
  /** The enhanced status code (`5.1.1`). */
  status: string | null;
  /** `Diagnostic-Code`, without its type (`smtp; 550 …` → `550 …`). */
  diagnostic: string | null;
  /** `Remote-MTA`, without its type. */
  remoteMta: string | null;
}

export type Report =
  | {
      kind: 'delivery-status';
      /** `Reporting-MTA`, without its type. */
      reportingMta: string | null;
      /** `Original-Envelope-Id` (the ENVID the sender asked for). */
      envelopeId: string | null;
      /** The Message-ID of the message reported on, from its returned headers. */
      originalMessageId: string | null;
      recipients: DsnRecipient[];
    }
  | {
      kind: 'feedback';
      /** `Feedback-Type` (`abuse`, `fraud`, …). */
      feedbackType: string;
      /** `Original-Rcpt-To`, lowercased, if the report gives it. */
      originalRecipient: string | null;
      userAgent: string | null;
      originalMessageId: string | null;
      /**
       * The reported message's envelope sender (`Original-Mail-From`, else its Return-Path header), lowercased:
       * our return path, when the report went to a fixed feedback address rather than to it.
       */
      originalReturnPath: string | null;
    }
  | { kind: 'auto-reply'; reason: string }
  | { kind: 'unreadable'; reason: string };

/** A received message as read: what it reports, and its Subject (decoded, cut to SUBJECT_MAX characters). */
export interface ReadMessage {
  report: Report;
  subject: string | null;
}

/**
 * What one message may make the reader do; past any of them it is unreadable (and stored, with why). A real
 * report is 2–4 parts (RFC 3464 §2, RFC 5965 §2), 3 levels deep at most (a gateway's multipart/mixed around
 * the report around a multipart/alternative notice), a few kilobytes of header, a few dozen field lines.
 */
export const REPORT_LIMITS = {
  /**
   * MIME parts, containers included (mailparser's maxChildNodes): its splitter stops at the first part
   * past it, so a message of a million empty parts costs as much as one of 100.
   */
  parts: 100,
  /** How deep a part may sit (`1.2.1` is 3 deep). */
  depth: 8,
  /**
   * One header block, in bytes (mailparser's maxHeadSize; every line counts as 64 bytes at least, so a
   * block also holds at most 1,024 lines). Providers' reports with long Received and ARC chains stay
   * under 32 KiB.
   */
  headerBytes: 64 * 1024,
  /** Header and field lines read in all: the message's header, the returned message's, the report's fields. */
  headerLines: 1000,
  /**
   * A report part (message/delivery-status, message/feedback-report): one recipient group is ~300 bytes.
   * Of a returned message (or its headers) only this much, from its start, is kept: its header is in it.
   */
  reportPartBytes: 64 * 1024,
} as const;

export type ReportLimits = typeof REPORT_LIMITS;

/** The Subject as stored and shown (the API documents the cut). */
const SUBJECT_MAX = 200;

const ACTIONS = new Set<DsnAction>(['failed', 'delayed', 'delivered', 'relayed', 'expanded']);
const ENHANCED_STATUS = /^[245]\.\d{1,3}\.\d{1,3}$/;

/** The part types of a report's machine-readable part (RFC 3464, RFC 6533's UTF-8 form, RFC 5965). */
const STATUS_TYPES = new Set(['message/delivery-status', 'message/global-delivery-status']);
const FEEDBACK_TYPE = 'message/feedback-report';
/** The reported message, or its header only, as a report returns it (RFC 6533's UTF-8 forms too). */
const RETURNED_TYPES = new Set([
  'message/rfc822',
  'text/rfc822-headers',
  'message/rfc822-headers',
  'message/global',
  'message/global-headers',
]);
/** Types that are UTF-8 whatever they say (RFC 6533). */
const UTF8_TYPES = new Set(['message/global-delivery-status', 'message/global', 'message/global-headers']);

/** Counts header and field lines against the message's cap; past it, refuses the message. */
interface LineBudget {
  spend(lines: number): void;
}

function lineBudget(limit: number): LineBudget {
  let left = limit;
  return {
    spend(lines) {
      left -= lines;
      if (left < 0) throw new Refused(`more than ${limit} header and field lines`);
    },
  };
}

/** Header-style fields (`Name: value`, folded lines joined) in groups separated by blank lines. */
export function fieldGroups(text: string, budget?: LineBudget): Array<Map<string, string>> {
  const groups: Array<Map<string, string>> = [];
  let current = new Map<string, string>();
  let last: string | undefined;
  for (const line of text.split(/\r?\n/)) {
    if (line.trim() === '') {
      if (current.size > 0) groups.push(current);
      current = new Map();
      last = undefined;
      continue;
    }
    budget?.spend(1);
    if (/^[ \t]/.test(line) && last !== undefined) {
      current.set(last, `${current.get(last)} ${line.trim()}`);
      continue;
    }
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    last = line.slice(0, colon).trim().toLowerCase();
    if (!current.has(last)) current.set(last, line.slice(colon + 1).trim());
  }
  if (current.size > 0) groups.push(current);
  return groups;
}

/** `rfc822; a@b` → `a@b`; `dns; mx.example` → `mx.example`. */
const withoutType = (value: string | undefined): string | null => {
  if (value === undefined) return null;
  const semicolon = value.indexOf(';');
  const bare = (semicolon >= 0 ? value.slice(semicolon + 1) : value).trim();
  return bare === '' ? null : bare;
};

const addressOf = (value: string | undefined): string | null => {
  const bare = withoutType(value);
  return bare === null ? null : bare.replace(/^<|>$/g, '').toLowerCase();
};

/** A part kept to be read: where it sits, its type and its (transfer-decoded) bytes. */
interface KeptPart {
  partId: string;
  type: string;
  charset: string | undefined;
  bytes: Buffer;
}

function contentTypeOf(headers: Headers): { type: string; params: Record<string, string> } {
  const value = headers.get('content-type');
  if (value && typeof value === 'object' && 'value' in value && typeof value.value === 'string') {
    const params = 'params' in value && value.params ? (value.params as Record<string, string>) : {};
    return { type: value.value.toLowerCase(), params };
  }
  return { type: 'text/plain', params: {} };
}

/** A part's text in its charset (RFC 6533's types are UTF-8); an unknown charset is read as UTF-8. */
function decodeText(part: KeptPart): string {
  const label = UTF8_TYPES.has(part.type) ? 'utf-8' : part.charset?.trim() || 'utf-8';
  try {
    return new TextDecoder(label).decode(part.bytes);
  } catch {
    return new TextDecoder('utf-8').decode(part.bytes);
  }
}

const parentOf = (partId: string): string => partId.split('.').slice(0, -1).join('.');

/**
 * Runs mailparser over `source` (readMime). Parts whose type `keep` accepts are kept (their first
 * `reportPartBytes`); any other is drained unread. The human-readable parts are not read at all.
 */
async function parse(
  source: Uint8Array,
  limits: ReportLimits,
  keep: (type: string) => boolean,
  budget: LineBudget,
): Promise<{ headers: Headers; parts: KeptPart[] }> {
  const parts: KeptPart[] = [];
  const headers = await readMime(source, limits, {
    // A report's own parts are attachments to mailparser: read as they are, not folded into the text.
    keepDeliveryStatus: true,
    onHeaderLines: (lines) => budget.spend(lines.length),
    onAttachment(data, fail) {
      const partId = data.partId ?? '';
      const type = data.contentType.toLowerCase();
      if (!keep(type)) {
        data.content.resume();
        return undefined;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      // A returned message is cut (its header comes first); a report part past the cap refuses the message.
      const cut = RETURNED_TYPES.has(type);
      return new Promise((resolve) => {
        data.content.on('data', (chunk: Buffer) => {
          if (size < limits.reportPartBytes) chunks.push(chunk);
          size += chunk.length;
          if (size > limits.reportPartBytes && !cut) {
            fail(new Refused(`a ${type} part over ${limits.reportPartBytes / 1024} KiB`));
          }
        });
        data.content.once('end', () => {
          const bytes = Buffer.concat(chunks).subarray(0, limits.reportPartBytes);
          parts.push({ partId, type, charset: contentTypeOf(data.headers).params.charset, bytes });
          resolve();
        });
        data.content.once('error', fail);
      });
    },
  });
  return { headers, parts };
}

/** The Message-ID and Return-Path of a returned message, or of its returned header. */
async function returnedHeaders(
  part: KeptPart | undefined,
  limits: ReportLimits,
  budget: LineBudget,
): Promise<{ messageId: string | null; returnPath: string | null }> {
  if (!part) return { messageId: null, returnPath: null };
  // Only the header is wanted: a returned message's body (the original's parts) is not read.
  const decoded = decodeText(part);
  const end = decoded.search(/\r?\n\r?\n/);
  const head = Buffer.from(`${end >= 0 ? decoded.slice(0, end) : decoded}\r\n\r\n`);
  const { headers } = await parse(head, limits, () => false, budget);
  const returnPath = headers.get('return-path');
  const address =
    returnPath && typeof returnPath === 'object' && 'value' in returnPath && Array.isArray(returnPath.value)
      ? (returnPath.value[0] as { address?: string } | undefined)?.address
      : undefined;
  return {
    messageId: messageIdIn(headerText(headers, 'message-id')),
    returnPath: address ? address.toLowerCase() : null,
  };
}

const messageIdIn = (value: string | undefined): string | null => value?.match(/<[^>\s]+>/)?.[0] ?? null;

/** The returned message (or header) that sits beside a report's machine-readable part. */
const returnedPart = (parts: KeptPart[], reportPart: KeptPart): KeptPart | undefined =>
  parts.find(
    (part) => RETURNED_TYPES.has(part.type) && parentOf(part.partId) === parentOf(reportPart.partId),
  );

async function readDeliveryStatus(
  headers: Headers,
  parts: KeptPart[],
  limits: ReportLimits,
  budget: LineBudget,
): Promise<Report> {
  const status = parts.find((part) => STATUS_TYPES.has(part.type));
  if (!status)
    return {
      kind: 'unreadable',
      reason: 'a delivery-status report without its message/delivery-status part',
    };
  const [perMessage, ...perRecipient] = fieldGroups(decodeText(status), budget);
  const recipients: DsnRecipient[] = [];
  for (const fields of perRecipient) {
    const action = fields.get('action')?.toLowerCase().split(/\s/, 1)[0] as DsnAction | undefined;
    if (!action || !ACTIONS.has(action)) continue;
    const code = fields.get('status')?.split(/\s/, 1)[0];
    recipients.push({
      finalRecipient: addressOf(fields.get('final-recipient')),
      originalRecipient: addressOf(fields.get('original-recipient')),
      action,
      status: code && ENHANCED_STATUS.test(code) ? code : null,
      diagnostic: withoutType(fields.get('diagnostic-code')),
      remoteMta: withoutType(fields.get('remote-mta')),
    });
  }
  if (recipients.length === 0)
    return { kind: 'unreadable', reason: 'a delivery-status report naming no recipient' };
  const returned = await returnedHeaders(returnedPart(parts, status), limits, budget);
  return {
    kind: 'delivery-status',
    reportingMta: withoutType(perMessage?.get('reporting-mta')),
    envelopeId: perMessage?.get('original-envelope-id')?.trim() || null,
    // From the returned message only: an In-Reply-To names a message any recipient could reply to.
    originalMessageId: returned.messageId,
    recipients,
  };
}

async function readFeedback(
  headers: Headers,
  parts: KeptPart[],
  limits: ReportLimits,
  budget: LineBudget,
): Promise<Report> {
  const report = parts.find((part) => part.type === FEEDBACK_TYPE);
  if (!report)
    return { kind: 'unreadable', reason: 'a feedback report without its message/feedback-report part' };
  const [fields] = fieldGroups(decodeText(report), budget);
  const feedbackType = fields?.get('feedback-type')?.toLowerCase();
  if (!feedbackType) return { kind: 'unreadable', reason: 'a feedback report without a Feedback-Type' };
  const returned = await returnedHeaders(returnedPart(parts, report), limits, budget);
  return {
    kind: 'feedback',
    feedbackType,
    originalRecipient: addressOf(fields?.get('original-rcpt-to')),
    userAgent: fields?.get('user-agent') ?? null,
    originalMessageId: returned.messageId,
    originalReturnPath: addressOf(fields?.get('original-mail-from')) ?? returned.returnPath,
  };
}

/** An auto-reply (vacation, out of office): RFC 3834's `Auto-Submitted`, or the de-facto headers. */
function autoReplyReason(headers: Headers): string | undefined {
  const autoSubmitted = headerText(headers, 'auto-submitted')?.toLowerCase();
  if (autoSubmitted && autoSubmitted !== 'no') return `Auto-Submitted: ${autoSubmitted}`;
  if (headers.has('x-autoreply') || headers.has('x-autorespond')) return 'X-Autoreply';
  if (headerText(headers, 'precedence')?.toLowerCase() === 'auto_reply') return 'Precedence: auto_reply';
  return undefined;
}

/**
 * Reads one message received for the bounce domain. Never throws: odd input is `unreadable`. The report
 * may sit below the top (a gateway wraps it in multipart/mixed): its machine-readable part is found
 * wherever it is, and the returned message beside it; an attached message (message/rfc822) is never
 * looked into, so a report quoted inside the reported message is not read as one.
 */
export async function readMessage(
  source: Uint8Array,
  limits: ReportLimits = REPORT_LIMITS,
): Promise<ReadMessage> {
  const budget = lineBudget(limits.headerLines);
  let headers: Headers;
  let parts: KeptPart[];
  try {
    ({ headers, parts } = await parse(
      source,
      limits,
      (type) => STATUS_TYPES.has(type) || type === FEEDBACK_TYPE || RETURNED_TYPES.has(type),
      budget,
    ));
  } catch (error) {
    return { report: unreadable(error), subject: null };
  }
  const subject = headerText(headers, 'subject')?.trim().slice(0, SUBJECT_MAX) || null;
  try {
    return { report: await readReportIn(headers, parts, limits, budget), subject };
  } catch (error) {
    return { report: unreadable(error), subject };
  }
}

function unreadable(error: unknown): Report {
  return { kind: 'unreadable', reason: unreadableReason(error) };
}

async function readReportIn(
  headers: Headers,
  parts: KeptPart[],
  limits: ReportLimits,
  budget: LineBudget,
): Promise<Report> {
  if (headers.size === 0) return { kind: 'unreadable', reason: 'no header fields' };
  const { type, params } = contentTypeOf(headers);
  const reportType = type === 'multipart/report' ? params['report-type']?.toLowerCase() : undefined;
  // A report below the top says what it is by its part: its own Content-Type is not handed out.
  const nested = reportType
    ? undefined
    : parts.some((part) => STATUS_TYPES.has(part.type))
      ? 'delivery-status'
      : parts.some((part) => part.type === FEEDBACK_TYPE)
        ? 'feedback-report'
        : undefined;
  const kind = reportType ?? nested;
  if (kind === 'delivery-status') return readDeliveryStatus(headers, parts, limits, budget);
  if (kind === 'feedback-report') return readFeedback(headers, parts, limits, budget);
  // A DSN is auto-submitted too (Postfix marks its reports so): only a message that is no report is an auto-reply.
  const autoReply = autoReplyReason(headers);
  if (autoReply) return { kind: 'auto-reply', reason: autoReply };
  return {
    kind: 'unreadable',
    reason: reportType ? `a report of type ${reportType}` : 'neither a delivery report nor a feedback report',
  };
}
