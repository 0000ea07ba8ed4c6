import { resolveMx as dnsResolveMx } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { SendMailOptions } from 'nodemailer';
import { DEFAULTS, type DkimConfig } from '../../../config.ts';
import { isBlockedAddress, type Resolver, systemResolver } from '../../../lib/network-policy.ts';
import { createMessageBuilder } from '../build-pool.ts';
import { poolMessage } from '../fast-paths.ts';
import { mailOptions, rawMailOptions } from '../mime.ts';
import {
  type ConnectionLimits,
  type ConnectionMessage,
  createDirectConnections,
} from './direct-connections.ts';
import {
  describeSmtpError,
  isConnectionFailure,
  outcomesFromError,
  outcomesFromInfo,
  type SmtpError,
} from './smtp-result.ts';
import type { MailTransport, RecipientOutcome, SendJob } from './transport.ts';

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

/** A job that names no limits (a transport used without the worker's destinations): the unknown destination's. */
const NO_LIMITS: ConnectionLimits = { connections: Infinity, messagesPerConnection: 100 };

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
 * opportunistic STARTTLS, over connections kept between messages to the same server (direct-connections.ts).
 * The recipient's server accepting is delivery: `email.sent` then `email.delivered`; 5xx → bounced with the
 * server's reply; 4xx, or no server reachable → retried.
 */
export function createDirectTransport(options: DirectTransportOptions): MailTransport {
  const builder = createMessageBuilder({ fallback: options.dkim, timeoutMs: options.timeoutMs });
  const resolve = options.resolveMx ?? dnsResolveMx;
  const stepMs = Math.min(options.timeoutMs, 30_000);

  const lookup = options.lookup ?? systemResolver;

  /** The address to connect to, resolved here so the one checked is the one used (no DNS rebinding). */
  async function connectAddress(
    exchange: string,
    from: string | undefined,
  ): Promise<{ address: string } | { refused: string }> {
    const resolved = isIP(exchange) ? [exchange] : await lookup(exchange);
    // From a source IP, only its own family can be reached.
    const addresses = from ? resolved.filter((address) => isIP(address) === isIP(from)) : resolved;
    if (addresses.length === 0)
      return {
        refused: `${exchange} does not resolve${from ? ` to an address reachable from ${from}` : ''}`,
      };
    const allowed = options.allowPrivateTargets ? addresses : addresses.filter((a) => !isBlockedAddress(a));
    if (allowed.length === 0) {
      return {
        refused: `refused to connect: ${exchange} resolves to a loopback, private or link-local address`,
      };
    }
    return { address: allowed[0]! };
  }

  const connections = createDirectConnections();

  async function tryExchange(
    record: MxRecord,
    message: ConnectionMessage,
    limits: ConnectionLimits,
    source: SendJob['source'],
    signal: AbortSignal,
  ): Promise<{ info: unknown } | { error: SmtpError } | { refused: string }> {
    const target = await connectAddress(record.exchange, source?.address);
    if ('refused' in target) return target;
    const port = record.port ?? options.port ?? DEFAULTS.directMxPort;
    const servername = isIP(record.exchange) ? undefined : record.exchange;
    try {
      const info = await connections.send(
        `${target.address}|${port}|${servername ?? ''}|${source?.address ?? ''}`,
        {
          host: target.address,
          port,
          secure: false,
          // Most MX certificates do not name the MX host; STARTTLS still encrypts against passive listeners,
          // which is what opportunistic TLS between mail servers gives everywhere.
          tls: { rejectUnauthorized: false, ...(servername ? { servername } : {}) },
          connectionTimeout: stepMs,
          greetingTimeout: stepMs,
          socketTimeout: options.timeoutMs,
          ...(source ? { localAddress: source.address } : {}),
          // The name that goes with the address it leaves from (its PTR name), as receivers check.
          ...((source?.helo ?? options.hostname) ? { name: source?.helo ?? options.hostname } : {}),
        },
        limits,
        message,
        signal,
      );
      return { info };
    } catch (error) {
      return { error: error as SmtpError };
    }
  }

  /** The envelope (with the DSN request) and the bytes of a built message, as a connection sends them. */
  function connectionMessage(
    raw: SendMailOptions,
    messageId: string,
    signal: AbortSignal,
  ): ConnectionMessage {
    const mail = poolMessage(raw, messageId, signal);
    const envelope = mail.message.getEnvelope() as ConnectionMessage['envelope'];
    return {
      envelope: mail.data.dsn ? { ...envelope, dsn: mail.data.dsn } : envelope,
      stream: () => mail.message.createReadStream(),
    };
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
      const message = connectionMessage(
        rawMailOptions(options, await builder.build(options, job.dkim)),
        job.email.messageId,
        job.signal,
      );
      const limits = job.limits ?? NO_LIMITS;
      const mxHosts = found.hosts.map((record) => record.exchange);
      const failures: string[] = [];
      for (const record of found.hosts) {
        if (job.signal.aborted) break;
        const attempt = await tryExchange(record, message, limits, job.source, job.signal);
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
    async close() {
      connections.close();
      await builder.close();
    },
  };
}
