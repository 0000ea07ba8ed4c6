import type { SendMailOptions } from 'nodemailer';
import type MailMessage from 'nodemailer/lib/mailer/mail-message';
import MimeNode from 'nodemailer/lib/mime-node';
import SMTPPool, { type SMTPPoolSentMessageInfo } from 'nodemailer/lib/smtp-pool';
import type { DkimConfig } from '../../../config.ts';
import { mailOptions, messageSigners, rawMailOptions } from '../mime.ts';
import { outcomesFromError, outcomesFromInfo, type SmtpError } from './smtp-result.ts';
import type { MailTransport } from './transport.ts';

export interface RelayTransportOptions {
  /** `smtp://user:pass@host:587` (STARTTLS when offered) or `smtps://…:465` (TLS from the start). */
  url: string;
  /** Pooled connections to the relay. */
  connections: number;
  /** Idle and connect limits of one attempt, in ms. */
  timeoutMs: number;
  dkim?: DkimConfig | undefined;
  /** The EHLO name; nodemailer uses the machine's host name when absent. */
  hostname?: string | undefined;
  /** Extra TLS options (tests trust a self-signed relay). */
  tls?: { rejectUnauthorized?: boolean } | undefined;
}

/**
 * A built message as the pool takes it: what nodemailer's sendMail() would hand it for a `raw` message, made
 * here without sendMail()'s layers (its plugin steps, a second MIME tree compiled around the raw message, a
 * random Message-ID and boundary drawn for that tree), which cost about a tenth of a relayed send's CPU. The
 * pool reads the signal, the DSN request, and the message's envelope, Message-ID and stream.
 */
function poolMessage(
  options: SendMailOptions,
  messageId: string,
  signal: AbortSignal,
): MailMessage<SMTPPoolSentMessageInfo> {
  const message = new MimeNode('message/rfc822', { baseBoundary: 'raw' })
    .setRaw(options.raw as Buffer)
    .setEnvelope(options.envelope!)
    .setHeader('Message-ID', messageId);
  const data = { signal, ...(options.dsn ? { dsn: options.dsn } : {}) };
  return { data, message } as unknown as MailMessage<SMTPPoolSentMessageInfo>;
}

/**
 * Everything through one SMTP relay (any provider's SMTP service), over a pool of connections that stay
 * open between messages. Relay accepts → `email.sent` (the relay delivers on), 5xx → bounced, 4xx or no
 * connection → retried.
 */
export function createRelayTransport(options: RelayTransportOptions): MailTransport {
  const stepMs = Math.min(options.timeoutMs, 30_000);
  const pool = new SMTPPool({
    url: options.url,
    pool: true,
    maxConnections: options.connections,
    maxMessages: 1000,
    connectionTimeout: stepMs,
    greetingTimeout: stepMs,
    socketTimeout: options.timeoutMs,
    ...(options.hostname ? { name: options.hostname } : {}),
    ...(options.tls ? { tls: options.tls } : {}),
  });
  const signerFor = messageSigners(options.dkim);

  const target = new URL(options.url);
  return {
    kind: 'relay',
    description: `through the SMTP relay ${target.protocol}//${target.host}`,
    finalHop: false,
    perDomain: false,
    async send(job) {
      const addresses = job.recipients.map((recipient) => recipient.address);
      try {
        const raw = await rawMailOptions(
          mailOptions(job.email, addresses, job.envelopeFrom, job.dsn),
          signerFor(job.dkim),
        );
        // The pool fails a message whose signal aborts (or had) with EABORT, as sendMail() did.
        const info = await new Promise<SMTPPoolSentMessageInfo>((resolve, reject) => {
          pool.send(poolMessage(raw, job.email.messageId, job.signal), (error, sent) =>
            error || !sent ? reject(error ?? new Error('the pool reported nothing')) : resolve(sent),
          );
        });
        return { outcomes: outcomesFromInfo(info, addresses) };
      } catch (error) {
        return { outcomes: outcomesFromError(error as SmtpError, addresses) };
      }
    },
    async close() {
      pool.close();
    },
  };
}
