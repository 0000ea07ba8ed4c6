import { once } from 'node:events';
import { type MimeNode, Splitter } from '@zone-eu/mailsplit';
import * as base64 from 'nodemailer/lib/base64';
import * as qp from 'nodemailer/lib/qp';
import {
  bufferOver,
  type ByteChunks,
  copiedForTransfer,
  HANDOVER_BYTES,
  totalBytes,
} from '../../lib/byte-chunks.ts';
import { createThreadPool, type ThreadPool } from '../../lib/thread-pool.ts';
import { type HtmlTracking, trackedHtml, trackedLinks } from './tracked-html.ts';

// The html of a message submitted over SMTP, for tracking (X-Postwire-Track): its text/html parts found by
// mailsplit's MIME parser, their text read, and each rewritten and re-encoded in place. Every other byte (the
// header, the other parts, the boundaries, the line breaks between) stays as submitted; a rewritten part keeps
// its transfer encoding, except a 7bit/8bit one whose lines would pass 998 octets, which becomes
// quoted-printable (the one header field changed). Attached html (Content-Disposition: attachment) and html
// inside a forwarded message (message/rfc822) are not the message's html and are left alone.

/** The most octets a line may have, CRLF excluded (RFC 5322 2.1.1). */
const MAX_LINE_OCTETS = 998;

/** What is read of a MIME node (mailsplit's, whose parent is typed by shape only). */
interface NodeShape {
  contentType: string | false;
  rfc822?: boolean;
  parentNode?: NodeShape | false;
}

/** One text/html part: where its header and body are in the message, how it is encoded, and its text. */
interface HtmlPart {
  headerStart: number;
  start: number;
  end: number;
  encoding: string;
  /** How its bytes become text and back: UTF-8 when declared (and valid), else byte for byte. */
  textEncoding: 'utf8' | 'latin1';
  html: string;
}

function isMessageHtml(node: MimeNode): boolean {
  if (node.contentType !== 'text/html' || node.disposition === 'attachment') return false;
  for (let parent: NodeShape | false | undefined = node.parentNode; parent; parent = parent.parentNode) {
    if (parent.contentType === 'message/rfc822' || parent.rfc822) return false;
  }
  return true;
}

async function decode(node: MimeNode, body: Buffer): Promise<Buffer> {
  const decoder = node.getDecoder();
  const chunks: Buffer[] = [];
  decoder.on('data', (chunk: Buffer) => chunks.push(chunk));
  const done = once(decoder, 'end');
  decoder.end(body);
  await done;
  return Buffer.concat(chunks);
}

function asText(bytes: Buffer, charset: string | false): Pick<HtmlPart, 'textEncoding' | 'html'> {
  const declared = (charset || 'us-ascii').toLowerCase();
  if (['utf-8', 'utf8', 'us-ascii', 'ascii'].includes(declared)) {
    try {
      return { textEncoding: 'utf8', html: new TextDecoder('utf-8', { fatal: true }).decode(bytes) };
    } catch {
      // Not valid UTF-8 after all: read byte for byte, so what is not rewritten is written back unchanged.
    }
  }
  // Any other charset is read byte for byte: the rewrite only adds ASCII, so the part's bytes stay its own.
  return { textEncoding: 'latin1', html: bytes.toString('latin1') };
}

/** The message's own text/html parts (not attachments, not inside a forwarded message), in order. */
async function htmlParts(raw: Buffer): Promise<HtmlPart[]> {
  const splitter = new Splitter();
  const found: Array<{ node: MimeNode; headerStart: number; start: number; chunks: Buffer[] }> = [];
  let offset = 0;
  let current: (typeof found)[number] | undefined;
  splitter.on('data', (data) => {
    if (data.type === 'node') {
      current = undefined;
      const header = data.getHeaders();
      if (isMessageHtml(data)) {
        current = { node: data, headerStart: offset, start: offset + header.length, chunks: [] };
        found.push(current);
      }
      offset += header.length;
      return;
    }
    if (!data.value) return;
    if (data.type === 'body' && current && data.node === current.node) current.chunks.push(data.value);
    else current = undefined;
    offset += data.value.length;
  });
  const ended = once(splitter, 'end');
  splitter.end(raw);
  await ended;
  // The parser's pieces must be the message's bytes, in order: else nothing could be replaced in place.
  if (offset !== raw.length) throw new Error(`the MIME parser read ${offset} of ${raw.length} bytes`);
  const parts: HtmlPart[] = [];
  for (const { node, headerStart, start, chunks } of found) {
    const body = Buffer.concat(chunks);
    if (!raw.subarray(start, start + body.length).equals(body)) {
      throw new Error('the MIME parser gave a part body that is not the message bytes');
    }
    parts.push({
      headerStart,
      start,
      end: start + body.length,
      encoding: (node.encoding || '7bit').toLowerCase(),
      ...asText(await decode(node, body), node.charset),
    });
  }
  return parts;
}

/** The text of the message's html parts (what tracking finds the links in), in order. */
export async function submittedHtml(raw: Buffer): Promise<string[]> {
  return (await htmlParts(raw)).map((part) => part.html);
}

/** The links tracking points at its click URLs in a submitted message's html (tracked-html.ts's rule). */
export async function linksOfSubmitted(raw: ByteChunks): Promise<string[]> {
  return trackedLinks((await submittedHtml(Buffer.concat(raw))).join('\n'));
}

/** One recipient's copy of a submitted message, its html parts tracked (see `HtmlTracking`). */
export async function trackedSubmission(raw: ByteChunks, tracking: HtmlTracking): Promise<ByteChunks> {
  return [await rewriteSubmittedHtml(Buffer.concat(raw), (html) => trackedHtml(html, tracking))];
}

