import { createPrivateKey } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseDnsServer } from './lib/dns.ts';
import { parseDuration, parseSchedule } from './lib/duration.ts';

/**
 * How often an idle worker looks for due jobs when no wake-up comes (another process on SQLite, a lost
 * LISTEN connection): the longest a job can wait for a worker that was not told about it.
 */
export const WORKER_POLL_INTERVAL_MS = 1000;

/**
 * Defaults that code outside loadConfig also falls back to (the app and services are built without a
 * Config in tests and benchmarks): each is defined here once, and loadConfig uses the same values.
 */
export const DEFAULTS = {
  /**
   * PostgreSQL: a stamp read vouches for the in-memory reads this long, and an answer after a write to their
   * tables waits it out (db/validated-cache.ts; CACHE_STAMP_LEASE).
   */
  cacheStampLeaseMs: 10,
  webhookTimeoutMs: 15_000,
  /** POST /v1/webhooks/{id}/test waits the attempt timeout plus this: time for a worker to claim it. */
  webhookTestMarginMs: 5000,
  webhookSecretRotationWindowMs: 86_400_000,
  sendDailyLimit: 10_000,
  templateRendering: {
    /** A render still running after this long is stopped, its thread ended (TEMPLATE_RENDER_TIMEOUT). */
    timeoutMs: 250,
    /** Render threads: one core left to the event loop that answers requests (TEMPLATE_RENDER_THREADS). */
    threads: Math.max(1, availableParallelism() - 1),
    /** Renders waiting for a thread at most; past it, 429 (TEMPLATE_RENDER_QUEUE). */
    queueLimit: 64,
  },
  reportParsing: {
    /**
     * Reading a received message that has used this much CPU time is stopped by ending its thread, and the
     * message is unreadable (REPORT_PARSE_TIMEOUT). A 10 MB message takes about 0.4 s; a report, milliseconds.
     */
    timeoutMs: 2000,
    /**
     * Threads that read received messages (REPORT_PARSE_THREADS): one, so that reading never takes more than
     * a core from the API beside it; a report takes milliseconds, so one reads hundreds a second.
     */
    threads: 1,
    /** The heap of each, in MiB (REPORT_PARSE_MEMORY): what 10 MB of hostile MIME needs, with room. */
    memoryMb: 64,
  },
  /** A worker silent this long is dead: the others give its leased jobs back (WORKER_DEAD_AFTER). */
  workerDeadAfterMs: 15_000,
  /** Failed authentications one client address may make per window before it is refused (429). */
  authFailureLimit: 20,
  authFailureWindowMs: 60_000,
  inbound: {
    /** Where the inbound SMTP listener for reports listens (INBOUND_SMTP_HOST, INBOUND_SMTP_PORT). */
    host: '127.0.0.1',
    port: 2525,
    /** The largest message it takes (INBOUND_MAX_BYTES); a real report is a few kilobytes. */
    maxBytes: 10 * 1024 * 1024,
    /**
     * A session (connection) still open this long is ended with a 421, however busy it keeps the line
     * (INBOUND_SESSION_TIMEOUT): the idle timeout alone lets a byte every few seconds hold it for ever. A report
     * takes seconds; 10 MiB over a slow link, a minute or two.
     */
    sessionTimeoutMs: 5 * 60_000,
    /**
     * Sessions one client address may hold at once; the next one is refused with a 421
     * (INBOUND_MAX_CONNECTIONS_PER_CLIENT). A mail system sends reports over a few connections at most.
     */
    maxConnectionsPerClient: 20,
  },
  /** Events, attempts, stored MIME, tracking rows and received reports older than this are deleted (RETENTION). */
  retentionMs: 30 * 86_400_000,
  /** What the next hop is asked to report (SMTP_DSN), when it offers the DSN extension. */
  smtpDsn: ['success', 'failure', 'delay'] as DsnNotify[],
  /** Verified and failed sending domains are looked up again this often (DOMAIN_RECHECK). */
  domainRecheckMs: 6 * 3_600_000,
  /**
   * Request bodies held in memory at once, in bytes (HTTP_BODY_MEMORY_LIMIT); a body that does not fit beside
   * the others is a 429 with retry-after. Each costs four to five times its size while it is read, parsed,
   * decoded and stored, so 64 MiB is one of the largest sends (56 MiB) at a time, with room for small requests
   * beside it: +340 to +380 MB at the peak for six parallel 56 MB sends, against +630 to +810 MB unbounded
   * (bench/body-memory.ts).
   */
  httpBodyMemoryBytes: 64 * 1024 * 1024,
  httpTimeouts: {
    /** A connection that sends and receives nothing for this long is closed (HTTP_IDLE_TIMEOUT). */
    idleMs: 60_000,
    /** A request's headers must all arrive within this (HTTP_HEADERS_TIMEOUT). */
    headersMs: 10_000,
    /** A whole request, body included, must arrive within this (HTTP_REQUEST_TIMEOUT). */
    requestMs: 60_000,
    /** An idle kept-alive connection is closed after this (HTTP_KEEP_ALIVE_TIMEOUT). */
    keepAliveMs: 5_000,
  },
  /** What a send gets when it does not say (TRACK_OPENS, TRACK_CLICKS, LIST_UNSUBSCRIBE): all off. */
  engagement: { trackOpens: false, trackClicks: false, listUnsubscribe: false },
  /** Requests one client address may make per minute to the public tracking and unsubscribe routes. */
  publicRateLimit: 1200,
  publicRateLimitWindowMs: 60_000,
  /**
   * A transaction open longer than this logs the stack that opened it (TRANSACTION_WARN; src/db/
   * transaction-watch.ts): on SQLite every other query of the process waits for it. Off in production
   * (NODE_ENV=production) unless set.
   */
  transactionWarnMs: 1000,
  /**
   * Sends (POST /v1/emails and its batch) that arrive while a group of them is being written wait and are
   * written together, one statement per table, up to `maxEmails` a group (src/modules/emails/send-groups.ts).
   */
  sendGroups: { maxEmails: 100 },
} as const;

