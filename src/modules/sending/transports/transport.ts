import type { DkimConfig, DsnNotify } from '../../../config.ts';
import type { EmailRecord } from '../../emails/emails.repo.ts';

/** What one recipient's attempt came to. `response` is the server's reply when one came. */
export type RecipientOutcome =
  | { address: string; result: 'accepted'; response: string | null; complained?: boolean }
  | { address: string; result: 'bounced'; response: string | null; error: string | null }
  | { address: string; result: 'deferred'; response: string | null; error: string | null };

/** One SMTP transaction: an email to some of its recipients (those of one domain, in direct mode). */
export interface SendJob {
  email: EmailRecord;
  recipients: ReadonlyArray<{ address: string; attempts: number }>;
  /** The recipients' domain (direct mode: whose MX to use). */
  host: string;
  /** The envelope sender (a per-recipient return path); the From address when absent. */
  envelopeFrom?: string | undefined;
  /** The outcomes to ask the next hop to report (SMTP_DSN), when it offers DSN; none when absent. */
  dsn?: readonly DsnNotify[] | undefined;
  /** The key to sign with (a verified sending domain's); the transport's own DKIM_* key when absent. */
  dkim?: DkimConfig | undefined;
  /** Aborted when the attempt times out or the worker stops. */
  signal: AbortSignal;
  /**
   * Direct delivery: the destination's connections at once and messages per connection now (its limits,
   * issue 38), which bound the connections kept between messages; the unknown destination's when absent.
   */
  limits?: { connections: number; messagesPerConnection: number } | undefined;
  /**
   * Direct delivery: the local address to send from and the EHLO name that goes with it (DIRECT_SOURCE_IPS);
   * the machine's choice and the transport's name when absent.
   */
  source?: { address: string; helo: string | undefined } | undefined;
}

export interface SendResult {
  /** One per recipient of the job. */
  outcomes: RecipientOutcome[];
  /** The capture transport's MIME, kept in the database. */
  raw?: Buffer;
  /** Direct delivery: the MX hosts the recipients' domain resolved to (its destination, issue 38). */
  mxHosts?: string[];
}

export interface MailTransport {
  kind: 'relay' | 'direct' | 'capture';
  /** Where mail goes, for the start-up log line (never credentials). */
  description: string;
  /** True when acceptance is by the recipient's own server: `email.sent` is then also `email.delivered`. */
  finalHop: boolean;
  /** True when each recipient domain is its own destination (jobs per domain, concurrency per domain). */
  perDomain: boolean;
  send(job: SendJob): Promise<SendResult>;
  /** Direct delivery: the MX hosts a domain's mail goes to (its destination), before an attempt; undefined when the lookup fails. */
  mxHostsOf?(domain: string): Promise<string[] | undefined>;
  close(): Promise<void>;
}
