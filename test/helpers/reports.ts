import { generateKeyPairSync } from 'node:crypto';
import { Socket } from 'node:net';
import nodemailer from 'nodemailer';
import DKIM from 'nodemailer/lib/dkim';

// Reports as mail systems send them back, for the inbound listener: delivery status notifications laid out
// as Postfix writes them (test/fixtures/reports/postfix-*.eml), RFC 5965 feedback reports and RFC 3834
// auto-replies, mailed over real SMTP from the null sender.

export interface DsnOptions {
  /** Where the report goes: the envelope sender of the reported message (our return path). */
  to: string;
  action: 'failed' | 'delayed' | 'delivered' | 'relayed';
  /** The address the report is about. */
  recipient: string;
  status: string;
  diagnostic: string;
  /** The reported message as the relay received it: its headers are returned (RET=HDRS). */
  original: string;
  envelopeId?: string;
  reportingMta?: string;
}

const headersOf = (raw: string): string => raw.replace(/\r\n/g, '\n').split('\n\n', 1)[0]!;

const SUBJECTS: Record<DsnOptions['action'], string> = {
  failed: 'Undelivered Mail Returned to Sender',
  delayed: 'Delayed Mail (still being retried)',
  delivered: 'Successful Mail Delivery Report',
  relayed: 'Successful Mail Delivery Report',
};

/** A delivery status notification (RFC 3464), laid out as Postfix writes one. */
export function buildDsn(options: DsnOptions): string {
  const mta = options.reportingMta ?? 'relay.example.net';
  const boundary = `B${Math.random().toString(36).slice(2)}/${mta}`;
  return [
    'Return-Path: <>',
    `Date: ${new Date().toUTCString()}`,
    `From: Mail Delivery System <MAILER-DAEMON@${mta}>`,
    `Subject: ${SUBJECTS[options.action]}`,
    `To: ${options.to}`,
    'Auto-Submitted: auto-replied',
    'MIME-Version: 1.0',
    `Content-Type: multipart/report; report-type=delivery-status;\n\tboundary="${boundary}"`,
    'Content-Transfer-Encoding: 8bit',
    `Message-Id: <${Date.now()}.report@${mta}>`,
    '',
    'This is a MIME-encapsulated message.',
    '',
    `--${boundary}`,
    'Content-Description: Notification',
    'Content-Type: text/plain; charset=utf-8',
    '',
    `This is the mail system at host ${mta}.`,
    '',
    `<${options.recipient}>: ${options.diagnostic}`,
    '',
    `--${boundary}`,
    'Content-Description: Delivery report',
    'Content-Type: message/delivery-status',
    '',
    `Reporting-MTA: dns; ${mta}`,
    ...(options.envelopeId ? [`Original-Envelope-Id: ${options.envelopeId}`] : []),
    `Arrival-Date: ${new Date().toUTCString()}`,
    '',
    `Final-Recipient: rfc822; ${options.recipient}`,
    `Original-Recipient: rfc822;${options.recipient}`,
    `Action: ${options.action}`,
    `Status: ${options.status}`,
    `Remote-MTA: dns; mx.${options.recipient.split('@')[1]}`,
    `Diagnostic-Code: smtp; ${options.diagnostic}`,
    '',
    `--${boundary}`,
    'Content-Description: Undelivered Message Headers',
    'Content-Type: text/rfc822-headers',
    '',
    headersOf(options.original),
    '',
    `--${boundary}--`,
    '',
  ].join('\n');
}

const DEFAULTS: Record<DsnOptions['action'], Pick<DsnOptions, 'status' | 'diagnostic'>> = {
  failed: { status: '5.1.1', diagnostic: '550 5.1.1 user unknown' },
  delayed: { status: '4.4.1', diagnostic: 'connect to mx: Connection timed out' },
  delivered: { status: '2.0.0', diagnostic: '250 2.0.0 Ok' },
  relayed: { status: '2.0.0', diagnostic: '250 2.0.0 Ok' },
};

/**
 * A report on a message as the relay received it (`from`: its return path, where the report goes; `raw`:
 * what is returned), with a usual status and diagnostic for the action unless given.
 */