/**
 * Connections the inbound SMTP listener holds at once, from all clients together: far above what reports
 * need, far below the process's file limit.
 */
export const INBOUND_MAX_CONNECTIONS = 5000;

/**
 * TRANSACTION_WARN: a duration, or `off`; unset, the default outside production (NODE_ENV=production: off),
 * where a stack per slow transaction is a help to whoever is developing or testing.
 */
function transactionWarn(env: Env, problems: string[]): number | undefined {
  const raw = env.TRANSACTION_WARN?.trim().toLowerCase();
  if (raw === undefined || raw === '') {
    return env.NODE_ENV === 'production' ? undefined : DEFAULTS.transactionWarnMs;
  }
  if (raw === 'off') return undefined;
  const value = parseDuration(raw);
  if (value === undefined || value < 1) {
    problems.push(
      `TRANSACTION_WARN must be a duration such as 500ms or 2s, or off, got '${env.TRANSACTION_WARN}'.`,
    );
    return DEFAULTS.transactionWarnMs;
  }
  return value;
}

/** Every answer after a write to the in-memory reads' tables waits the lease: longer would stall writes. */
const CACHE_STAMP_LEASE_MAX_MS = 1000;

export interface Config {
  port: number;
  host: string;
  /** `postgres://…` selects PostgreSQL; unset means the embedded SQLite file `postwire.db` in dataDir. */
  databaseUrl: string | undefined;
  /**
   * PostgreSQL: how long a stamp read vouches for the in-memory reads (keys, webhooks, templates, domains);
   * answers after a write to those tables wait as long. 0: a stamp read on every use. CACHE_STAMP_LEASE.
   */
  cacheStampLeaseMs: number;
  /** A transaction open longer than this logs the stack that opened it; undefined: none is watched. TRANSACTION_WARN. */
  transactionWarnMs: number | undefined;
  dataDir: string;
  /** 32 bytes for AES-256-GCM; undefined means "generate once into dataDir". */
  encryptionKey: Buffer | undefined;
  allowPrivateUrls: boolean;
  bootstrapKey: string | undefined;
  /** Requests a key may make per window; 0 turns the limiter off. */
  rateLimit: number;
  rateLimitWindowMs: number;
  /** Failed authentications per client address per window; 0 turns the limit off. */
  authFailureLimit: number;
  authFailureWindowMs: number;
  logLevel: string;
  /** `pretty` (pino-pretty: coloured, one readable line per entry) or `json` (one JSON object per line). */
  logFormat: LogFormat;
  /** A webhook attempt must answer 2xx within this many ms (connect and response). */
  webhookTimeoutMs: number;
  /** Delay in ms before each attempt: step 0 is the first attempt (always 0: sent when the event happens). */
  webhookRetrySchedule: number[];
  /** Each retry delay is moved by up to ± this fraction, so retries of many deliveries spread out. */
  webhookRetryJitter: number;
  /** Webhook attempts in flight at once per worker, overall and per webhook. */
  webhookConcurrency: number;
  webhookConcurrencyPerEndpoint: number;
  /** A webhook whose attempts have all failed for this long is disabled. */
  webhookDisableAfterMs: number;
  /** A worker whose heartbeat stopped this long ago is dead: its leased jobs come back to the others. */
  workerDeadAfterMs: number;
  httpTimeouts: HttpTimeouts;
  /** Bytes of request bodies held in memory at once; past it, 429. 0: no limit. */
  httpBodyMemoryBytes: number;
  templateRendering: { timeoutMs: number; threads: number; queueLimit: number };
  /** Where received messages are read: threads with a CPU budget per message and a heap cap each. */
  reportParsing: { timeoutMs: number; threads: number; memoryMb: number };
  /** After a PATCH replaces a webhook's secret, the old one keeps signing (next to the new one) this long. */
  webhookSecretRotationWindowMs: number;
  /**
   * How mail leaves: `relay` through smtpUrl, `direct` to each recipient domain's MX, `capture` kept in the
   * database (nothing leaves the machine). Default: relay when SMTP_URL is set, else capture.
   */
  mailTransport: MailTransportKind;
  /** `smtp(s)://user:pass@host:port` of the relay; only used by the relay transport. */
  smtpUrl: string | undefined;
  /** Delay in ms before each send attempt of a recipient; its length is the number of attempts. */
  sendRetrySchedule: number[];
  /** SMTP transactions in flight at once per worker (in relay mode: the pooled connections to the relay). */
  sendConcurrency: number;
  /** SMTP transactions in flight at once to one recipient domain per worker (direct mode). */
  sendConcurrencyPerHost: number;
  /** Recipients a project may send to per UTC day; 0 means no limit. */
  sendDailyLimit: number;
  /** One SMTP attempt (connect to the final reply) must finish within this many ms. */
  sendTimeoutMs: number;
  /** The name this service gives in EHLO; the machine's host name when unset. */
  mailHostname: string | undefined;
  /**
   * The domain of per-recipient return paths (VERP, `bounce+<token>@BOUNCE_DOMAIN`), so bounce reports come
   * back to Postwire; unset: the envelope sender is the From address and late bounces stay invisible.
   */
  bounceDomain: string | undefined;
  /** DKIM signing of every message, when all three DKIM_* settings are given. */
  dkim: DkimConfig | undefined;
  /** Delivery status notifications asked of the next hop (RFC 3461); empty: none asked (`SMTP_DSN=off`). */
  smtpDsn: DsnNotify[];
  /** The SMTP listener that receives reports for the bounce domain; it runs only when bounceDomain is set. */
  inbound: InboundConfig;
  /**
   * Feedback loops the operator trusts: a reporting domain → the recipient domains whose reports it signs
   * (REPORT_FEEDBACK_LOOPS). A report not sent to a recipient's own return path changes it only when signed
   * by one of these, or by the recipient's domain from a role address (inbound/report-authentication.ts).
   */
  reportFeedbackLoops: ReadonlyMap<string, readonly string[]>;
  /** Rows older than this are pruned by the workers (RETENTION); undefined (`off`): kept for ever. */
  retentionMs: number | undefined;
  /** The DNS servers (`ip` or `ip:port`) for direct mode and domain verification; empty: the system's. */
  dnsServers: string[];
  /** The port direct mode connects to on each MX: 25, except in a test network. */
  directMxPort: number;
  /**
   * Which From domains a project may send as: `verified` (only its verified domains) or `any` (others are
   * signed with the fallback DKIM_* key). A domain another project verified is refused either way.
   */
  senderDomains: SenderDomainsPolicy;
  /** The host a sending domain's return-path subdomain points its MX at (our inbound listener). */
  inboundMxHost: string | undefined;
  /** The SPF record a sending domain's return-path subdomain publishes, `v=spf1 ip4:… -all`. */
  sendingSpf: string | undefined;
  /** How often verified and failed domains are looked up again. */
  domainRecheckMs: number;
  /**
   * The base URL recipients' mail clients reach (`https://mail.acme.example`), without a trailing slash:
   * tracking and unsubscribe links are built on it. Unset: sends asking for them are refused.
   */
  publicUrl: string | undefined;
  /** What a send gets when it does not say. */
  engagement: EngagementDefaults;
  /** Requests per client address per minute on the public routes (PUBLIC_RATE_LIMIT); 0 turns it off. */
  publicRateLimit: number;
}

