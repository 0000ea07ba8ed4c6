import type { SendMailOptions } from 'nodemailer';
import { encode as base64Encode } from 'nodemailer/lib/base64';
import MailComposer from 'nodemailer/lib/mail-composer';
import MimeNode from 'nodemailer/lib/mime-node';
import { encode as qpEncode, wrap as qpWrap } from 'nodemailer/lib/qp';
import type { DkimConfig, DsnNotify } from '../../config.ts';
import { parseAddress } from '../emails/addresses.ts';
import type { EmailRecord } from '../emails/emails.repo.ts';
import { createDkimSigner, type DkimSigner } from './dkim.ts';
import { createBoundedMemo } from '../../lib/memo.ts';

/** Header names whose normalized form is kept (a message has a dozen or so; the rest are tenants' own). */
const HEADER_NAMES_KEPT = 1000;

// nodemailer normalizes a header name (three regular expressions) on every setHeader, getHeader and header
// line it builds: about 40 times per message, a third of building one (96-110 µs a message, 67-70 with
// this). The result depends on the name alone, so nodemailer's own result is kept per name and given again:
// nothing changes but the cost. Importing this module does it for the whole process (every transport here
// builds messages through it).
const normalizeHeaderKey = (MimeNode.prototype as unknown as { _normalizeHeaderKey(key: unknown): string })
  ._normalizeHeaderKey;
const normalizedHeaderKey = createBoundedMemo<string, string>(HEADER_NAMES_KEPT);
Object.assign(MimeNode.prototype, {
  _normalizeHeaderKey(this: MimeNode, key: unknown): string {
    if (typeof key !== 'string') return normalizeHeaderKey.call(this, key);
    return normalizedHeaderKey(key, () => normalizeHeaderKey.call(this, key));
  },
});

/** A stored address as nodemailer takes it; stored addresses were validated when the email was accepted. */
function toMailbox(stored: string): { name: string; address: string } {
  const parsed = parseAddress(stored);
  if (!parsed.ok) throw new Error(`stored address '${stored}' no longer parses: ${parsed.reason}`);
  return { name: parsed.value.name ?? '', address: parsed.value.address };
}

/** The bare address of the stored From: the envelope sender (Return-Path). */
export const envelopeSender = (email: EmailRecord): string => toMailbox(email.from).address;

/**
 * The delivery status notifications one SMTP transaction asks for (RFC 3461), sent only to a server that
 * offers the DSN extension: on which outcomes, with the headers only (`RET=HDRS`), the email's id as ENVID
 * (a report names it even when it comes back to no return path of ours), and ORCPT when the transaction
 * has one recipient.
 */
function dsnRequest(email: EmailRecord, envelopeTo: readonly string[], notify: readonly DsnNotify[]) {
  if (notify.length === 0) return {};
  return {
    dsn: {
      id: email.id,
      return: 'headers',
      notify: notify.map((outcome) => outcome.toUpperCase()),
      ...(envelopeTo.length === 1 ? { recipient: envelopeTo[0] } : {}),
    },
  };
}

/**
 * The message nodemailer builds for one SMTP transaction of an email: the same headers for every
 * recipient (Bcc never appears), the stored Message-ID and the time the email was accepted as its Date, so
 * every attempt and every duplicate is recognisably the same message. `envelopeTo` are the recipients this
 * transaction is for; `envelopeFrom` the return path (VERP), else the From address; `dsn` the outcomes the
 * next hop is asked to report.
 */
export function mailOptions(
  email: EmailRecord,
  envelopeTo: readonly string[],
  envelopeFrom?: string,
  dsn: readonly DsnNotify[] = [],
): SendMailOptions {
  return {
    ...dsnRequest(email, envelopeTo, dsn),
    from: toMailbox(email.from),
    to: email.to.map(toMailbox),
    ...(email.cc.length > 0 ? { cc: email.cc.map(toMailbox) } : {}),
    ...(email.replyTo.length > 0 ? { replyTo: email.replyTo.map(toMailbox) } : {}),
    subject: email.subject,
    ...(email.html !== null ? { html: email.html } : {}),
    ...(email.text !== null ? { text: email.text } : {}),
    headers: email.headers,
    ...(email.attachments.length > 0
      ? {
          attachments: email.attachments.map((attachment) => ({
            filename: attachment.filename,
            content: attachment.content,
            ...(attachment.contentType ? { contentType: attachment.contentType } : {}),
            ...(attachment.contentId
              ? { cid: attachment.contentId, contentDisposition: 'inline' as const }
              : {}),
          })),
        }
      : {}),
    messageId: email.messageId,
    date: new Date(email.createdAt),
    envelope: { from: envelopeFrom ?? envelopeSender(email), to: [...envelopeTo] },
    // Tenant content is text only: nothing in a message may make the sender read a file or fetch a URL.
    disableFileAccess: true,
    disableUrlAccess: true,
  };
}

/** The signer of the configured key, made once per transport (parsing a key per message costs). */
/** Sending domains' signers a transport keeps: parsing a key per message costs, and keys change rarely. */
const DOMAIN_SIGNERS_KEPT = 256;

/**
 * A transport's signers: for each message its sending domain's key (`dkim`, from the domains module), else
 * the transport's own (`fallback`, the DKIM_* key). Each transport keeps its own, bounded cache.
 */
export function messageSigners(
  fallback: DkimConfig | undefined,
): (dkim: DkimConfig | undefined) => DkimSigner | undefined {
  const own = fallback ? createDkimSigner(fallback) : undefined;
  const domainSigners = createBoundedMemo<string, DkimSigner>(DOMAIN_SIGNERS_KEPT);
  return (dkim) => {
    if (!dkim) return own;
    return domainSigners(`${dkim.domain} ${dkim.selector} ${dkim.privateKey}`, () => createDkimSigner(dkim));
  };
}

