import type { SendMailOptions } from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer';
import { encodeWord } from 'nodemailer/lib/mime-funcs';
import type { DkimConfig, DsnNotify } from '../../config.ts';
import { parseAddress } from '../../lib/addresses.ts';
import type { EmailRecord } from '../emails/emails.repo.ts';
import { createDkimSigner, type DkimSigner } from './dkim.ts';
import { writeAtOnce } from './fast-paths.ts';
import { createBoundedMemo } from '../../lib/memo.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';

/** A stored address as nodemailer takes it; stored addresses were validated when the email was accepted. */
function toMailbox(stored: string): { name: string; address: string } {
  const parsed = parseAddress(stored);
  if (!parsed.ok) throw new Error(`stored address '${stored}' no longer parses: ${parsed.reason}`);
  return { name: parsed.value.name ?? '', address: parsed.value.address };
}

/** The bare address of the stored From: the envelope sender (Return-Path). */
export const envelopeSender = (email: EmailRecord): string => toMailbox(email.from).address;

/** The most octets a line of a message may have, CRLF excluded (RFC 5322 2.1.1). */
const MAX_LINE_OCTETS = 998;

/**
 * A header value that can be folded into lines of at most 998 octets. nodemailer folds header lines at
 * white space only, so a value with a run longer than that (a subject or header value of one long word) would
 * leave as one over-long line, which servers may cut or refuse; such a value goes as RFC 2047 encoded-words
 * instead, which fold between them and read back as the same text.
 */
function foldableHeaderValue(name: string, value: string): string {
  const longestRun = value.split(/[ \t]+/).reduce((longest, run) => Math.max(longest, run.length), 0);
  return name.length + 2 + longestRun > MAX_LINE_OCTETS ? encodeWord(value, 'Q', 52) : value;
}

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
/**
 * What a message is built from: nodemailer's options, or for an SMTP submission the message as written, in
 * the chunks it is kept in (`rawChunks`: joined only where it is built, see lib/byte-chunks.ts).
 */
export interface MessageOptions extends SendMailOptions {
  rawChunks?: ByteChunks;
  /** Each of `attachments`' content, in the chunks it is kept in (its `content` is left out until built). */
  attachmentChunks?: ByteChunks[];
}

export function mailOptions(
  email: EmailRecord,
  envelopeTo: readonly string[],
  envelopeFrom?: string,
  dsn: readonly DsnNotify[] = [],
): MessageOptions {
  // An SMTP submission travels as the application wrote it (prepared when it was accepted), after the header
  // fields a recipient's copy adds (List-Unsubscribe, when it asked for it).
  if (email.submitted !== undefined) {
    const added = Object.entries(email.headers).map(([name, value]) => `${name}: ${value}\r\n`);
    return {
      ...dsnRequest(email, envelopeTo, dsn),
      rawChunks:
        added.length > 0 ? [Buffer.from(added.join(''), 'latin1'), ...email.submitted] : email.submitted,
      envelope: { from: envelopeFrom ?? envelopeSender(email), to: [...envelopeTo] },
    };
  }
  return {
    ...dsnRequest(email, envelopeTo, dsn),
    from: toMailbox(email.from),
    to: email.to.map(toMailbox),
    ...(email.cc.length > 0 ? { cc: email.cc.map(toMailbox) } : {}),
    ...(email.replyTo.length > 0 ? { replyTo: email.replyTo.map(toMailbox) } : {}),
    subject: foldableHeaderValue('Subject', email.subject),
    ...(email.html !== null ? { html: email.html } : {}),
    ...(email.text !== null ? { text: email.text } : {}),
    headers: Object.fromEntries(
      Object.entries(email.headers).map(([name, value]) => [name, foldableHeaderValue(name, value)]),
    ),
    ...(email.attachments.length > 0
      ? {
          attachments: email.attachments.map((attachment) => ({
            filename: attachment.filename,
            ...(attachment.contentType ? { contentType: attachment.contentType } : {}),
            ...(attachment.contentId
              ? { cid: attachment.contentId, contentDisposition: 'inline' as const }
              : {}),
          })),
          attachmentChunks: email.attachments.map((attachment) => attachment.content ?? []),
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

/** Bytes as one Buffer: the chunk itself when there is one. */
const joined = (chunks: ByteChunks): Buffer => (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));

/** A line break that is not CRLF: a CR alone, or an LF alone. */
const BARE_LINE_BREAK = /\r(?!\n)|(?<!\r)\n/;

/**
 * The message with every line ending CRLF, as SMTP carries it: a bare CR or a bare LF becomes CRLF, as
 * nodemailer's SMTP client turns them on the wire (its DataStream) and as RFC 5322 requires. Text and html
 * reach nodemailer as the sender wrote them, LF included, and nodemailer keeps those breaks as they are; a
 * signature over them would not hold for the bytes that arrive, so this is done once, before signing.
 */
export function withCrlfLineEndings(message: Buffer): Buffer {
  const text = message.toString('latin1');
  if (!BARE_LINE_BREAK.test(text)) return message;
  return Buffer.from(text.replace(/\r\n|\r|\n/g, '\r\n'), 'latin1');
}

/**
 * The complete MIME message exactly as it leaves, on every transport: built by nodemailer (written at once
 * where fast-paths.ts can), its line endings made CRLF, then DKIM-signed when a key is configured. The
 * signature covers these bytes, and they are what goes on the wire and what capture keeps for `/raw`.
 */
export async function buildMessage(options: MessageOptions, signer: DkimSigner | undefined): Promise<Buffer> {
  let built: Buffer;
  if (options.rawChunks) built = withCrlfLineEndings(Buffer.concat(options.rawChunks));
  else if (Buffer.isBuffer(options.raw)) built = withCrlfLineEndings(options.raw);
  else {
    const { attachmentChunks, ...rest } = options;
    const composed: SendMailOptions = attachmentChunks
      ? {
          ...rest,
          attachments: rest.attachments?.map((attachment, index) => ({
            ...attachment,
            content: joined(attachmentChunks[index]!),
          })),
        }
      : rest;
    const root = new MailComposer(composed).compile();
    built = withCrlfLineEndings(writeAtOnce(root) ?? (await root.build()));
  }
  return signer ? signer.sign(built) : built;
}

/**
 * What an SMTP transport hands nodemailer: the message built and signed (`built`, so DKIM covers the headers
 * dkim.ts lists), with its envelope.
 */
export function rawMailOptions(options: SendMailOptions, built: Buffer): SendMailOptions {
  return {
    envelope: options.envelope!,
    // The DSN request travels beside the message: nodemailer puts it on MAIL FROM and RCPT TO.
    ...(options.dsn ? { dsn: options.dsn } : {}),
    raw: built,
  };
}