export interface EngagementDefaults {
  trackOpens: boolean;
  trackClicks: boolean;
  listUnsubscribe: boolean;
}

/** The outcomes a DSN request asks to hear about (`NOTIFY=SUCCESS,FAILURE,DELAY`). */
export type DsnNotify = 'success' | 'failure' | 'delay';

export interface InboundConfig {
  host: string;
  port: number;
  /** Messages larger than this are refused (552) and not stored. */
  maxBytes: number;
  /** A session open this long is ended (421), whatever it is doing. */
  sessionTimeoutMs: number;
  /** Sessions one client address may hold at once; past it, 421. */
  maxConnectionsPerClient: number;
  /** PEM certificate and key: STARTTLS is offered when both are set. */
  tls: { cert: string; key: string } | undefined;
}

export type SenderDomainsPolicy = 'verified' | 'any';

/** How long the HTTP server waits on a client, phase by phase; past it, the connection is closed. */
export interface HttpTimeouts {
  idleMs: number;
  headersMs: number;
  requestMs: number;
  keepAliveMs: number;
}

export type MailTransportKind = 'relay' | 'direct' | 'capture';

export interface DkimConfig {
  domain: string;
  selector: string;
  /** The private key as PEM. */
  privateKey: string;
}

export class ConfigError extends Error {
  constructor(problems: string[]) {
    super(`Invalid configuration:\n${problems.map((problem) => `  - ${problem}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/**
 * `stdoutIsTTY` picks the default log format: pretty for a person at a terminal, JSON for everything that
 * collects logs (a pipe, a file, a container runtime).
 */
export function loadConfig(
  env: Env = process.env,
  { stdoutIsTTY = process.stdout.isTTY === true }: { stdoutIsTTY?: boolean } = {},
): Config {
  const problems: string[] = [];

  const integer = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      problems.push(`${name} must be an integer from ${min} to ${max}, got '${raw}'.`);
      return fallback;
    }
    return value;
  };

  const boolean = (name: string, fallback: boolean): boolean => {
    const raw = env[name]?.toLowerCase();
    if (raw === undefined || raw === '') return fallback;
    if (['true', '1', 'yes'].includes(raw)) return true;
    if (['false', '0', 'no'].includes(raw)) return false;
    problems.push(`${name} must be true or false, got '${env[name]}'.`);
    return fallback;
  };

  const duration = (name: string, fallback: number, max = Infinity): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = parseDuration(raw);
    if (value === undefined) {
      problems.push(`${name} must be a duration such as 500ms, 5s, 5m or 2h, got '${raw}'.`);
      return fallback;
    }
    if (value > max) {
      problems.push(`${name} must be at most ${max}ms, got '${raw}'.`);
      return fallback;
    }
    return value;
  };