// A message written at once. nodemailer's build() streams its tree: a pipeline per node, encoder streams, a
// tick or an immediate between every part; for a short message that was most of the CPU a send cost. The
// tree it compiled is written here without streams, byte for byte as build() writes it (test/mime.test.ts
// compares the two), with nodemailer's own header building and encoders, when it holds only what that
// takes: contents given as text or bytes up to one encoder slice, encoded as text, and no transforms.

/** nodemailer's QP encoder works through a content in slices of this many bytes; one slice is written here. */
const ENCODER_SLICE = 64 * 1024;
const LINE_LENGTH = 76;

/** The tree's internals the checks below read (nodemailer's MimeNode, not in its types). */
type NodeInternals = MimeNode & { _raw?: unknown; _transforms?: unknown[]; _processFuncs?: unknown[] };

const contentBytes = (content: string | Buffer): Buffer =>
  typeof content === 'string' ? Buffer.from(content, 'utf8') : content;

/** Whether every node of the tree can be written at once (and how build() would write it, known). */
function writableAtOnce(node: NodeInternals): boolean {
  if (node._raw || node._transforms?.length || node._processFuncs?.length) return false;
  if (node === node.rootNode && node.newline) return false;
  const { content } = node;
  if (content) {
    if (typeof content !== 'string' && !Buffer.isBuffer(content)) return false;
    if (contentBytes(content).length > ENCODER_SLICE) return false;
    // Outside text/*, QP keeps lone CR and LF as data (the encoder's binary mode), which is not written here.
    const type = String(node.getHeader('Content-Type') ?? '')
      .toLowerCase()
      .trim();
    if (node.getTransferEncoding() === 'quoted-printable' && !type.startsWith('text/')) return false;
  }
  return node.childNodes.every(writableAtOnce);
}

/** Base64 in lines of 76, CRLF between them, as nodemailer's base64 encoder writes one chunk. */
function base64Lines(bytes: Buffer): string {
  const encoded = base64Encode(bytes);
  const lines: string[] = [];
  for (let at = 0; at < encoded.length; at += LINE_LENGTH) lines.push(encoded.slice(at, at + LINE_LENGTH));
  return lines.join('\r\n');
}

/**
 * Quoted-printable as nodemailer's QP encoder writes one chunk of a slice or less: the trailing spaces and tabs
 * encoded after the rest, each part wrapped after the unfinished line the one before left.
 */
function quotedPrintable(bytes: Buffer): string {
  let end = bytes.length;
  while (end > 0 && (bytes[end - 1] === 0x20 || bytes[end - 1] === 0x09)) end -= 1;
  let written = '';
  let line = '';
  for (const part of [bytes.subarray(0, end), bytes.subarray(end)]) {
    if (part.length === 0) continue;
    const wrapped = qpWrap(line + qpEncode(part), LINE_LENGTH);
    const lastLineFeed = wrapped.lastIndexOf('\n');
    written += wrapped.slice(0, lastLineFeed + 1);
    line = wrapped.slice(lastLineFeed + 1);
  }
  return written + line;
}

function writeNode(node: MimeNode, parts: Buffer[]): void {
  parts.push(Buffer.from(`${node.buildHeaders()}\r\n\r\n`, 'utf8'));
  const content = node.content as string | Buffer | undefined;
  if (content) {
    const encoding = node.getTransferEncoding();
    const bytes = contentBytes(content);
    if (encoding === 'base64') parts.push(Buffer.from(base64Lines(bytes), 'latin1'));
    else if (encoding === 'quoted-printable') parts.push(Buffer.from(quotedPrintable(bytes), 'latin1'));
    else parts.push(bytes);
  }
  if (!node.multipart) return;
  node.childNodes.forEach((child, index) => {
    parts.push(Buffer.from(`${index > 0 ? '\r\n' : ''}--${node.boundary}\r\n`, 'utf8'));
    writeNode(child, parts);
  });
  parts.push(Buffer.from(`\r\n--${node.boundary}--\r\n`, 'utf8'));
}

/** The compiled message, written at once when its tree allows (see above); undefined when it does not. */
export function writeAtOnce(root: MimeNode): Buffer | undefined {
  if (!writableAtOnce(root)) return undefined;
  const parts: Buffer[] = [];
  writeNode(root, parts);
  const message = Buffer.concat(parts);
  // As nodemailer's last stage: the message ends with a line break.
  const last = message.at(-1);
  if (last === 0x0a) return message;
  return Buffer.concat([message, Buffer.from(last === 0x0d ? '\n' : '\r\n', 'latin1')]);
}

/** The complete MIME message as it leaves (DKIM-signed when a key is configured). */
export async function buildMessage(
  options: SendMailOptions,
  signer: DkimSigner | undefined,
): Promise<Buffer> {
  const root = new MailComposer(options).compile();
  const built = writeAtOnce(root) ?? (await root.build());
  return signer ? signer.sign(built) : built;
}

/** The same, as text (the capture transport keeps it). */
export async function buildRaw(options: SendMailOptions, signer: DkimSigner | undefined): Promise<string> {
  return (await buildMessage(options, signer)).toString('utf8');
}

/**
 * What an SMTP transport hands nodemailer: the message built and signed here (so DKIM covers the headers
 * dkim.ts lists), with its envelope.
 */
export async function rawMailOptions(
  options: SendMailOptions,
  signer: DkimSigner | undefined,
): Promise<SendMailOptions> {
  return {
    envelope: options.envelope!,
    // The DSN request travels beside the message: nodemailer puts it on MAIL FROM and RCPT TO.
    ...(options.dsn ? { dsn: options.dsn } : {}),
    raw: await buildMessage(options, signer),
  };
}
