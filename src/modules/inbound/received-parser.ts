import { createHash } from 'node:crypto';
import { convert as htmlToText } from 'html-to-text';
import { type AddressObject, type AttachmentStream, type Headers, type MessageText } from 'mailparser';
import { headerText, readMime, Refused, unreadableReason } from './mime-stream.ts';

// Reads a received message (mail sent to a project's receiving address) into what the application that
// receives it gets: addresses, subject, date, threading ids, text, html, the text without its quoted history,
// the top header lines, and each attachment's name, type, size and SHA-256. Every byte is hostile. The MIME
// (structure, transfer and charset decoding, RFC 2047 words, addresses) is mailparser's; what is ours is the
// shape, the caps below and the quoted-history cut. Nothing here throws on odd input: what cannot be read,
// or breaks a cap, is `readable: false`, with why. It runs on a parse thread (received-reader.ts), never on
// the event loop that answers HTTP: the caps bound the work, the thread's budget bounds the rest.

export interface ReceivedAddress {
  /** As written, trimmed (not lowercased: a local part may be case-sensitive). */
  address: string;
  /** The display name, decoded; '' when there is none. */
  name: string;
}

export interface ReceivedAttachment {
  filename: string | null;
  content_type: string;
  /** Decoded bytes. */
  size: number;
  /** The Content-ID without its angle brackets (what a `cid:` link in the html names). */
  content_id: string | null;
  disposition: 'attachment' | 'inline';
  /** SHA-256 of the decoded bytes, hex. */
  sha256: string;
}

export type ParsedReceived =
  | {
      readable: true;
      from: ReceivedAddress | null;
      to: ReceivedAddress[];
      cc: ReceivedAddress[];
      reply_to: ReceivedAddress[];
      /** Decoded. */
      subject: string | null;
      /** ISO 8601 UTC with milliseconds; null when absent or not a date. */
      date: string | null;
      /** With its angle brackets, as in the header (`<abc@x>`). */
      message_id: string | null;
      in_reply_to: string | null;
      references: string[];
      text: string | null;
      /** The message's own html (not its text made into html). */
      html: string | null;
      /** `text` without its quoted history and signature, best effort (see replyText). */
      reply_text: string | null;
      /** The top-level header lines in order: names as written, values unfolded, undecoded. */
      headers: Array<{ name: string; value: string }>;
      attachments: ReceivedAttachment[];
    }
  | { readable: false; reason: string; subject: string | null };

export interface ReceivedAttachmentContent {
  filename: string | null;
  content_type: string;
  content: Buffer;
}

/** What the reader's thread is asked (received-reader.ts): the message, or (with `index`) one attachment's bytes. */
export interface ReceivedReadRequest {
  /** The message, in pieces handed over (transferred) to the thread. */
  raw: Uint8Array[];
  index?: number | undefined;
}

/**
 * What one received message may make the reader do; past any of them it is unreadable (and kept, with why).
 * Larger than REPORT_LIMITS: these are people's messages, not machines' reports. The listener takes 10 MiB
 * at most (INBOUND_MAX_SIZE), which bounds everything else.
 */
export const RECEIVED_LIMITS = {
  /**
   * MIME parts, containers included (mailparser's maxChildNodes). A message with a few dozen photos, each an
   * inline image in multipart/related inside multipart/alternative, is ~100 parts; mailing-list digests
   * (one message/rfc822 per post, kept whole, not parsed into) a few hundred. The splitter stops at the first
   * part past it, so a message of a million empty parts costs as much as one of 500.
   */
  parts: 500,
  /**
   * How deep an attachment may sit (`1.2.1` is 3 deep). Real clients nest 3–5 levels (mixed > alternative >
   * related > …); forwarding chains that wrap again a few more. Attached messages are kept whole, not read
   * into, so they add no depth.
   */
  depth: 12,
  /**
   * One header block, in bytes (mailparser's maxHeadSize; every line counts as 64 bytes at least, so a block
   * also holds at most 8,192 lines). A message relayed through many hops and mailing lists carries long
   * Received, ARC and DKIM chains: 50–150 KiB is seen in the wild; parts' headers are a few hundred bytes.
   */
  headerBytes: 512 * 1024,
  /**
   * Characters of text, and of html, kept: a newsletter's html is ~100 kB, a long thread's text a few
   * hundred. Past it, the value is cut (the raw message keeps every byte): an application gets the message
   * rather than nothing, and the copy posted back from the thread stays bounded.
   */
  bodyChars: 2 * 1024 * 1024,
  /**
   * Html converted to text (when there is no text part) at most, in characters: html-to-text takes ~1 s a
   * megabyte. Longer html leaves `text` null.
   */
  htmlToTextChars: 1024 * 1024,
} as const;

export type ReceivedLimits = typeof RECEIVED_LIMITS;

/** How deep html-to-text walks the html (mailparser's own bound). */
const HTML_DEPTH = 100;

interface Parsed {
  headers: Headers;
  headerLines: Array<{ key: string; line: string }>;
  text: MessageText | undefined;
}