  const fraction = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isFinite(value) || value < 0 || value > 1) {
      problems.push(`${name} must be a number from 0 to 1, got '${raw}'.`);
      return fallback;
    }
    return value;
  };

  const schedule = (name: string, fallback: string): number[] => {
    const raw = env[name] || fallback;
    const steps = parseSchedule(raw);
    if (!steps || steps.length > 50) {
      problems.push(`${name} must be 1 to 50 comma-separated durations such as 0,5s,5m,2h, got '${raw}'.`);
      return parseSchedule(fallback)!;
    }
    // The first attempt goes out when the event is stored; a non-zero first step would silently not apply.
    if (steps[0] !== 0) {
      problems.push(`${name} must start with 0 (the first attempt is made at once), got '${raw}'.`);
      return parseSchedule(fallback)!;
    }
    return steps;
  };

  const oneOf = <T extends string>(name: string, allowed: readonly T[], fallback: T): T => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    if ((allowed as readonly string[]).includes(raw)) return raw as T;
    problems.push(`${name} must be one of ${allowed.join(', ')}, got '${raw}'.`);
    return fallback;
  };

  const databaseUrl = env.DATABASE_URL || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    problems.push(`DATABASE_URL must start with postgres:// (leave it unset for the embedded SQLite).`);
  }

  let encryptionKey: Buffer | undefined;
  if (env.POSTWIRE_ENCRYPTION_KEY) {
    encryptionKey = decodeKey(env.POSTWIRE_ENCRYPTION_KEY);
    if (!encryptionKey)
      problems.push('POSTWIRE_ENCRYPTION_KEY must be 32 bytes, as 64 hex digits or base64.');
  }

  const config: Config = {
    port: integer('PORT', 3000, 0, 65535),
    host: env.HOST || '127.0.0.1',
    databaseUrl,
    cacheStampLeaseMs: duration('CACHE_STAMP_LEASE', DEFAULTS.cacheStampLeaseMs, CACHE_STAMP_LEASE_MAX_MS),
    transactionWarnMs: transactionWarn(env, problems),
    dataDir: path.resolve(env.POSTWIRE_DATA_DIR || './data'),
    encryptionKey,
    allowPrivateUrls: boolean('POSTWIRE_ALLOW_PRIVATE_URLS', false),
    bootstrapKey: env.POSTWIRE_BOOTSTRAP_KEY || undefined,
    rateLimit: integer('POSTWIRE_RATE_LIMIT', 6000, 0, 1_000_000_000),
    rateLimitWindowMs: duration('POSTWIRE_RATE_LIMIT_WINDOW', 60_000),
    authFailureLimit: integer('POSTWIRE_AUTH_FAILURE_LIMIT', DEFAULTS.authFailureLimit, 0, 1_000_000_000),
    authFailureWindowMs: duration('POSTWIRE_AUTH_FAILURE_WINDOW', DEFAULTS.authFailureWindowMs),
    logLevel: env.LOG_LEVEL || 'info',
    logFormat: oneOf('LOG_FORMAT', LOG_FORMATS, stdoutIsTTY ? 'pretty' : 'json'),
    webhookTimeoutMs: integer('WEBHOOK_TIMEOUT_MS', DEFAULTS.webhookTimeoutMs, 100, 600_000),
    webhookRetrySchedule: schedule('WEBHOOK_RETRY_SCHEDULE', '0,5s,5m,30m,2h,5h,10h,10h'),
    webhookRetryJitter: fraction('WEBHOOK_RETRY_JITTER', 0.2),
    webhookConcurrency: integer('WEBHOOK_CONCURRENCY', 64, 1, 10_000),
    webhookConcurrencyPerEndpoint: integer('WEBHOOK_CONCURRENCY_PER_ENDPOINT', 4, 1, 1000),
    webhookDisableAfterMs: duration('WEBHOOK_DISABLE_AFTER', 5 * 86_400_000),
    webhookSecretRotationWindowMs: duration(
      'WEBHOOK_SECRET_ROTATION_WINDOW',
      DEFAULTS.webhookSecretRotationWindowMs,
    ),
    workerDeadAfterMs: duration('WORKER_DEAD_AFTER', DEFAULTS.workerDeadAfterMs),
    templateRendering: {
      timeoutMs: duration('TEMPLATE_RENDER_TIMEOUT', DEFAULTS.templateRendering.timeoutMs),
      threads: integer('TEMPLATE_RENDER_THREADS', DEFAULTS.templateRendering.threads, 1, 64),
      queueLimit: integer('TEMPLATE_RENDER_QUEUE', DEFAULTS.templateRendering.queueLimit, 1, 100_000),
    },
    reportParsing: {
      timeoutMs: duration('REPORT_PARSE_TIMEOUT', DEFAULTS.reportParsing.timeoutMs),
      threads: integer('REPORT_PARSE_THREADS', DEFAULTS.reportParsing.threads, 1, 64),
      memoryMb: integer('REPORT_PARSE_MEMORY', DEFAULTS.reportParsing.memoryMb, 16, 4096),
    },
    httpTimeouts: {
      idleMs: duration('HTTP_IDLE_TIMEOUT', DEFAULTS.httpTimeouts.idleMs),
      headersMs: duration('HTTP_HEADERS_TIMEOUT', DEFAULTS.httpTimeouts.headersMs),
      requestMs: duration('HTTP_REQUEST_TIMEOUT', DEFAULTS.httpTimeouts.requestMs),
      keepAliveMs: duration('HTTP_KEEP_ALIVE_TIMEOUT', DEFAULTS.httpTimeouts.keepAliveMs),
    },
    httpBodyMemoryBytes: integer(
      'HTTP_BODY_MEMORY_LIMIT',
      DEFAULTS.httpBodyMemoryBytes,
      0,
      Number.MAX_SAFE_INTEGER,
    ),
    retentionMs: retention(env, problems, duration),
    ...mailConfig(env, problems, { integer, duration, schedule }),
    publicUrl: publicUrl(env, problems),
    engagement: {
      trackOpens: boolean('TRACK_OPENS', DEFAULTS.engagement.trackOpens),
      trackClicks: boolean('TRACK_CLICKS', DEFAULTS.engagement.trackClicks),
      listUnsubscribe: boolean('LIST_UNSUBSCRIBE', DEFAULTS.engagement.listUnsubscribe),
    },
    publicRateLimit: integer('PUBLIC_RATE_LIMIT', DEFAULTS.publicRateLimit, 0, 1_000_000_000),
  };
  for (const [name, on] of [
    ['TRACK_OPENS', config.engagement.trackOpens],
    ['TRACK_CLICKS', config.engagement.trackClicks],
    ['LIST_UNSUBSCRIBE', config.engagement.listUnsubscribe],
  ] as const) {
    if (on && config.publicUrl === undefined) {
      problems.push(`${name}=true needs PUBLIC_URL (the base URL recipients' mail clients reach).`);
    }
  }
  for (const [name, value] of [
    ['HTTP_IDLE_TIMEOUT', config.httpTimeouts.idleMs],
    ['HTTP_HEADERS_TIMEOUT', config.httpTimeouts.headersMs],
    ['HTTP_REQUEST_TIMEOUT', config.httpTimeouts.requestMs],
    ['HTTP_KEEP_ALIVE_TIMEOUT', config.httpTimeouts.keepAliveMs],
  ] as const) {
    if (value < 100 || value > 3_600_000)
      problems.push(`${name} must be from 100ms to 1h, got '${env[name]}'.`);
  }
  if (config.templateRendering.timeoutMs < 10 || config.templateRendering.timeoutMs > 60_000) {
    problems.push(`TEMPLATE_RENDER_TIMEOUT must be from 10ms to 1m, got '${env.TEMPLATE_RENDER_TIMEOUT}'.`);
  }
  if (config.reportParsing.timeoutMs < 10 || config.reportParsing.timeoutMs > 60_000) {
    problems.push(`REPORT_PARSE_TIMEOUT must be from 10ms to 1m, got '${env.REPORT_PARSE_TIMEOUT}'.`);
  }
  if (config.workerDeadAfterMs < 300 || config.workerDeadAfterMs > 3_600_000) {
    problems.push(`WORKER_DEAD_AFTER must be from 300ms to 1h, got '${env.WORKER_DEAD_AFTER}'.`);
  }
  if (config.bootstrapKey !== undefined && config.bootstrapKey.length < 16) {
    problems.push('POSTWIRE_BOOTSTRAP_KEY must be at least 16 characters.');
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

type MailConfig = Pick<
  Config,
  | 'mailTransport'
  | 'smtpUrl'
  | 'sendRetrySchedule'
  | 'sendConcurrency'
  | 'sendConcurrencyPerHost'
  | 'sendDailyLimit'
  | 'sendTimeoutMs'
  | 'mailHostname'
  | 'bounceDomain'
  | 'reportFeedbackLoops'
  | 'dkim'
  | 'smtpDsn'
  | 'inbound'
  | 'dnsServers'
  | 'directMxPort'
  | 'senderDomains'
  | 'inboundMxHost'
  | 'sendingSpf'
  | 'domainRecheckMs'
>;

/** The sending settings: transport, retries, concurrency, the daily limit and DKIM. */
function mailConfig(
  env: Env,
  problems: string[],
  read: {
    integer: (name: string, fallback: number, min: number, max: number) => number;
    duration: (name: string, fallback: number) => number;
    schedule: (name: string, fallback: string) => number[];
  },
): MailConfig {
  const smtpUrl = env.SMTP_URL || undefined;
  if (smtpUrl !== undefined) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(smtpUrl);
    } catch {
      parsed = undefined;
    }
    if (!parsed || !['smtp:', 'smtps:'].includes(parsed.protocol) || !parsed.hostname) {
      // The value may hold a password: the message names the variable, never repeats it.
      problems.push('SMTP_URL must look like smtp://user:pass@host:587 or smtps://user:pass@host:465.');
    }
  }

  let mailTransport: MailTransportKind = smtpUrl ? 'relay' : 'capture';
  const requested = env.MAIL_TRANSPORT?.toLowerCase();
  if (requested) {
    if (requested === 'relay' || requested === 'direct' || requested === 'capture') {
      mailTransport = requested;
    } else {
      problems.push(`MAIL_TRANSPORT must be relay, direct or capture, got '${env.MAIL_TRANSPORT}'.`);
    }
  }
  if (mailTransport === 'relay' && !smtpUrl) {
    problems.push('MAIL_TRANSPORT=relay needs SMTP_URL (smtp://user:pass@host:port).');
  }

  const sendTimeoutMs = read.duration('SEND_TIMEOUT', 120_000);
  if (sendTimeoutMs < 100 || sendTimeoutMs > 3_600_000) {
    problems.push(`SEND_TIMEOUT must be from 100ms to 1h, got '${env.SEND_TIMEOUT}'.`);
  }

  return {
    mailTransport,
    smtpUrl,
    sendRetrySchedule: read.schedule('SEND_RETRY_SCHEDULE', '0,1m,5m,15m,1h,3h,6h,12h,24h,24h'),
    sendConcurrency: read.integer('SEND_CONCURRENCY', 16, 1, 10_000),
    sendConcurrencyPerHost: read.integer('SEND_CONCURRENCY_PER_HOST', 4, 1, 1000),
    sendDailyLimit: read.integer('SEND_DAILY_LIMIT', DEFAULTS.sendDailyLimit, 0, 1_000_000_000),
    sendTimeoutMs,
    mailHostname: env.MAIL_HOSTNAME || undefined,
    bounceDomain: bounceDomain(env, problems),
    reportFeedbackLoops: feedbackLoops(env, problems),
    dkim: dkimConfig(env, problems),
    smtpDsn: smtpDsn(env, problems),
    inbound: {
      host: env.INBOUND_SMTP_HOST || DEFAULTS.inbound.host,
      port: read.integer('INBOUND_SMTP_PORT', DEFAULTS.inbound.port, 0, 65535),
      maxBytes: read.integer('INBOUND_MAX_BYTES', DEFAULTS.inbound.maxBytes, 1024, 1024 * 1024 * 1024),
      sessionTimeoutMs: inboundSessionTimeout(env, problems, read.duration),
      maxConnectionsPerClient: read.integer(
        'INBOUND_MAX_CONNECTIONS_PER_CLIENT',
        DEFAULTS.inbound.maxConnectionsPerClient,
        1,
        INBOUND_MAX_CONNECTIONS,
      ),
      tls: inboundTls(env, problems),
    },
    ...domainsConfig(env, problems, mailTransport, read),
  };
}

