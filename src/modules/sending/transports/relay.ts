import SMTPPool, { type SMTPPoolSentMessageInfo } from 'nodemailer/lib/smtp-pool';
import type { DkimConfig } from '../../../config.ts';
import { poolMessage } from '../fast-paths.ts';
import { createMessageBuilder } from '../build-pool.ts';
import { mailOptions, rawMailOptions } from '../mime.ts';
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
  const builder = createMessageBuilder({ fallback: options.dkim, timeoutMs: options.timeoutMs });

  const target = new URL(options.url);
  return {
    kind: 'relay',
    description: `through the SMTP relay ${target.protocol}//${target.host}`,
    finalHop: false,
    perDomain: false,
    async send(job) {
      const addresses = job.recipients.map((recipient) => recipient.address);
      try {
        const message = mailOptions(job.email, addresses, job.envelopeFrom, job.dsn);
        const raw = rawMailOptions(message, await builder.build(message, job.dkim));
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
      await builder.close();
    },
  };
}