/**
 * Runs mailparser over `source` (readMime). Each attachment's content goes to `onAttachment` (which must
 * drain it), an attached message among them (an .eml the application can open); the text is kept, cut at
 * bodyChars. Html is made text later, with our cap, only when there is no text at all.
 */
async function parse(
  source: Uint8Array,
  limits: ReceivedLimits,
  onAttachment: (attachment: AttachmentStream, index: number) => Promise<void>,
): Promise<Parsed> {
  let headerLines: Parsed['headerLines'] = [];
  let text: MessageText | undefined;
  let index = 0;
  const headers = await readMime(source, limits, {
    onHeaderLines: (lines) => (headerLines = lines),
    onText: (read) => (text = read),
    onAttachment: (attachment) => onAttachment(attachment, index++),
  });
  return { headers, headerLines, text };
}

/** Reads an attachment's content to its end, handing each chunk to `chunk`. */
function drain(attachment: AttachmentStream, chunk: (bytes: Buffer) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    attachment.content.on('data', chunk);
    attachment.content.once('end', () => resolve());
    attachment.content.once('error', reject);
  });
}

const contentTypeOf = (attachment: AttachmentStream) =>
  (attachment.contentType || 'application/octet-stream').toLowerCase();

/**
 * Inline when the part says so, or when it says nothing and has a Content-ID inside multipart/related (an
 * image the html shows); otherwise an attachment.
 */
function dispositionOf(attachment: AttachmentStream): 'attachment' | 'inline' {
  const said = attachment.contentDisposition?.toLowerCase();
  if (said === 'inline') return 'inline';
  if (said === 'attachment') return 'attachment';
  return attachment.related && attachment.cid ? 'inline' : 'attachment';
}

/** Every mailbox of an address header (groups replaced by their members). */
function addressesOf(headers: Headers, name: string): ReceivedAddress[] {
  const value = headers.get(name);
  const objects = (Array.isArray(value) ? value : [value]).filter(
    (entry): entry is AddressObject =>
      typeof entry === 'object' && entry !== null && 'value' in entry && Array.isArray(entry.value),
  );
  const out: ReceivedAddress[] = [];
  const add = (entries: AddressObject['value']) => {
    for (const entry of entries) {
      if (entry.group) add(entry.group);
      else if (entry.address?.trim()) out.push({ address: entry.address.trim(), name: entry.name ?? '' });
    }
  };
  for (const object of objects) add(object.value);
  return out;
}

/**
 * The Date header (RFC 5322 §3.3, and the obsolete forms Date.parse reads too) as ISO 8601, or null. Read
 * from the header line: mailparser puts the time of parsing in place of a date it cannot read.
 */
function dateOf(fields: Array<{ name: string; value: string }>): string | null {
  const value = fields.find(({ name }) => name.toLowerCase() === 'date')?.value.replace(/\([^)]*\)/g, '');
  // A time of day is required: Date.parse also takes a bare number ("1" is the year 2001).
  if (!value || !/\d{1,2}:\d{2}/.test(value)) return null;
  const time = Date.parse(value);
  return Number.isFinite(time) ? new Date(time).toISOString() : null;
}

/** `<a@b>` ids in order; a value with no brackets is split on white space. */
function messageIds(value: unknown): string[] {
  const joined = (Array.isArray(value) ? value : [value]).filter((v) => typeof v === 'string').join(' ');
  const bracketed = joined.match(/<[^<>\s]*>/g);
  if (bracketed) return bracketed;
  return joined.split(/\s+/).filter((id) => id.length > 0);
}

/** A raw header line's bytes (read as latin1 by the splitter) as UTF-8 when they are, else as they are. */
function decodeLine(line: string): string {
  const utf8 = Buffer.from(line, 'latin1').toString('utf8');
  return utf8.includes('\uFFFD') ? line : utf8;
}

/** The header fields (a line with no name before a colon is none, and is left out). */
function headerList(lines: Parsed['headerLines']): Array<{ name: string; value: string }> {
  const fields: Array<{ name: string; value: string }> = [];
  for (const { line } of lines) {
    const unfolded = decodeLine(line).replace(/\r?\n(?=[ \t])/g, '');
    const colon = unfolded.indexOf(':');
    const name = colon < 0 ? '' : unfolded.slice(0, colon).trim();
    if (name !== '') fields.push({ name, value: unfolded.slice(colon + 1).trim() });
  }
  return fields;
}

const cut = (value: string | undefined, max: number): string | null =>
  value === undefined || value === '' ? null : value.length > max ? value.slice(0, max) : value;

/** Lines that start a quoted reply, or what follows it, in the usual clients' words (see replyText). */
const ATTRIBUTION =
  /^(?:On|Le|Am|El|Il|Op|Em)\s.*(?:wrote|a écrit|schrieb|escribió|ha scritto|schreef|escreveu)\s?:$/i;
