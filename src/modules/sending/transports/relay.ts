import { Readable } from 'node:stream';
import type { SendMailOptions } from 'nodemailer';
import type MailMessage from 'nodemailer/lib/mailer/mail-message';
import MimeNode from 'nodemailer/lib/mime-node';
import SMTPPool, { type SMTPPoolSentMessageInfo } from 'nodemailer/lib/smtp-pool';
import type { DkimConfig } from '../../../config.ts';
import { STORED_ADDRESS } from '../../emails/addresses.ts';
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
 * pool reads the signal, the DSN request, and the message's envelope, Message-ID (by messageId() and by
 * getHeader('message-id')) and stream: what test/sending.test.ts's relay tests hold it to. With plain
 * envelope addresses not even a MIME node is made: its envelope parsing and its stream pipeline (an
 * AbortController and a DOMException per message) were another twentieth; the message is one buffer.
 */
function poolMessage(
  options: SendMailOptions,
  messageId: string,
  signal: AbortSignal,
): MailMessage<SMTPPoolSentMessageInfo> {
  const data = { signal, ...(options.dsn ? { dsn: options.dsn } : {}) };
  const raw = options.raw as Buffer;
  const { from, to } = options.envelope as { from: string; to: string[] };
  // Addresses in the stored form are what nodemailer's envelope parsing (which lower-cases and punycodes the
  // domain) leaves as they are; any other goes through it.
  if (STORED_ADDRESS.test(from) && to.every((address) => STORED_ADDRESS.test(address))) {
    const message = {
      // A new object each time: the pool adds the DSN request to the envelope it is given.
      getEnvelope: () => ({ from, to: [...to] }),
      messageId: () => messageId,
      getHeader: (key: string) => (key.toLowerCase() === 'message-id' ? messageId : undefined),
      createReadStream: () =>
        new Readable({
          read() {
            this.push(raw);
            this.push(null);
          },
        }),
    };
    return { data, message } as unknown as MailMessage<SMTPPoolSentMessageInfo>;
  }
  const message = new MimeNode('message/rfc822', { baseBoundary: 'raw' })
    .setRaw(raw)
    .setEnvelope(options.envelope!)
    .setHeader('Message-ID', messageId);
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