/** Sending domains: where their DNS is looked up, which From domains are allowed, their return-path records. */
function domainsConfig(
  env: Env,
  problems: string[],
  mailTransport: MailTransportKind,
  read: {
    integer: (name: string, fallback: number, min: number, max: number) => number;
    duration: (name: string, fallback: number) => number;
  },
): Pick<
  Config,
  'dnsServers' | 'directMxPort' | 'senderDomains' | 'inboundMxHost' | 'sendingSpf' | 'domainRecheckMs'
> {
  const dnsServers: string[] = [];
  for (const entry of (env.DNS_SERVERS ?? '').split(',')) {
    if (entry.trim() === '') continue;
    const server = parseDnsServer(entry);
    if (server) dnsServers.push(server);
    else
      problems.push(`DNS_SERVERS must be comma-separated ip or ip:port ([v6]:port), got '${entry.trim()}'.`);
  }
  // Direct delivery is the one mode where any From domain would be sent unauthenticated to the world's
  // servers as if it were ours; through a relay or into capture the relay (or nobody) decides.
  let senderDomains: SenderDomainsPolicy = mailTransport === 'direct' ? 'verified' : 'any';
  const requested = env.SENDER_DOMAINS?.toLowerCase();
  if (requested) {
    if (requested === 'verified' || requested === 'any') senderDomains = requested;
    else problems.push(`SENDER_DOMAINS must be verified or any, got '${env.SENDER_DOMAINS}'.`);
  }
  const inboundMxHost = env.INBOUND_MX_HOST?.toLowerCase().replace(/\.$/, '') || undefined;
  if (inboundMxHost !== undefined && !DOMAIN_NAME.test(inboundMxHost)) {
    problems.push(`INBOUND_MX_HOST must be a host name such as mx.example.com, got '${inboundMxHost}'.`);
  }
  const sendingSpf = env.SENDING_SPF?.trim() || undefined;
  if (sendingSpf !== undefined && !/^v=spf1( [\x21-\x7e]+)*$/i.test(sendingSpf)) {
    problems.push(
      `SENDING_SPF must be an SPF record such as 'v=spf1 ip4:192.0.2.1 -all', got '${sendingSpf}'.`,
    );
  }
  const domainRecheckMs = read.duration('DOMAIN_RECHECK', DEFAULTS.domainRecheckMs);
  if (domainRecheckMs < 1000 || domainRecheckMs > 30 * 86_400_000) {
    problems.push(`DOMAIN_RECHECK must be from 1s to 30d, got '${env.DOMAIN_RECHECK}'.`);
  }
  return {
    dnsServers,
    directMxPort: read.integer('DIRECT_MX_PORT', 25, 1, 65535),
    senderDomains,
    inboundMxHost,
    sendingSpf,
    domainRecheckMs,
  };
}