export function dsnOn(
  message: { from: string; raw: string },
  options: Omit<DsnOptions, 'to' | 'original' | 'status' | 'diagnostic'> &
    Partial<Pick<DsnOptions, 'status' | 'diagnostic'>>,
): string {
  return buildDsn({ ...DEFAULTS[options.action], to: message.from, original: message.raw, ...options });
}

/** A feedback report (RFC 5965): a recipient marked the message as spam. */
export function buildArf(options: {
  to: string;
  original: string;
  /** The reported message's envelope sender, as `Original-Mail-From`; omitted when null. */
  originalMailFrom: string | null;
  /** `Original-Rcpt-To`; omitted when null (many providers redact it). */
  originalRcptTo: string | null;
  /** The reporter's address (default `feedback@mail.example.net`). */
  from?: string;
}): string {
  const boundary = `ARF${Math.random().toString(36).slice(2)}`;
  return [
    `From: <${options.from ?? 'feedback@mail.example.net'}>`,
    `Date: ${new Date().toUTCString()}`,
    'Subject: Complaint about a message',
    `To: ${options.to}`,
    'MIME-Version: 1.0',
    `Content-Type: multipart/report; report-type=feedback-report;\n     boundary="${boundary}"`,
    '',
    `--${boundary}`,
    'Content-Type: text/plain; charset="US-ASCII"',
    '',
    'This is an email abuse report.',
    '',
    `--${boundary}`,
    'Content-Type: message/feedback-report',
    '',
    'Feedback-Type: abuse',
    'User-Agent: ExampleFBL/1.0',
    'Version: 1',
    ...(options.originalMailFrom ? [`Original-Mail-From: <${options.originalMailFrom}>`] : []),
    ...(options.originalRcptTo ? [`Original-Rcpt-To: <${options.originalRcptTo}>`] : []),
    'Reporting-MTA: dns; mail.example.net',
    '',
    `--${boundary}`,
    'Content-Type: message/rfc822',
    'Content-Disposition: inline',
    '',
    options.original.replace(/\r\n/g, '\n'),
    '',
    `--${boundary}--`,
    '',
  ].join('\n');
}

/** A vacation message (RFC 3834) that landed on a return path: not a report. */
export function buildAutoReply(options: { to: string; subject: string }): string {
  return [
    'From: Ada <ada@example.org>',
    `To: ${options.to}`,
    `Subject: Out of office: ${options.subject}`,
    'Auto-Submitted: auto-replied',
    'Content-Type: text/plain; charset=utf-8',
    '',
    'I am away until Monday.',
    '',
  ].join('\n');
}

/** Mails `raw` to the inbound listener from the null sender, as an MTA sends a report; resolves to its reply. */
export async function mailReport(port: number, to: string, raw: string | Buffer): Promise<string> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true });
  try {
    const info = await transport.sendMail({ envelope: { from: '', to: [to] }, raw });
    return info.response;
  } finally {
    transport.close();
  }
}

/** A reporter's DKIM key: its private half, and the TXT record to publish at `<selector>._domainkey.<domain>`. */
export interface ReporterKey {
  domain: string;
  selector: string;
  privateKey: string;
  txt: string;
}

export function reporterKey(domain: string, selector = 'fbl'): ReporterKey {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    domain,
    selector,
    privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    txt: `v=DKIM1; k=rsa; p=${publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`,
  };
}

/** A report DKIM-signed as its provider signs it (nodemailer's signer; line endings made CRLF first). */
export async function signReport(raw: string, key: ReporterKey): Promise<Buffer> {
  const dkim = new DKIM({ domainName: key.domain, keySelector: key.selector, privateKey: key.privateKey });
  const chunks: Buffer[] = [];
  for await (const chunk of dkim.sign(Buffer.from(raw.replace(/\r?\n/g, '\r\n'))))
    chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Opens a connection and greets, then sends nothing more: a client that never gets to DATA. */
export function idleConnection(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = new Socket();
    socket.once('error', reject);
    socket.connect(port, '127.0.0.1', () => {
      socket.once('data', () => {
        socket.write('EHLO idle.example\r\nMAIL FROM:<>\r\n');
        socket.off('error', reject);
        socket.on('error', () => {});
        resolve(socket);
      });
    });
  });
}
