import { resolveMx as dnsResolveMx } from 'node:dns/promises';
import { isIP } from 'node:net';
import nodemailer, { type SendMailOptions } from 'nodemailer';
import { DEFAULTS, type DkimConfig } from '../../../config.ts';
import { isBlockedAddress, type Resolver, systemResolver } from '../../../lib/network-policy.ts';
import { createMessageBuilder } from '../build-pool.ts';
import { mailOptions, rawMailOptions } from '../mime.ts';
import {
  describeSmtpError,
  isConnectionFailure,
  outcomesFromError,
  outcomesFromInfo,
  type SmtpError,
} from './smtp-result.ts';
import type { MailTransport, RecipientOutcome } from './transport.ts';

export interface MxRecord {
  exchange: string;
  priority: number;
  /** The SMTP port of this exchange; 25 unless a test points it elsewhere. */
  port?: number;
}

/** Resolves a domain's MX records; throws errors with the DNS `code` (ENODATA, ENOTFOUND, …). */
export type MxResolver = (domain: string) => Promise<MxRecord[]>;

export interface DirectTransportOptions {
  /** One attempt's connect and idle limits, in ms. */
  timeoutMs: number;
  dkim?: DkimConfig | undefined;
  /** The EHLO name; the machine's host name when absent. */
  hostname?: string | undefined;
  /** DNS MX lookup; tests point it at 127.0.0.1 and a local port. */
  resolveMx?: MxResolver;
  /** Port for exchanges whose record names none. */
  port?: number;
  /**
   * Whether mail servers on loopback, private or link-local addresses may be reached. A recipient domain
   * is the sender's choice, so its MX could otherwise point this server at internal hosts (SSRF).
   */
  allowPrivateTargets: boolean;
  /** Resolves an exchange's name to the addresses to connect to; every one is checked first. */
  lookup?: Resolver;
}

type Route = { hosts: MxRecord[] } | { bounce: string } | { defer: string };

/** The servers to try for a domain, in preference order: its MX records, else the domain itself (RFC 5321 §5.1). */
async function route(domain: string, resolve: MxResolver): Promise<Route> {
  let records: MxRecord[];
  try {
    records = await resolve(domain);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENODATA') return { hosts: [{ exchange: domain, priority: 0 }] };
    if (code === 'ENOTFOUND') return { bounce: `the domain ${domain} does not exist (no DNS records)` };
    return { defer: `looking up the mail servers of ${domain} failed (${code ?? String(error)})` };
  }
  if (records.length === 0) return { hosts: [{ exchange: domain, priority: 0 }] };
  // A "null MX" (RFC 7505): the domain says it accepts no mail.
  if (records.length === 1 && ['', '.'].includes(records[0]!.exchange)) {
    return { bounce: `the domain ${domain} accepts no mail (null MX)` };
  }
  return { hosts: [...records].sort((a, b) => a.priority - b.priority) };
}

/**
 * Straight to each recipient domain's mail servers (MX by preference, then the domain's own address), with
 * opportunistic STARTTLS. The recipient's server accepting is delivery: `email.sent` then `email.delivered`;
 * 5xx → bounced with the server's reply; 4xx, or no server reachable → retried.
 */
export function createDirectTransport(options: DirectTransportOptions): MailTransport {
  const builder = createMessageBuilder({ fallback: options.dkim, timeoutMs: options.timeoutMs });
  const resolve = options.resolveMx ?? dnsResolveMx;
  const stepMs = Math.min(options.timeoutMs, 30_000);

  const lookup = options.lookup ?? systemResolver;

  /** The address to connect to, resolved here so the one checked is the one used (no DNS rebinding). */
  async function connectAddress(exchange: string): Promise<{ address: string } | { refused: string }> {
    const addresses = isIP(exchange) ? [exchange] : await lookup(exchange);
    if (addresses.length === 0) return { refused: `${exchange} does not resolve` };
    const allowed = options.allowPrivateTargets ? addresses : addresses.filter((a) => !isBlockedAddress(a));
    if (allowed.length === 0) {
      return {
        refused: `refused to connect: ${exchange} resolves to a loopback, private or link-local address`,
      };
    }
    return { address: allowed[0]! };
  }

  async function tryExchange(
    record: MxRecord,
    message: SendMailOptions,
    signal: AbortSignal,
  ): Promise<{ info: unknown } | { error: SmtpError } | { refused: string }> {
    const target = await connectAddress(record.exchange);
    if ('refused' in target) return target;
    const transporter = nodemailer.createTransport({
      host: target.address,
      port: record.port ?? options.port ?? DEFAULTS.directMxPort,
      secure: false,
      // Most MX certificates do not name the MX host; STARTTLS still encrypts against passive listeners,
      // which is what opportunistic TLS between mail servers gives everywhere.
      tls: { rejectUnauthorized: false, ...(isIP(record.exchange) ? {} : { servername: record.exchange }) },
      connectionTimeout: stepMs,
      greetingTimeout: stepMs,
      socketTimeout: options.timeoutMs,
      ...(options.hostname ? { name: options.hostname } : {}),
    });
    try {
      return { info: await transporter.sendMail({ ...message, signal }) };
    } catch (error) {
      return { error: error as SmtpError };
    } finally {
      transporter.close();
    }
  }

  return {
    kind: 'direct',
    description: "straight to each recipient domain's mail servers (MX)",
    finalHop: true,
    perDomain: true,
    async send(job) {
      const addresses = job.recipients.map((recipient) => recipient.address);
      const all = (result: 'bounced' | 'deferred', error: string): RecipientOutcome[] =>
        addresses.map((address) => ({ address, result, response: null, error }));

      const found = await route(job.host, resolve);
      if ('bounce' in found) return { outcomes: all('bounced', found.bounce) };
      if ('defer' in found) return { outcomes: all('deferred', found.defer) };

      // Built and signed once for every MX tried.
      const options = mailOptions(job.email, addresses, job.envelopeFrom, job.dsn);
      const message = rawMailOptions(options, await builder.build(options, job.dkim));
      const mxHosts = found.hosts.map((record) => record.exchange);
      const failures: string[] = [];
      for (const record of found.hosts) {
        if (job.signal.aborted) break;
        const attempt = await tryExchange(record, message, job.signal);
        if ('info' in attempt)
          return { outcomes: outcomesFromInfo(attempt.info as object, addresses), mxHosts };
        if ('refused' in attempt) {
          failures.push(attempt.refused);
          continue;
        }
        // A server that answered decided; one that could not be reached leaves the next MX to try.
        if (!isConnectionFailure(attempt.error))
          return { outcomes: outcomesFromError(attempt.error, addresses), mxHosts };
        failures.push(`${record.exchange}: ${describeSmtpError(attempt.error)}`);
      }
      const tried = failures.join('; ') || 'aborted';
      return {
        outcomes: all('deferred', `no mail server of ${job.host} could be reached (${tried})`),
        mxHosts,
      };
    },
    async mxHostsOf(domain) {
      const found = await route(domain, resolve);
      return 'hosts' in found ? found.hosts.map((record) => record.exchange) : undefined;
    },
    close: () => builder.close(),
  };
}