function retention(
  env: Env,
  problems: string[],
  duration: (name: string, fallback: number) => number,
): number | undefined {
  if (env.RETENTION?.trim().toLowerCase() === 'off') return undefined;
  const ms = duration('RETENTION', DEFAULTS.retentionMs);
  if (ms < 3_600_000) {
    problems.push(
      `RETENTION must be a duration of at least 1h (such as 30d), or off, got '${env.RETENTION}'.`,
    );
  }
  return ms;
}

function smtpDsn(env: Env, problems: string[]): DsnNotify[] {
  const raw = env.SMTP_DSN?.trim().toLowerCase();
  if (!raw) return [...DEFAULTS.smtpDsn];
  if (raw === 'off') return [];
  const words = raw.split(',').map((word) => word.trim());
  const known = new Set<string>(['success', 'failure', 'delay']);
  if (words.some((word) => !known.has(word))) {
    problems.push(`SMTP_DSN must be off or a list of success, failure and delay, got '${env.SMTP_DSN}'.`);
    return [...DEFAULTS.smtpDsn];
  }
  return [...new Set(words)] as DsnNotify[];
}

/** A PEM setting: the text itself (line breaks may come as \n escapes) or the path of a PEM file. */
function pemSetting(env: Env, name: string, problems: string[]): string | undefined {
  const value = env[name];
  if (!value) return undefined;
  if (value.includes('-----BEGIN')) return value.replace(/\\n/g, '\n');
  try {
    return readFileSync(value, 'utf8');
  } catch {
    problems.push(`${name} is neither a PEM key nor a readable file ('${value}').`);
    return undefined;
  }
}

