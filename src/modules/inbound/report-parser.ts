// Reads what mail systems send back after they accepted a message: delivery status notifications
// (RFC 3464, `multipart/report; report-type=delivery-status`), feedback reports (RFC 5965 ARF,
// `report-type=feedback-report`) and auto-replies (RFC 3834), which are neither. Every byte is hostile:
// nothing here throws on odd input; what cannot be read is `unreadable`, with why.

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

const ACTIONS = new Set<DsnAction>(['failed', 'delayed', 'delivered', 'relayed', 'expanded']);
const ENHANCED_STATUS = /^[245]\.\d{1,3}\.\d{1,3}$/;

/** Header-style fields (`Name: value`, folded lines joined) in groups separated by blank lines. */
export function fieldGroups(text: string): Array<Map<string, string>> {
  const groups: Array<Map<string, string>> = [];
  let current = new Map<string, string>();
  let last: string | undefined;
  for (const line of text.replace(/\r\n/g, '\n').split('\n')) {
    if (line.trim() === '') {
      if (current.size > 0) groups.push(current);
      current = new Map();
      last = undefined;
      continue;
    }
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

/** A MIME part: its lowercased content type, its parameters and its decoded body. */
interface Part {
  type: string;
  params: Map<string, string>;
  headers: Map<string, string>;
  body: string;
}

/** `multipart/report; report-type=delivery-status; boundary="b"` → type and parameters. */
function contentType(value: string | undefined): { type: string; params: Map<string, string> } {
  const [type = 'text/plain', ...rest] = (value ?? 'text/plain').split(';');
  const params = new Map<string, string>();
  for (const param of rest) {
    const equals = param.indexOf('=');
    if (equals <= 0) continue;
    params.set(
      param.slice(0, equals).trim().toLowerCase(),
      param
        .slice(equals + 1)
        .trim()
        .replace(/^"|"$/g, ''),
    );
  }
  return { type: type.trim().toLowerCase(), params };
}

function decodeBody(body: string, encoding: string | undefined): string {
  switch (encoding?.toLowerCase()) {
    case 'base64':
      return Buffer.from(body.replace(/[^A-Za-z0-9+/=]/g, ''), 'base64').toString('utf8');
    case 'quoted-printable':
      return Buffer.from(
        body
          .replace(/=\r?\n/g, '')
          .replace(/=([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16))),
        'latin1',
      ).toString('utf8');
    default:
      return body;
  }
}

/** Splits a message (or part) into its header fields and body. */
function split(text: string): { headers: Map<string, string>; body: string } {
  const normalized = text.replace(/\r\n/g, '\n');
  const end = normalized.indexOf('\n\n');
  const head = end < 0 ? normalized : normalized.slice(0, end);
  return { headers: fieldGroups(head)[0] ?? new Map(), body: end < 0 ? '' : normalized.slice(end + 2) };
}

/** The parts of a multipart body (one level: a report's parts are not nested multiparts). */
function partsOf(body: string, boundary: string): Part[] {
  const delimiter = `--${boundary}`;
  const parts: Part[] = [];
  const chunks = body.split(delimiter).slice(1);
  for (const chunk of chunks) {
    if (chunk.startsWith('--')) break;
    const { headers, body: content } = split(chunk.replace(/^[ \t]*\n/, ''));
    const { type, params } = contentType(headers.get('content-type'));
    parts.push({
      type,
      params,
      headers,
      body: decodeBody(content, headers.get('content-transfer-encoding')),
    });
  }
  return parts;
}

/** A `<…>` value (Message-ID, Return-Path) of the returned message or its headers (`message/rfc822`, `text/rfc822-headers`). */
function returnedHeader(parts: Part[], name: 'message-id' | 'return-path'): string | null {
  for (const part of parts) {
    if (!['message/rfc822', 'text/rfc822-headers', 'message/rfc822-headers'].includes(part.type)) continue;
    const found = split(part.body)
      .headers.get(name)
      ?.match(/<[^>\s]+>/);
    if (found) return found[0];
  }
  return null;
}

const returnedMessageId = (parts: Part[]): string | null => returnedHeader(parts, 'message-id');

function readDeliveryStatus(headers: Map<string, string>, parts: Part[]): Report {
  const status = parts.find(
    (part) => part.type === 'message/delivery-status' || part.type === 'message/global-delivery-status',
  );
  if (!status)
    return {
      kind: 'unreadable',
      reason: 'a delivery-status report without its message/delivery-status part',
    };
  const [perMessage, ...perRecipient] = fieldGroups(status.body);
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
  return {
    kind: 'delivery-status',
    reportingMta: withoutType(perMessage?.get('reporting-mta')),
    envelopeId: perMessage?.get('original-envelope-id')?.trim() || null,
    originalMessageId: returnedMessageId(parts) ?? inReplyTo(headers),
    recipients,
  };
}

function readFeedback(headers: Map<string, string>, parts: Part[]): Report {
  const report = parts.find((part) => part.type === 'message/feedback-report');
  if (!report)
    return { kind: 'unreadable', reason: 'a feedback report without its message/feedback-report part' };
  const [fields] = fieldGroups(report.body);
  const feedbackType = fields?.get('feedback-type')?.toLowerCase();
  if (!feedbackType) return { kind: 'unreadable', reason: 'a feedback report without a Feedback-Type' };
  return {
    kind: 'feedback',
    feedbackType,
    originalRecipient: addressOf(fields?.get('original-rcpt-to')),
    userAgent: fields?.get('user-agent') ?? null,
    originalMessageId: returnedMessageId(parts) ?? inReplyTo(headers),
    originalReturnPath:
      addressOf(fields?.get('original-mail-from')) ??
      returnedHeader(parts, 'return-path')?.slice(1, -1).toLowerCase() ??
      null,
  };
}

const inReplyTo = (headers: Map<string, string>): string | null =>
  headers.get('in-reply-to')?.match(/<[^>\s]+>/)?.[0] ?? null;

/** An auto-reply (vacation, out of office): RFC 3834's `Auto-Submitted`, or the de-facto headers. */
function autoReplyReason(headers: Map<string, string>): string | undefined {
  const autoSubmitted = headers.get('auto-submitted')?.toLowerCase();
  if (autoSubmitted && autoSubmitted !== 'no') return `Auto-Submitted: ${autoSubmitted}`;
  if (headers.has('x-autoreply') || headers.has('x-autorespond')) return 'X-Autoreply';
  if (headers.get('precedence')?.toLowerCase() === 'auto_reply') return 'Precedence: auto_reply';
  return undefined;
}

/** The Subject of a received message, unfolded and cut to `max` characters; null without one. */
export function subjectOf(source: Buffer, max = 200): string | null {
  const subject = split(source.subarray(0, 64 * 1024).toString('utf8')).headers.get('subject');
  return subject ? subject.slice(0, max) : null;
}

/** Reads one message received for the bounce domain. Never throws: odd input is `unreadable`. */
export function readReport(source: Buffer): Report {
  const { headers, body } = split(source.toString('utf8'));
  if (headers.size === 0) return { kind: 'unreadable', reason: 'no header fields' };
  const { type, params } = contentType(headers.get('content-type'));
  const reportType = type === 'multipart/report' ? params.get('report-type')?.toLowerCase() : undefined;
  const boundary = params.get('boundary');
  const parts = reportType && boundary ? partsOf(body, boundary) : [];
  if (reportType === 'delivery-status') return readDeliveryStatus(headers, parts);
  if (reportType === 'feedback-report') return readFeedback(headers, parts);
  // A DSN is auto-submitted too (Postfix marks its reports so): only a message that is no report is an auto-reply.
  const autoReply = autoReplyReason(headers);
  if (autoReply) return { kind: 'auto-reply', reason: autoReply };
  return {
    kind: 'unreadable',
    reason: reportType ? `a report of type ${reportType}` : 'neither a delivery report nor a feedback report',
  };
}
