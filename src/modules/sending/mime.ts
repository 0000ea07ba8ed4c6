import type { Readable } from 'node:stream';
import type { SendMailOptions } from 'nodemailer';
import DKIM from 'nodemailer/lib/dkim';
import MailComposer from 'nodemailer/lib/mail-composer';
import type { DkimConfig, DsnNotify } from '../../config.ts';
import { parseAddress } from '../emails/addresses.ts';
import type { EmailRecord } from '../emails/emails.repo.ts';

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

/** nodemailer's DKIM options for the configured key (the transports sign with them). */
export function dkimOptions(dkim: DkimConfig | undefined) {
  return dkim
    ? { domainName: dkim.domain, keySelector: dkim.selector, privateKey: dkim.privateKey }
    : undefined;
}

async function collect(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream)
    chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
  return Buffer.concat(chunks);
}

/** The complete MIME message as the SMTP transports would send it (DKIM-signed when a key is configured). */
export async function buildRaw(options: SendMailOptions, dkim: DkimConfig | undefined): Promise<string> {
  const built = await new MailComposer(options).compile().build();
  const signing = dkimOptions(dkim);
  if (!signing) return built.toString('utf8');
  return (await collect(new DKIM(signing).sign(built))).toString('utf8');
}