function inboundSessionTimeout(
  env: Env,
  problems: string[],
  duration: (name: string, fallback: number) => number,
): number {
  const ms = duration('INBOUND_SESSION_TIMEOUT', DEFAULTS.inbound.sessionTimeoutMs);
  if (ms < 1000 || ms > 3_600_000) {
    problems.push(`INBOUND_SESSION_TIMEOUT must be from 1s to 1h, got '${env.INBOUND_SESSION_TIMEOUT}'.`);
    return DEFAULTS.inbound.sessionTimeoutMs;
  }
  return ms;
}

function inboundTls(env: Env, problems: string[]): InboundConfig['tls'] {
  const cert = pemSetting(env, 'INBOUND_TLS_CERT', problems);
  const key = pemSetting(env, 'INBOUND_TLS_KEY', problems);
  if ((cert === undefined) !== (key === undefined)) {
    problems.push('STARTTLS on the inbound listener needs both INBOUND_TLS_CERT and INBOUND_TLS_KEY.');
    return undefined;
  }
  if (cert === undefined || key === undefined) return undefined;
  try {
    createPrivateKey(key);
  } catch {
    problems.push('INBOUND_TLS_KEY does not hold a valid PEM private key.');
    return undefined;
  }
  return { cert, key };
}

/** PUBLIC_URL: an absolute http(s) URL without query or fragment; kept without its trailing slash. */
function publicUrl(env: Env, problems: string[]): string | undefined {
  const raw = env.PUBLIC_URL || undefined;
  if (raw === undefined) return undefined;
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    url = undefined;
  }
  if (!url || !['http:', 'https:'].includes(url.protocol) || url.search || url.hash || url.username) {
    problems.push(`PUBLIC_URL must be an http(s) URL such as https://mail.acme.example, got '${raw}'.`);
    return undefined;
  }
  return url.href.replace(/\/+$/, '');
}

