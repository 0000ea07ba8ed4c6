import libmime from 'libmime';
import addressparser from 'nodemailer/lib/addressparser';
import { MESSAGE_ID_PATTERN } from '../../lib/addresses.ts';
import { type ByteChunks, bytesFrom, firstBytes, totalBytes } from '../../lib/byte-chunks.ts';
import { TAG_PATTERN } from '../emails/emails.service.ts';

// A message as an application submitted it over SMTP: its header read for what Postwire needs (From, the
// recipients' roles, Subject, Message-ID, the X-Postwire-* options), and the message made ready to send: the
// same bytes, less Bcc and the X-Postwire-* fields, plus a Message-ID and Date when it has none. Every byte is
// the client's: nothing here throws on odd input except SubmissionRefusal, whose text the client gets.

/** The header block may be this long at most: real mail has a few KiB; past it the message is refused. */
export const MAX_HEADER_BYTES = 256 * 1024;

/** What the client did wrong, as an SMTP reply (`554 5.6.0 …`). */
export class SubmissionRefusal extends Error {
  readonly responseCode: number;
  constructor(responseCode: number, message: string) {
    super(message);
    this.responseCode = responseCode;
  }
}

export interface HeaderField {
  /** As written. */
  name: string;
  /** Unfolded, undecoded. */
  value: string;
  /** The field's bytes as written, its folded lines and their line breaks included. */
  raw: string;
}

export interface SubmittedMessage {
  fields: HeaderField[];
  /** The body's bytes, after the blank line (none when there is none), in the chunks they came in. */
  body: ByteChunks;
  /** The line break the header uses, kept for what is added. */
  newline: string;
  from: string | null;
  /**
   * The addresses of Sender, Resent-From and Resent-Sender, with the field's name: who sent the message for
   * the author, or sent it on. Each must pass the rule From passes (emails.service's sender-domain rule).
   */
  senders: Array<{ field: string; address: string }>;
  to: string[];
  cc: string[];
  replyTo: string[];
  /** Decoded; '' when there is none. */
  subject: string;
  messageId: string | null;
  hasDate: boolean;
  /** X-Postwire-* options. */
  tags: Record<string, string>;
  sendAt: string | undefined;
  /** X-Postwire-Unsubscribe: one-click unsubscribe headers per recipient (RFC 8058). */
  unsubscribe: boolean;
  /** X-Postwire-Track: opens (a pixel) and clicks (links) tracked in the html part(s). */
  track: { opens: boolean; clicks: boolean };
}

const OPTION_PREFIX = 'x-postwire-';
/**
 * The options a client may give as headers, each at most once (a second would be ignored, or one of two
 * contradicting values picked); any other X-Postwire-* field is refused (a typo would do nothing).
 */
const OPTIONS = ['X-Postwire-Tags', 'X-Postwire-Send-At', 'X-Postwire-Unsubscribe', 'X-Postwire-Track'];
/**
 * The fields RFC 5322 (3.6) allows once at most. A second From is the one that matters: the sender-domain rule
 * reads the first, a reader may show the other, and DKIM's over-signing would vouch for both.
 */
const SINGLE_FIELDS = [
  'From',
  'Sender',
  'To',
  'Cc',
  'Bcc',
  'Reply-To',
  'Subject',
  'Date',
  'Message-ID',
  'In-Reply-To',
  'References',
];
/** Fields naming who sent the message, other than From, with how many addresses each holds (RFC 5322 3.6.2, 3.6.6). */
const SENDER_FIELDS = [
  { name: 'Sender', one: true },
  { name: 'Resent-Sender', one: true },
  { name: 'Resent-From', one: false },
] as const;

const fieldOf = (fields: readonly HeaderField[], name: string) =>
  fields.find((field) => field.name.toLowerCase() === name);

/** The bare addresses of an address header (groups flattened); those that are no address are left out. */
function addressesOf(field: HeaderField | undefined): string[] {
  if (!field) return [];
  const flat = (entries: ReturnType<typeof addressparser>): string[] =>
    entries.flatMap((entry) =>
      'group' in entry && entry.group
        ? flat(entry.group)
        : 'address' in entry && entry.address
          ? [entry.address]
          : [],
    );
  return flat(addressparser(field.value));
}