const CONTENT_TRANSFER_ENCODING = /^Content-Transfer-Encoding:[^\n]*\n(?:[ \t][^\n]*\n)*/im;

/** A rewritten part's header and body, encoded as it was (or as quoted-printable, see above). */
function encodePart(header: string, part: HtmlPart, html: string, newline: string): [string, string] {
  const bytes = Buffer.from(html, part.textEncoding);
  const lines = (text: string) => text.replace(/\r?\n/g, newline);
  if (part.encoding === 'base64') return [header, lines(base64.wrap(bytes.toString('base64'), 76))];
  if (part.encoding === 'quoted-printable') return [header, lines(qp.wrap(qp.encode(bytes), 76))];
  const text = bytes.toString('latin1');
  if (text.split(/\r?\n/).every((line) => line.length <= MAX_LINE_OCTETS)) return [header, text];
  const field = `Content-Transfer-Encoding: quoted-printable${newline}`;
  const withField = CONTENT_TRANSFER_ENCODING.test(header)
    ? header.replace(CONTENT_TRANSFER_ENCODING, field)
    : header.replace(/(\r?\n)$/, `${field}$1`);
  return [withField, lines(qp.wrap(qp.encode(bytes), 76))];
}

/**
 * The message with `rewrite` applied to each of its html parts' text, those parts re-encoded; every other
 * byte as it was. A message without html parts comes back as it is.
 */
export async function rewriteSubmittedHtml(raw: Buffer, rewrite: (html: string) => string): Promise<Buffer> {
  const parts = await htmlParts(raw);
  if (parts.length === 0) return raw;
  const pieces: Buffer[] = [];
  let at = 0;
  for (const part of parts) {
    const html = rewrite(part.html);
    if (html === part.html) continue;
    const header = raw.subarray(part.headerStart, part.start).toString('latin1');
    const newline = header.endsWith('\r\n') ? '\r\n' : '\n';
    const [newHeader, body] = encodePart(header, part, html, newline);
    pieces.push(raw.subarray(at, part.headerStart), Buffer.from(newHeader + body, 'latin1'));
    at = part.end;
  }
  pieces.push(raw.subarray(at));
  return Buffer.concat(pieces);
}

// Finding a submitted message's links and writing a recipient's tracked copy both read the whole message
// (mailsplit's parse, the parts' decoding and re-encoding): for a 40 MiB message, seconds of CPU and fresh
// memory, during which an event loop doing it answers no one. So a message larger than LARGE_SUBMISSION_BYTES is
// handled on a thread (submitted-html-worker.ts, the same functions), handed over in copies made a piece at a
// time (lib/byte-chunks.ts); a small one here, where the hop would cost more than the work.

/** A submitted message past this many bytes has its html found and tracked on a thread. */
export const LARGE_SUBMISSION_BYTES = 256 * 1024;
/** One thread, and how many messages may wait for it (a send waits its turn, never fails). */
const SUBMITTED_HTML_THREADS = 1;
const SUBMITTED_HTML_QUEUE_LIMIT = 10_000;
/** CPU time one message's html may take on the thread: a 40 MiB message takes a few seconds. */
const SUBMITTED_HTML_BUDGET_MS = 60_000;

/** Find the links, or write a recipient's tracked copy. */
type SubmittedHtmlTask = { links: true } | { links?: undefined; tracking: HtmlTracking };
export type SubmittedHtmlRequest = SubmittedHtmlTask & { raw: Uint8Array[] };
export type SubmittedHtmlAnswer = { links: string[] } | { copy: Uint8Array };

let pool: ThreadPool<SubmittedHtmlRequest, SubmittedHtmlAnswer> | undefined;
/** The thread, started with the first large message; idle, it does not keep the process alive. */
const threads = () =>
  (pool ??= createThreadPool<SubmittedHtmlRequest, SubmittedHtmlAnswer>({
    name: 'submitted html',
    script: new URL('./submitted-html-worker.ts', import.meta.url),
    threads: SUBMITTED_HTML_THREADS,
    queueLimit: SUBMITTED_HTML_QUEUE_LIMIT,
    timeoutMs: SUBMITTED_HTML_BUDGET_MS,
    overBudget: () => new Error(`reading the message's html took longer than ${SUBMITTED_HTML_BUDGET_MS} ms`),
    queueFull: () => new Error('too many large messages are waiting for their html to be read'),
  }));

async function onThread(raw: ByteChunks, task: SubmittedHtmlTask): Promise<SubmittedHtmlAnswer> {
  const transfer: ArrayBuffer[] = [];
  const copies = await copiedForTransfer(raw, HANDOVER_BYTES, transfer);
  return threads().run({ ...task, raw: copies }, transfer);
}

/** `linksOfSubmitted`, on the thread when the message is large. */
export async function findSubmittedLinks(raw: ByteChunks): Promise<string[]> {
  if (totalBytes(raw) <= LARGE_SUBMISSION_BYTES) return linksOfSubmitted(raw);
  const answer = await onThread(raw, { links: true });
  return 'links' in answer ? answer.links : [];
}

/** `trackedSubmission`, on the thread when the message is large. */
export async function trackSubmission(raw: ByteChunks, tracking: HtmlTracking): Promise<ByteChunks> {
  if (totalBytes(raw) <= LARGE_SUBMISSION_BYTES) return trackedSubmission(raw, tracking);
  const answer = await onThread(raw, { tracking });
  if (!('copy' in answer)) throw new Error('the submitted-html thread answered without the copy');
  return [bufferOver(answer.copy)];
}