const DOMAIN_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/i;

function bounceDomain(env: Env, problems: string[]): string | undefined {
  const domain = env.BOUNCE_DOMAIN || undefined;
  if (domain !== undefined && !DOMAIN_NAME.test(domain)) {
    problems.push(`BOUNCE_DOMAIN must be a domain name such as bounces.example.com, got '${domain}'.`);
  }
  return domain?.toLowerCase();
}

/** REPORT_FEEDBACK_LOOPS: `reporter=domain|domain,reporter=domain`; empty when unset. */
function feedbackLoops(env: Env, problems: string[]): Map<string, string[]> {
  const loops = new Map<string, string[]>();
  for (const entry of (env.REPORT_FEEDBACK_LOOPS ?? '').split(',')) {
    if (entry.trim() === '') continue;
    const [reporter = '', covered = ''] = entry.split('=').map((part) => part.trim().toLowerCase());
    const domains = covered.split('|').map((domain) => domain.trim());
    if (!DOMAIN_NAME.test(reporter) || domains.some((domain) => !DOMAIN_NAME.test(domain))) {
      problems.push(
        `REPORT_FEEDBACK_LOOPS takes reporter=domain|domain entries separated by commas (fbl.example.net=example.net|example.org), got '${entry.trim()}'.`,
      );
      continue;
    }
    loops.set(reporter, [...(loops.get(reporter) ?? []), ...domains]);
  }
  return loops;
}

function dkimConfig(env: Env, problems: string[]): DkimConfig | undefined {
  const domain = env.DKIM_DOMAIN || undefined;
  const selector = env.DKIM_SELECTOR || undefined;
  const key = env.DKIM_PRIVATE_KEY || undefined;
  if (!domain && !selector && !key) return undefined;
  if (!domain || !selector || !key) {
    problems.push('DKIM signing needs all of DKIM_DOMAIN, DKIM_SELECTOR and DKIM_PRIVATE_KEY.');
    return undefined;
  }
  if (!/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/i.test(domain)) {
    problems.push(`DKIM_DOMAIN must be a domain name such as example.com, got '${domain}'.`);
  }
  if (!/^[a-z0-9]([a-z0-9_-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9_-]*[a-z0-9])?)*$/i.test(selector)) {
    problems.push(`DKIM_SELECTOR must be a DNS label such as mail2026, got '${selector}'.`);
  }
  const pem = pemSetting(env, 'DKIM_PRIVATE_KEY', problems);
  if (pem === undefined) return undefined;
  try {
    createPrivateKey(pem);
  } catch {
    // Never echo key material into a log line.
    problems.push('DKIM_PRIVATE_KEY does not hold a valid PEM private key.');
    return undefined;
  }
  return { domain: domain.toLowerCase(), selector, privateKey: pem };
}

function decodeKey(text: string): Buffer | undefined {
  const bytes = /^[0-9a-fA-F]{64}$/.test(text) ? Buffer.from(text, 'hex') : Buffer.from(text, 'base64');
  return bytes.length === 32 ? bytes : undefined;
}