const ORIGINAL_MESSAGE = /^-{2,}\s*(?:Original Message|Forwarded message|Ursprüngliche Nachricht)\s*-{2,}$/i;
const OUTLOOK_RULE = /^_{20,}$/;
const SIGNATURE = /^-- ?$/;
const OUTLOOK_FROM = /^\*?From:\*?\s/i;
const OUTLOOK_NEXT = /^\*?(?:Sent|Date|To|Subject):\*?\s/i;

/**
 * The text with its quoted history removed, best effort: every line that starts with `>`, and everything
 * from the first of these on: an attribution line ("On <date>, <name> wrote:", also wrapped onto a second or
 * third line, as Gmail does), "-----Original Message-----", Outlook's rule of underscores, Outlook's header
 * block ("From: …" followed by "Sent:"/"Date:" within two lines) and the signature delimiter ("-- ").
 * A text with none of them comes back trimmed.
 */
export function replyText(text: string): string {
  const lines = text.split(/\r\n|\r|\n/);
  const kept: string[] = [];
  for (let at = 0; at < lines.length; at++) {
    const line = lines[at]!;
    const bare = line.trim();
    if (
      ORIGINAL_MESSAGE.test(bare) ||
      OUTLOOK_RULE.test(bare) ||
      SIGNATURE.test(line.trimStart()) ||
      ATTRIBUTION.test(bare) ||
      (/^(?:On|Le|Am|El|Il|Op|Em)\s/i.test(bare) &&
        (ATTRIBUTION.test(`${bare} ${lines[at + 1]?.trim() ?? ''}`) ||
          ATTRIBUTION.test(`${bare} ${lines[at + 1]?.trim() ?? ''} ${lines[at + 2]?.trim() ?? ''}`))) ||
      (OUTLOOK_FROM.test(bare) && lines.slice(at + 1, at + 3).some((next) => OUTLOOK_NEXT.test(next.trim())))
    ) {
      break;
    }
    if (line.trimStart().startsWith('>')) continue;
    kept.push(line);
  }
  return kept.join('\n').trim();
}

/**
 * Reads one received message. Never throws: odd input is `readable: false`, with why. Attachments are
 * hashed as they stream by; none is kept.
 */
export async function readReceived(
  source: Uint8Array,
  limits: ReceivedLimits = RECEIVED_LIMITS,
): Promise<ParsedReceived> {
  const attachments: ReceivedAttachment[] = [];
  let parsed: Parsed;
  try {
    parsed = await parse(source, limits, async (attachment, index) => {
      const hash = createHash('sha256');
      let size = 0;
      await drain(attachment, (chunk) => {
        hash.update(chunk);
        size += chunk.length;
      });
      attachments[index] = {
        filename: attachment.filename ?? null,
        content_type: contentTypeOf(attachment),
        size,
        content_id: attachment.cid || null,
        disposition: dispositionOf(attachment),
        sha256: hash.digest('hex'),
      };
    });
  } catch (error) {
    return unreadable(error, null);
  }
  const { headers, headerLines } = parsed;
  const subject = headerText(headers, 'subject')?.trim() || null;
  try {
    const fields = headerList(headerLines);
    if (fields.length === 0) return unreadable(new Refused('no header fields'), subject);
    const html = cut(parsed.text?.html, limits.bodyChars);
    let text = cut(parsed.text?.text, limits.bodyChars);
    if (text === null && html !== null && html.length <= limits.htmlToTextChars) {
      text = cut(htmlToText(html, { limits: { maxDepth: HTML_DEPTH } }), limits.bodyChars);
    }
    const from = addressesOf(headers, 'from')[0] ?? null;
    return {
      readable: true,
      from,
      to: addressesOf(headers, 'to'),
      cc: addressesOf(headers, 'cc'),
      reply_to: addressesOf(headers, 'reply-to'),
      subject,
      date: dateOf(fields),
      message_id: messageIds(headers.get('message-id'))[0] ?? null,
      in_reply_to: messageIds(headers.get('in-reply-to'))[0] ?? null,
      references: messageIds(headers.get('references')),
      text,
      html,
      reply_text: text === null ? null : replyText(text),
      headers: fields,
      attachments,
    };
  } catch (error) {
    return unreadable(error, subject);
  }
}

/**
 * The decoded bytes of attachment `index` (0-based, in the order readReceived lists them), or undefined
 * when there is no such attachment or the message is unreadable. Only that attachment's bytes are kept.
 */
export async function readReceivedAttachment(
  source: Uint8Array,
  index: number,
  limits: ReceivedLimits = RECEIVED_LIMITS,
): Promise<ReceivedAttachmentContent | undefined> {
  let found: ReceivedAttachmentContent | undefined;
  try {
    await parse(source, limits, async (attachment, at) => {
      if (at !== index) {
        await drain(attachment, () => {});
        return;
      }
      const chunks: Buffer[] = [];
      await drain(attachment, (chunk) => chunks.push(chunk));
      found = {
        filename: attachment.filename ?? null,
        content_type: contentTypeOf(attachment),
        content: Buffer.concat(chunks),
      };
    });
  } catch {
    return undefined;
  }
  return found;
}

function unreadable(error: unknown, subject: string | null): ParsedReceived {
  return { readable: false, reason: unreadableReason(error), subject };
}