/** The From field as given (`Name <a@b>`), decoded, or null. */
function fromOf(field: HeaderField | undefined): string | null {
  if (!field) return null;
  const entries = addressparser(field.value).filter((entry) => 'address' in entry && entry.address);
  if (entries.length !== 1) throw new SubmissionRefusal(550, exactlyOne('From'));
  const entry = entries[0] as { name: string; address: string };
  const name = libmime
    .decodeWords(entry.name ?? '')
    .replace(/["\\\r\n]/g, '')
    .trim();
  return name ? `"${name}" <${entry.address}>` : entry.address;
}

const exactlyOne = (name: string) => `5.6.0 The ${name} header must hold exactly one address`;

/** The addresses of every Sender, Resent-Sender and Resent-From field (Resent-* repeat, one set per resending). */
function sendersOf(fields: readonly HeaderField[]): SubmittedMessage['senders'] {
  const senders: SubmittedMessage['senders'] = [];
  for (const { name, one } of SENDER_FIELDS) {
    for (const field of fields.filter((candidate) => candidate.name.toLowerCase() === name.toLowerCase())) {
      const addresses = addressesOf(field);
      if (one ? addresses.length !== 1 : addresses.length === 0) {
        throw new SubmissionRefusal(
          550,
          one ? exactlyOne(name) : `5.6.0 The ${name} header holds no address`,
        );
      }
      senders.push(...addresses.map((address) => ({ field: name, address })));
    }
  }
  return senders;
}

function tagsOf(field: HeaderField | undefined): Record<string, string> {
  if (!field) return {};
  const tags: Record<string, string> = {};
  for (const part of field.value.split(',')) {
    const text = part.trim();
    if (text === '') continue;
    const [name, value, ...rest] = text.split('=').map((piece) => piece.trim());
    if (rest.length > 0 || !name || !value || !TAG_PATTERN.test(name) || !TAG_PATTERN.test(value)) {
      throw new SubmissionRefusal(
        550,
        '5.6.0 X-Postwire-Tags takes name=value pairs separated by commas, each 1-256 letters, digits, _ or -',
      );
    }
    if (Object.hasOwn(tags, name)) {
      throw new SubmissionRefusal(550, `5.6.0 X-Postwire-Tags names the tag ${name} twice`);
    }
    tags[name] = value;
  }
  return tags;
}

function sendAtOf(field: HeaderField | undefined): string | undefined {
  if (!field) return undefined;
  const value = field.value.trim();
  // RFC 3339: a full date, time and offset.
  if (!/^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/.test(value)) {
    throw new SubmissionRefusal(
      550,
      '5.6.0 X-Postwire-Send-At must be an RFC 3339 time such as 2026-12-01T09:00:00Z',
    );
  }
  return value;
}

/** X-Postwire-Track: `opens`, `clicks`, both (separated by commas), or `none`. */
function trackOf(field: HeaderField | undefined): { opens: boolean; clicks: boolean } {
  const track = { opens: false, clicks: false };
  if (!field) return track;
  for (const part of field.value.split(',')) {
    const value = part.trim().toLowerCase();
    if (value === 'opens' || value === 'clicks') track[value] = true;
    else if (value !== 'none' && value !== '') {
      throw new SubmissionRefusal(550, '5.6.0 X-Postwire-Track takes opens, clicks or both (opens, clicks)');
    }
  }
  return track;
}

/** X-Postwire-Unsubscribe: `true` or `false`; true refuses a message that has its own List-Unsubscribe. */
function unsubscribeOf(fields: readonly HeaderField[]): boolean {
  const field = fieldOf(fields, 'x-postwire-unsubscribe');
  if (!field) return false;
  const value = field.value.trim().toLowerCase();
  if (value !== 'true' && value !== 'false') {
    throw new SubmissionRefusal(550, '5.6.0 X-Postwire-Unsubscribe must be true or false');
  }
  if (value === 'true' && fields.some((other) => other.name.toLowerCase().startsWith('list-unsubscribe'))) {
    throw new SubmissionRefusal(
      550,
      '5.6.0 With X-Postwire-Unsubscribe: true Postwire sets List-Unsubscribe itself; remove your own',
    );
  }
  return value === 'true';
}

/**
 * Reads a submitted message's header. Refused: a header past MAX_HEADER_BYTES, a field line that is not
 * `Name: value`, bare CR or NUL in the header, a field RFC 5322 allows once given twice, an unknown or repeated
 * X-Postwire-* field or a bad option value, a Sender, Resent-Sender or Resent-From without its address(es).
 */
export function readSubmission(raw: ByteChunks): SubmittedMessage {
  const size = totalBytes(raw);
  const head = firstBytes(raw, MAX_HEADER_BYTES + 4).toString('latin1');
  const crlf = head.indexOf('\r\n\r\n');
  const lf = head.indexOf('\n\n');
  let end: number;
  let newline: string;
  let hasBody = true;
  if (crlf >= 0 && (lf < 0 || crlf < lf)) {
    end = crlf + 2;
    newline = '\r\n';
  } else if (lf >= 0) {
    end = lf + 1;
    newline = '\n';
  } else if (size <= MAX_HEADER_BYTES) {
    // A message that is all header (no body).
    end = head.length;
    hasBody = false;
    newline = head.includes('\r\n') ? '\r\n' : '\n';
  } else {
    throw new SubmissionRefusal(552, `5.6.0 The header is over ${MAX_HEADER_BYTES} bytes`);
  }
  if (end > MAX_HEADER_BYTES) {
    throw new SubmissionRefusal(552, `5.6.0 The header is over ${MAX_HEADER_BYTES} bytes`);
  }
  const headerText = head.slice(0, end);
  // eslint-disable-next-line no-control-regex
  if (/\u0000|\r(?!\n)/.test(headerText)) {
    throw new SubmissionRefusal(550, '5.6.0 The header holds a NUL or a bare CR');
  }
  const fields: HeaderField[] = [];
  for (const line of headerText.split(/(?<=\n)/)) {
    if (line === '' || line === newline) continue;
    if (/^[ \t]/.test(line)) {
      const last = fields.at(-1);
      if (!last) throw new SubmissionRefusal(550, '5.6.0 The header starts with a continuation line');
      last.raw += line;
      last.value += ` ${line.trim()}`;
      continue;
    }
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon) : '';
    if (!/^[\x21-\x39\x3b-\x7e]+$/.test(name)) {
      throw new SubmissionRefusal(550, '5.6.0 A header line is not a field (Name: value)');
    }
    fields.push({ name, value: line.slice(colon + 1).trim(), raw: line });
  }
  const count = (name: string) =>
    fields.filter((field) => field.name.toLowerCase() === name.toLowerCase()).length;
  for (const field of fields) {
    const lower = field.name.toLowerCase();
    if (lower.startsWith(OPTION_PREFIX) && !OPTIONS.some((option) => option.toLowerCase() === lower)) {
      throw new SubmissionRefusal(
        550,
        `5.6.0 ${field.name} is not an option Postwire knows (${OPTIONS.join(', ')})`,
      );
    }
  }
  for (const name of SINGLE_FIELDS) {
    const times = count(name);
    if (times > 1) {
      throw new SubmissionRefusal(550, `5.6.0 The message has ${times} ${name} fields; RFC 5322 allows one`);
    }
  }
  for (const option of OPTIONS) {
    const times = count(option);
    if (times > 1) {
      throw new SubmissionRefusal(550, `5.6.0 ${option} is given ${times} times; give each option once`);
    }
  }
  const messageIdField = fieldOf(fields, 'message-id');
  const messageId = messageIdField?.value.trim() ?? null;
  if (messageId !== null && !MESSAGE_ID_PATTERN.test(messageId)) {
    throw new SubmissionRefusal(550, '5.6.0 The Message-ID header must be one <id@domain>');
  }
  return {
    fields,
    // Latin-1 maps each byte to one character: string offsets are byte offsets.
    body: hasBody ? bytesFrom(raw, end + newline.length) : [],
    newline,
    from: fromOf(fieldOf(fields, 'from')),
    senders: sendersOf(fields),
    to: addressesOf(fieldOf(fields, 'to')),
    cc: addressesOf(fieldOf(fields, 'cc')),
    replyTo: addressesOf(fieldOf(fields, 'reply-to')),
    subject: libmime.decodeWords(fieldOf(fields, 'subject')?.value ?? '').replace(/[\r\n]+/g, ' '),
    messageId,
    hasDate: fieldOf(fields, 'date') !== undefined,
    tags: tagsOf(fieldOf(fields, 'x-postwire-tags')),
    sendAt: sendAtOf(fieldOf(fields, 'x-postwire-send-at')),
    unsubscribe: unsubscribeOf(fields),
    track: trackOf(fieldOf(fields, 'x-postwire-track')),
  };
}

/**
 * The message as it is sent: the fields as written, less Bcc and the X-Postwire-* options, after a Message-ID
 * and a Date when it has none; then the body, byte for byte.
 */
export function messageToSend(message: SubmittedMessage, messageId: string, date: Date): Buffer[] {
  const added: string[] = [];
  if (message.messageId === null) added.push(`Message-ID: ${messageId}${message.newline}`);
  if (!message.hasDate) added.push(`Date: ${date.toUTCString().replace('GMT', '+0000')}${message.newline}`);
  const kept = message.fields
    .filter((field) => {
      const lower = field.name.toLowerCase();
      return lower !== 'bcc' && !lower.startsWith(OPTION_PREFIX);
    })
    .map((field) => field.raw);
  return [Buffer.from([...added, ...kept, message.newline].join(''), 'latin1'), ...message.body];
}
