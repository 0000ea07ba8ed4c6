// Every setting, once: its environment name, default, reading rule and meaning (CONFIG_SCHEMA). The
// configuration the code receives (Config), the reference (docs/configuration.md, `npm run config:generate`)
// and the CLI's usage are all produced from it.
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { parseDnsServer } from './lib/dns.ts';
import { parseDuration } from './lib/duration.ts';
import { parseSpamdUrl } from './lib/spamd-url.ts';
import {
  boolean,
  custom,
  duration,
  type Env,
  fixed,
  fraction,
  integer,
  rawValue,
  type ReadContext,
  readDuration,
  readSchema,
  schedule,
  section,
  type Setting,
  text,
  type ValuesOf,
} from './lib/settings.ts';

/**
 * How often an idle worker looks for due jobs when no wake-up comes (another process on SQLite, a lost
 * LISTEN connection): the longest a job can wait for a worker that was not told about it.
 */
export const WORKER_POLL_INTERVAL_MS = 1000;

/**
 * Connections the inbound SMTP listener holds at once, from all clients together: far above what reports
 * need, far below the process's file limit.
 */
export const INBOUND_MAX_CONNECTIONS = 5000;

/** Connections the SMTP submission server holds at once (each port), from all clients together: applications, a handful each. */
export const SUBMISSION_MAX_CONNECTIONS = 500;

export const LOG_FORMATS = ['json', 'pretty'] as const;
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * Which proxies' `X-Forwarded-For` names the client: none (`false`), the nearest N hops, or the proxies at
 * these addresses and networks. Fastify's `trustProxy` takes each form as it is.
 */
export type TrustProxy = false | number | string[];
export type LogFormat = (typeof LOG_FORMATS)[number];

/** The outcomes a DSN request asks to hear about (`NOTIFY=SUCCESS,FAILURE,DELAY`). */
export type DsnNotify = 'success' | 'failure' | 'delay';
const DSN_NOTIFY: readonly DsnNotify[] = ['success', 'failure', 'delay'];

export type SenderDomainsPolicy = 'verified' | 'any';
export type MailTransportKind = 'relay' | 'direct' | 'capture';

export interface DkimConfig {
  domain: string;
  selector: string;
  /** The private key as PEM. */
  privateKey: string;
}

/** Given here rather than inline: the reference shows them inside other settings' text. */
const RETENTION_DEFAULT = '30d';
const SEND_RETRY_JITTER = 0.2;
/** TRANSACTION_WARN's default outside production: a transaction open a second holds up every other on SQLite. */
const TRANSACTION_WARN_MS = 1000;
/**
 * Small batches, so no statement holds the write lock long beside sends and deliveries; a pause after each,
 * so that pruning takes at most `dutyCycle` of the time (on SQLite a DELETE holds the event loop while it
 * runs). Measured with bench/retention.ts: deliveries keep about 0.8 of their rate while the pruner runs.
 */
const RETENTION_PRUNING = { batchSize: 200, intervalMs: 60_000, dutyCycle: 0.1 };

const DOMAIN_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/i;

/** The transport MAIL_TRANSPORT names, else the one SMTP_URL implies; what SENDER_DOMAINS's default follows. */
function requestedTransport(env: Env): MailTransportKind {
  const requested = env.MAIL_TRANSPORT?.toLowerCase();
  if (requested === 'relay' || requested === 'direct' || requested === 'capture') return requested;
  return env.SMTP_URL ? 'relay' : 'capture';
}

export const CONFIG_SCHEMA = {
  ...section('HTTP server', {
    port: integer('PORT', { default: 3000, min: 0, max: 65535, description: 'HTTP port' }),
    host: text('HOST', {
      default: '127.0.0.1',
      description: 'address to listen on (`0.0.0.0` in a container)',
    }),
    httpTimeouts: {
      idleMs: duration('HTTP_IDLE_TIMEOUT', {
        default: '60s',
        min: '100ms',
        max: '1h',
        description: 'a connection that sends and receives nothing this long is closed',
      }),
      headersMs: duration('HTTP_HEADERS_TIMEOUT', {
        default: '10s',
        min: '100ms',
        max: '1h',
        description:
          "a request's headers must all arrive within this; past it, a 408 and the connection closed",
        details:
          'Node looks for late requests every tenth of the shorter of this and `HTTP_REQUEST_TIMEOUT` (1 s by ' +
          'default), so a connection is closed at most 10 % late',
      }),
      requestMs: duration('HTTP_REQUEST_TIMEOUT', {
        default: '60s',
        min: '100ms',
        max: '1h',
        description: 'a whole request, body included, must arrive within this',
        details: 'a body over 1 MiB is read and dropped until then, so the client gets its 413',
      }),
      keepAliveMs: duration('HTTP_KEEP_ALIVE_TIMEOUT', {
        default: '5s',
        min: '100ms',
        max: '1h',
        description: 'an idle kept-alive connection is closed after this',
      }),
    },
    httpBodyMemoryBytes: integer('HTTP_BODY_MEMORY_LIMIT', {
      default: 64 * 1024 * 1024,
      shownDefault: '`67108864` (64 MiB)',
      min: 0,
      max: Number.MAX_SAFE_INTEGER,
      description:
        'bytes of request bodies held in memory at once; past it, 429 `server_busy`; `0`: no limit',
      details:
        'a body that does not fit beside those being handled gets a 429 with `retry-after: 1` before it is read ' +
        '(a chunked one once it stops fitting), and stores nothing. A body alone always passes (up to its ' +
        "route's limit), so large sends are queued by their clients, never refused for good. Each body costs " +
        'four to five times its size while it is read, parsed, decoded and stored: 64 MiB is one of the ' +
        'largest sends (56 MiB) at a time, with room for small requests beside it (bench/body-memory.ts)',
    }),
    smtpBodyMemoryBytes: integer('SMTP_BODY_MEMORY_LIMIT', {
      default: 128 * 1024 * 1024,
      shownDefault: '`134217728` (128 MiB)',
      min: 0,
      max: Number.MAX_SAFE_INTEGER,
      description:
        'bytes of messages the SMTP listeners (submission and inbound) hold in memory at once; past it, 452; `0`: no limit',
      details:
        'a message is held from its first byte until its reply is sent; one that does not fit beside those being ' +
        'received is read to its end and answered `452 4.3.1`, so its client tries again later, and nothing of it ' +
        'is stored. A message alone always passes (up to `SUBMISSION_MAX_BYTES` or `INBOUND_MAX_BYTES`). 128 MiB is ' +
        'three of the largest submissions at a time',
    }),
    rateLimit: integer('POSTWIRE_RATE_LIMIT', {
      default: 6000,
      min: 0,
      max: 1_000_000_000,
      description: 'requests per key per window; `0` turns the limiter off',
    }),
    rateLimitWindowMs: duration('POSTWIRE_RATE_LIMIT_WINDOW', {
      default: '1m',
      description: 'the window of that limit (`500ms`, `30s`, `1m`, `1h`)',
    }),
    authFailureLimit: integer('POSTWIRE_AUTH_FAILURE_LIMIT', {
      default: 20,
      min: 0,
      max: 1_000_000_000,
      description: 'failed authentications per client address per window; `0` turns the limit off',
      details:
        'past it the address gets 429 (with `retry-after`) without its key being checked, until the window ' +
        "ends. Behind a reverse proxy every client shares the proxy's address unless TRUST_PROXY names it",
    }),
    authFailureWindowMs: duration('POSTWIRE_AUTH_FAILURE_WINDOW', {
      default: '1m',
      description: 'the window of that limit',
    }),
    templateRendering: {
      timeoutMs: duration('TEMPLATE_RENDER_TIMEOUT', {
        default: '250ms',
        min: '10ms',
        max: '1m',
        description:
          'a template render that has used this much CPU time is stopped: 422 `template_render_timeout`',
        details:
          'a preview, or a send with a template; its thread is ended. CPU time, so that a busy machine does ' +
          'not refuse small templates; in wall time a render is stopped at 4 times this at most',
      }),
      threads: integer('TEMPLATE_RENDER_THREADS', {
        // One core left to the event loop that answers requests.
        default: Math.max(1, availableParallelism() - 1),
        shownDefault: 'cores − 1 (at least 1)',
        min: 1,
        max: 64,
        description: 'worker threads that render templates, off the event loop that answers requests',
      }),
      queueLimit: integer('TEMPLATE_RENDER_QUEUE', {
        default: 64,
        min: 1,
        max: 100_000,
        description:
          'renders waiting for a thread at most; past it, 429 `render_queue_full` with `retry-after`',
      }),
    },
    publicRateLimit: integer('PUBLIC_RATE_LIMIT', {
      default: 1200,
      min: 0,
      max: 1_000_000_000,
      description: 'requests per client address per minute on the public tracking and unsubscribe routes',
      details:
        "429 with `retry-after` beyond; `0` turns it off. Behind a reverse proxy every client shares the proxy's " +
        'address unless TRUST_PROXY names it',
    }),
    trustProxy: custom('TRUST_PROXY', {
      default: '`off`',
      description:
        'whose `X-Forwarded-For` names the client: `off`, a hop count (`1`: the nearest proxy), or addresses and CIDR networks, comma-separated',
      details:
        'the rate limits by address (failed authentications, the public routes) count the client this gives. ' +
        'Off, every request counts against the address that connected (behind a proxy, the proxy). Name only ' +
        'proxies you run: a client that could reach the port directly would otherwise choose its own address. ' +
        'A hop count trusts whoever connects, so use one only where the proxy is the only way to the port',
      read: readTrustProxy,
    }),
    publicRateLimitWindowMs: fixed(60_000, 'the window of PUBLIC_RATE_LIMIT: a minute'),
  }),

  ...section('Storage and keys', {
    databaseUrl: custom('DATABASE_URL', {
      default: 'unset',
      description: '`postgres://…` selects PostgreSQL; unset: SQLite in `POSTWIRE_DATA_DIR/postwire.db`',
      read(context) {
        const url = rawValue(context, 'DATABASE_URL');
        if (url && !/^postgres(ql)?:\/\//.test(url)) {
          context.problems.push(
            `DATABASE_URL must start with postgres:// (leave it unset for the embedded SQLite).`,
          );
        }
        return url;
      },
    }),
    cacheStampLeaseMs: duration('CACHE_STAMP_LEASE', {
      default: '10ms',
      // Every answer after a write to the in-memory reads' tables waits the lease: longer would stall writes.
      max: '1s',
      description: 'PostgreSQL: how long a stamp read vouches for the in-memory reads; at most `1s`',
      details:
        "the in-memory reads are keys, webhooks, templates and sending domains. A process's answers after a " +
        "write of its own to those tables wait as long, so another process's older reads have run out before " +
        'the client hears of the write. The same in every process sharing the database; `0` reads the stamps ' +
        'on every use and never waits',
    }),
    transactionWarnMs: custom('TRANSACTION_WARN', {
      default: '`1s`, off when `NODE_ENV=production`',
      description: 'a transaction open longer than this logs the stack that opened it; `off` turns it off',
      details:
        'while a transaction is open on SQLite, every other query of the process waits for it (src/db/' +
        'transaction-watch.ts); a stack per slow transaction helps whoever develops or tests',
      read(context): number | undefined {
        const raw = rawValue(context, 'TRANSACTION_WARN')?.trim().toLowerCase();
        if (raw === undefined) return context.env.NODE_ENV === 'production' ? undefined : TRANSACTION_WARN_MS;
        if (raw === 'off') return undefined;
        const value = parseDuration(raw);
        if (value !== undefined && value >= 1) return value;
        context.problems.push(
          `TRANSACTION_WARN must be a duration such as 500ms or 2s, or off, got '${context.env.TRANSACTION_WARN}'.`,
        );
        return TRANSACTION_WARN_MS;
      },
    }),
    dataDir: custom('POSTWIRE_DATA_DIR', {
      default: '`./data`',
      description: 'where the SQLite file and the generated encryption key live',
      read: (context) => path.resolve(rawValue(context, 'POSTWIRE_DATA_DIR') ?? './data'),
    }),
    encryptionKey: custom('POSTWIRE_ENCRYPTION_KEY', {
      default: 'generated',
      description: '32 bytes (64 hex digits or base64) sealing webhook secrets and domain keys (AES-256-GCM)',
      details:
        'when unset, one is generated once into `POSTWIRE_DATA_DIR/encryption.key` (mode 0600). Every process ' +
        'sharing a PostgreSQL must use the same key',
      read(context): Buffer | undefined {
        const raw = rawValue(context, 'POSTWIRE_ENCRYPTION_KEY');
        if (raw === undefined) return undefined;
        const key = decodeKey(raw);
        if (!key)
          context.problems.push('POSTWIRE_ENCRYPTION_KEY must be 32 bytes, as 64 hex digits or base64.');
        return key;
      },
    }),
    bootstrapKey: custom('POSTWIRE_BOOTSTRAP_KEY', {
      default: 'unset',
      description: 'an API key the default project must have at start (idempotent); never printed',
      details: 'for containers and tests',
      read(context) {
        const key = rawValue(context, 'POSTWIRE_BOOTSTRAP_KEY');
        if (key !== undefined && key.length < 16) {
          context.problems.push('POSTWIRE_BOOTSTRAP_KEY must be at least 16 characters.');
        }
        return key;
      },
    }),
    retentionPruning: fixed(
      RETENTION_PRUNING,
      'rows per DELETE, how often the workers prune, and the share of the time their pruning may take',
    ),
    retentionMs: custom('RETENTION', {
      default: `\`${RETENTION_DEFAULT}\``,
      description:
        'events, attempts, stored MIME, tracking rows and received reports older than this are deleted',
      details:
        `by the workers, ${RETENTION_PRUNING.batchSize} rows per statement for at most ` +
        `${RETENTION_PRUNING.dutyCycle * 100} % of the time, so sends and deliveries never wait long; emails, ` +
        'recipients, suppressions, templates and the daily numbers are kept. At least `1h`; `off` keeps ' +
        'everything. `postwire prune --dry-run` says what would go now',
      read(context): number | undefined {
        if (context.env.RETENTION?.trim().toLowerCase() === 'off') return undefined;
        const ms = readDuration(context, 'RETENTION') ?? parseDuration(RETENTION_DEFAULT)!;
        if (ms < 3_600_000) {
          context.problems.push(
            `RETENTION must be a duration of at least 1h (such as 30d), or off, got '${context.env.RETENTION}'.`,
          );
        }
        return ms;
      },
    }),
  }),

  ...section('Logging', {
    logLevel: custom('LOG_LEVEL', {
      default: '`info`',
      description: `${LOG_LEVELS.map((level) => `\`${level}\``).join(', ')}`,
      details:
        '`info` logs one line per API request (method, route, status, time, request id); requests for the ' +
        "dashboard's and the API reference's files only at `debug`",
      read(context): LogLevel {
        const raw = rawValue(context, 'LOG_LEVEL')?.toLowerCase();
        if (raw === undefined) return 'info';
        if ((LOG_LEVELS as readonly string[]).includes(raw)) return raw as LogLevel;
        context.problems.push(
          `LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got '${context.env.LOG_LEVEL}'.`,
        );
        return 'info';
      },
    }),
    logFormat: custom('LOG_FORMAT', {
      default: '`pretty` on a terminal, else `json`',
      description: '`pretty`: readable, coloured lines (pino-pretty); `json`: one JSON object per line',
      // Pretty for a person at a terminal, JSON for everything that collects logs (a pipe, a file, a container).
      read(context): LogFormat {
        const fallback = context.stdoutIsTTY ? 'pretty' : 'json';
        const raw = rawValue(context, 'LOG_FORMAT');
        if (raw === undefined) return fallback;
        if ((LOG_FORMATS as readonly string[]).includes(raw)) return raw as LogFormat;
        context.problems.push(`LOG_FORMAT must be one of ${LOG_FORMATS.join(', ')}, got '${raw}'.`);
        return fallback;
      },
    }),
  }),

  ...section('Health and metrics', {
    metricsToken: custom('METRICS_TOKEN', {
      default: 'unset (`/metrics` off)',
      description:
        'turns `GET /metrics` on: Prometheus scrapes it with `Authorization: Bearer <METRICS_TOKEN>`',
      details:
        'at least 16 characters, and not an API key: it reads counts of the whole instance, every project. ' +
        'Unset, `/metrics` answers 404; a wrong or missing token, 401. `/healthz` and `/readyz` need no token',
      read(context) {
        const token = rawValue(context, 'METRICS_TOKEN');
        if (token !== undefined && token.length < 16) {
          context.problems.push('METRICS_TOKEN must be at least 16 characters.');
        }
        return token;
      },
    }),
    workerHttpPort: optionalPort('WORKER_HTTP_PORT', {
      default: 'unset (none)',
      description:
        '`postwire worker`: the port (on HOST) of its own `/healthz`, `/readyz` and `/metrics`; `0` picks a free one',
      details:
        "a worker's counters (sent, delivered, bounced, webhook attempts, reports read) are its own: Prometheus " +
        'scrapes every process, the API processes on PORT and each worker here. It serves nothing of the API',
    }),
    readinessTimeoutMs: duration('READINESS_TIMEOUT', {
      default: '2s',
      min: '50ms',
      max: '1m',
      description: "`/readyz`'s database check fails when its query has not answered within this",
      details:
        'a database that answers slower than this is as good as down for the API; keep it below the ' +
        "probe's own timeout (Kubernetes' `timeoutSeconds`, the container's HEALTHCHECK `--timeout`)",
    }),
    metricsQueueDepthLimit: fixed(
      100_000,
      'queue depths are counted up to this many rows per queue, so a scrape costs the same however deep a backlog',
    ),
    metricsLatencyBuckets: fixed(
      [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      "the request latency histogram's buckets, in seconds: from a cached read (about a millisecond) to a slow send",
    ),
  }),

  ...section('Workers', {
    workerDeadAfterMs: duration('WORKER_DEAD_AFTER', {
      default: '15s',
      min: '300ms',
      max: '1h',
      description: 'a worker silent this long is dead: the others give its leased jobs back',
      details:
        'workers heartbeat three times per this period; a worker silent for two thirds of it is dead, and the ' +
        'others give its leased mail and deliveries back at once (not when its leases run out)',
    }),
  }),

  ...section('Webhooks', {
    allowPrivateUrls: boolean('POSTWIRE_ALLOW_PRIVATE_URLS', {
      default: false,
      description: 'allow `http://` webhook URLs and loopback, private and link-local targets (development)',
    }),
    webhookTimeoutMs: integer('WEBHOOK_TIMEOUT_MS', {
      default: 15_000,
      min: 100,
      max: 600_000,
      description: 'a delivery attempt must answer 2xx within this many ms (connect and response)',
    }),
    webhookTestMarginMs: fixed(
      5000,
      'POST /v1/webhooks/{id}/test waits the attempt timeout plus this: time for a worker to claim it',
    ),
    webhookRetrySchedule: schedule('WEBHOOK_RETRY_SCHEDULE', {
      default: '0,5s,5m,30m,2h,5h,10h,10h',
      description:
        'delay before each attempt (the first is immediate); after the last, the delivery is `failed`',
    }),
    webhookRetryJitter: fraction('WEBHOOK_RETRY_JITTER', {
      default: 0.2,
      description:
        'each retry delay moves by up to ± this fraction, so retries of many deliveries spread out',
    }),
    webhookConcurrency: integer('WEBHOOK_CONCURRENCY', {
      default: 64,
      min: 1,
      max: 10_000,
      description: 'delivery attempts in flight per worker process',
    }),
    webhookConcurrencyPerEndpoint: integer('WEBHOOK_CONCURRENCY_PER_ENDPOINT', {
      default: 4,
      min: 1,
      max: 1000,
      description: 'attempts in flight to one webhook per worker process',
    }),
    webhookDisableAfterMs: duration('WEBHOOK_DISABLE_AFTER', {
      default: '5d',
      description: 'a webhook whose deliveries have all failed for this long is disabled (`disabled_reason`)',
    }),
    webhookSecretRotationWindowMs: duration('WEBHOOK_SECRET_ROTATION_WINDOW', {
      default: '24h',
      description: 'after a secret changes, deliveries are signed with the new and the old secret this long',
    }),
  }),

  ...section('Sending', {
    smtpUrl: custom('SMTP_URL', {
      default: 'unset',
      description: 'relay all mail through this SMTP server, over pooled connections',
      details:
        '`smtp://user:pass@host:587` (STARTTLS when offered) or `smtps://user:pass@host:465`; any provider',
      read(context) {
        const url = rawValue(context, 'SMTP_URL');
        if (url === undefined) return undefined;
        let parsed: URL | undefined;
        try {
          parsed = new URL(url);
        } catch {
          parsed = undefined;
        }
        if (!parsed || !['smtp:', 'smtps:'].includes(parsed.protocol) || !parsed.hostname) {
          // The value may hold a password: the message names the variable, never repeats it.
          context.problems.push(
            'SMTP_URL must look like smtp://user:pass@host:587 or smtps://user:pass@host:465.',
          );
        }
        return url;
      },
    }),
    mailTransport: custom('MAIL_TRANSPORT', {
      default: '`relay` with `SMTP_URL`, else `capture`',
      description: 'how mail leaves: `relay` through `SMTP_URL`, `direct` to each MX, or `capture` (kept)',
      details:
        "`direct` delivers to each recipient domain's MX with opportunistic STARTTLS (it needs outbound port " +
        '25 and a sending IP with reverse DNS); `capture` keeps messages in the database, and nothing leaves ' +
        'the machine',
      read(context): MailTransportKind {
        const requested = context.env.MAIL_TRANSPORT?.toLowerCase();
        if (requested && requestedTransport(context.env) !== requested) {
          context.problems.push(
            `MAIL_TRANSPORT must be relay, direct or capture, got '${context.env.MAIL_TRANSPORT}'.`,
          );
        }
        return requestedTransport(context.env);
      },
    }),
    sendRetrySchedule: schedule('SEND_RETRY_SCHEDULE', {
      default: '0,1m,5m,15m,1h,3h,6h,12h,24h,24h',
      description:
        'delay before each attempt of a recipient after a 4xx or no connection; after the last, `email.failed`',
      details: `each delay moves by up to ± ${SEND_RETRY_JITTER * 100} %, so retries of many recipients spread out`,
    }),
    sendRetryJitter: fixed(SEND_RETRY_JITTER, 'each send retry delay moves by up to ± this fraction'),
    sendConcurrency: integer('SEND_CONCURRENCY', {
      default: 16,
      min: 1,
      max: 10_000,
      description:
        'SMTP transactions in flight per worker process (relay mode: pooled connections to the relay)',
    }),
    sendConcurrencyPerHost: integer('SEND_CONCURRENCY_PER_HOST', {
      default: 4,
      min: 1,
      max: 1000,
      description: 'SMTP transactions in flight per recipient domain per worker process (direct mode)',
    }),
    sendTimeoutMs: duration('SEND_TIMEOUT', {
      default: '2m',
      min: '100ms',
      max: '1h',
      description: 'one SMTP attempt (connect to the final reply) must finish within this',
      details: 'leases last 2 × this + 2 s',
    }),
    sendDailyLimit: integer('SEND_DAILY_LIMIT', {
      default: 10_000,
      min: 0,
      max: 1_000_000_000,
      description:
        'recipients a project may send to per UTC day (429 `daily_send_limit` beyond); `0`: no limit',
    }),
    sendGroups: fixed(
      { maxEmails: 100 } as { maxEmails: number } | false,
      'sends arriving while a group of them is written wait and are written together, up to this many ' +
        '(src/modules/emails/send-groups.ts); false: each on its own',
    ),
    mailHostname: text('MAIL_HOSTNAME', {
      shownDefault: "the machine's name",
      description: 'the name this service gives in EHLO',
    }),
    smtpDsn: custom('SMTP_DSN', {
      default: '`success,failure,delay`',
      description: 'what the next hop is asked to report when it offers DSN; `off` asks nothing',
      details: 'RFC 3461 `NOTIFY`, with `RET=HDRS`, `ENVID` = the email id, and `ORCPT`',
      read(context): DsnNotify[] {
        const raw = context.env.SMTP_DSN?.trim().toLowerCase();
        if (!raw) return [...DSN_NOTIFY];
        if (raw === 'off') return [];
        const words = raw.split(',').map((word) => word.trim());
        if (words.some((word) => !(DSN_NOTIFY as readonly string[]).includes(word))) {
          context.problems.push(
            `SMTP_DSN must be off or a list of success, failure and delay, got '${context.env.SMTP_DSN}'.`,
          );
          return [...DSN_NOTIFY];
        }
        return [...new Set(words)] as DsnNotify[];
      },
    }),
    dkim: custom(['DKIM_DOMAIN', 'DKIM_SELECTOR', 'DKIM_PRIVATE_KEY'], {
      default: 'unset',
      description: 'all three sign every message (`d=`, `s=`, and the key)',
      details:
        'the key as PEM (`\\n` escapes allowed) or the path of a PEM file. Publish the public key at ' +
        '`<selector>._domainkey.<domain>`. Mail from a verified sending domain is signed with its own key',
      read: dkimConfig,
    }),
    dnsServers: custom('DNS_SERVERS', {
      default: "the system's",
      description:
        "the DNS servers for direct mode's lookups and domain verification: `ip` or `ip:port`, comma-separated",
      details: 'IPv6 as `[v6]:port`',
      read(context) {
        const servers: string[] = [];
        for (const entry of (context.env.DNS_SERVERS ?? '').split(',')) {
          if (entry.trim() === '') continue;
          const server = parseDnsServer(entry);
          if (server) servers.push(server);
          else {
            context.problems.push(
              `DNS_SERVERS must be comma-separated ip or ip:port ([v6]:port), got '${entry.trim()}'.`,
            );
          }
        }
        return servers;
      },
    }),
    directMxPort: integer('DIRECT_MX_PORT', {
      default: 25,
      min: 1,
      max: 65535,
      description: 'the port direct mode connects to on each mail server: 25, except in a test network',
      details: 'DNS has no port for MX',
    }),
  }),

  ...section('Sending domains', {
    senderDomains: custom('SENDER_DOMAINS', {
      default: '`verified` in direct mode, else `any`',
      description: 'which From domains a project may send as: `verified` (its verified domains) or `any`',
      details:
        '`verified`: a From domain must be a verified sending domain of the project (or a subdomain of one), ' +
        'else 422; `any`: other From domains are signed with the `DKIM_*` key and are not DMARC-aligned. A ' +
        'domain another project has verified is refused either way',
      read(context): SenderDomainsPolicy {
        const requested = context.env.SENDER_DOMAINS?.toLowerCase();
        if (requested === 'verified' || requested === 'any') return requested;
        if (requested) {
          context.problems.push(
            `SENDER_DOMAINS must be verified or any, got '${context.env.SENDER_DOMAINS}'.`,
          );
        }
        // Direct delivery is the one mode where any From domain would be sent unauthenticated to the world's
        // servers as if it were ours; through a relay or into capture the relay (or nobody) decides.
        return requestedTransport(context.env) === 'direct' ? 'verified' : 'any';
      },
    }),
    testDomainsWithoutDns: custom('TEST_DOMAINS_WITHOUT_DNS', {
      default: '`true` in capture mode without `DNS_SERVERS`, else `false`',
      description:
        'whether domains under the reserved test names `.test`, `.example` and `.localhost` verify without DNS',
      details:
        'so sending and receiving can be tried on one machine (docs/api/receiving.md). Capture mode only: ' +
        'no one can register those names, so a server whose mail leaves never takes them as verified',
      read(context): boolean {
        const requested = context.env.TEST_DOMAINS_WITHOUT_DNS?.toLowerCase();
        const capture = requestedTransport(context.env) === 'capture';
        if (requested === 'true' && !capture) {
          context.problems.push('TEST_DOMAINS_WITHOUT_DNS=true needs capture mode (MAIL_TRANSPORT=capture).');
        } else if (requested !== undefined && requested !== 'true' && requested !== 'false') {
          context.problems.push(
            `TEST_DOMAINS_WITHOUT_DNS must be true or false, got '${context.env.TEST_DOMAINS_WITHOUT_DNS}'.`,
          );
        }
        if (requested === 'true' || requested === 'false') return requested === 'true' && capture;
        // Whoever points DNS_SERVERS somewhere wants its answers, test names included.
        return capture && !context.env.DNS_SERVERS?.trim();
      },
    }),
    inboundMxHost: custom('INBOUND_MX_HOST', {
      default: 'unset',
      description:
        "the host a sending domain's return-path subdomain points its MX at (our inbound listener)",
      details: 'with `BOUNCE_DOMAIN`, each sending domain gets a return-path subdomain `bounces.<domain>`',
      read(context) {
        const host = context.env.INBOUND_MX_HOST?.toLowerCase().replace(/\.$/, '') || undefined;
        if (host !== undefined && !DOMAIN_NAME.test(host)) {
          context.problems.push(`INBOUND_MX_HOST must be a host name such as mx.example.com, got '${host}'.`);
        }
        return host;
      },
    }),
    sendingSpf: custom('SENDING_SPF', {
      default: 'unset',
      description: 'the SPF record each return-path subdomain must publish, so SPF passes aligned',
      details: '`v=spf1 ip4:192.0.2.10 -all`: the addresses mail leaves from',
      read(context) {
        const spf = context.env.SENDING_SPF?.trim() || undefined;
        if (spf !== undefined && !/^v=spf1( [\x21-\x7e]+)*$/i.test(spf)) {
          context.problems.push(
            `SENDING_SPF must be an SPF record such as 'v=spf1 ip4:192.0.2.1 -all', got '${spf}'.`,
          );
        }
        return spf;
      },
    }),
    domainRecheckMs: duration('DOMAIN_RECHECK', {
      default: '6h',
      min: '1s',
      max: '30d',
      description: "how often every sending domain's records are looked up again",
      details: 'a change of status emits `domain.verified` or `domain.failed`',
    }),
    domainChecks: fixed(
      { concurrency: 4, timeoutMs: 30_000 },
      'domain checks in flight per worker process, and how long one may take',
    ),
  }),

  ...section('Bounces and reports', {
    bounceDomain: custom('BOUNCE_DOMAIN', {
      default: 'unset',
      description: 'the domain of per-recipient return paths (VERP), so bounce reports come back to Postwire',
      details:
        'each recipient goes in its own SMTP transaction with the envelope sender `bounce+<recipient id><HMAC ' +
        'tag>@BOUNCE_DOMAIN`, so a report mailed back names its recipient and a forged one does not verify. Point ' +
        "the domain's MX at the inbound listener. Unset: the envelope sender is the From address, bounce reports " +
        'go there and late bounces stay invisible, and no listener runs. Mail from a verified sending domain ' +
        'with a verified return path uses `bounces.<that domain>` instead',
      read(context) {
        const domain = rawValue(context, 'BOUNCE_DOMAIN');
        if (domain !== undefined && !DOMAIN_NAME.test(domain)) {
          context.problems.push(
            `BOUNCE_DOMAIN must be a domain name such as bounces.example.com, got '${domain}'.`,
          );
        }
        return domain?.toLowerCase();
      },
    }),
    reportFeedbackLoops: custom('REPORT_FEEDBACK_LOOPS', {
      default: 'unset',
      description:
        'feedback loops trusted to report for recipient domains: `reporter=domain|domain`, comma-separated',
      details:
        "for example `fbl.example.net=example.net|example.org`. A report not sent to a recipient's own return path " +
        "changes it only when DKIM-signed by one of these, or by the recipient's own domain from a role address",
      read: feedbackLoops,
    }),
    inbound: {
      host: text('INBOUND_SMTP_HOST', {
        default: '127.0.0.1',
        description:
          'where the SMTP listener for reports and received mail listens (with `BOUNCE_DOMAIN` or `INBOUND_MX_HOST` set)',
        details: 'in `postwire serve` and `postwire worker` unless started with `--no-inbound`',
      }),
      port: integer('INBOUND_SMTP_PORT', {
        default: 2525,
        min: 0,
        max: 65535,
        description: 'its port: 25 on a public address in production, behind the MX of `BOUNCE_DOMAIN`',
      }),
      maxBytes: integer('INBOUND_MAX_BYTES', {
        default: 10 * 1024 * 1024,
        min: 1024,
        max: 1024 * 1024 * 1024,
        description: 'a larger message is refused (552) and not stored; a real report is a few kilobytes',
      }),
      sessionTimeoutMs: duration('INBOUND_SESSION_TIMEOUT', {
        default: '5m',
        min: '1s',
        max: '1h',
        description:
          'an SMTP session still open this long is ended with a 421, however busy the client keeps it',
        details:
          'the 60 s idle timeout alone lets a byte every few seconds hold a connection for ever; a message cut ' +
          'off is not stored, and the sending MTA tries again. A report takes seconds; 10 MiB over a slow link, ' +
          'a minute or two',
      }),
      maxConnectionsPerClient: integer('INBOUND_MAX_CONNECTIONS_PER_CLIENT', {
        default: 20,
        min: 1,
        max: INBOUND_MAX_CONNECTIONS,
        description: 'SMTP sessions one client address may hold at once; the next is refused with a 421',
        details: `all clients together hold ${INBOUND_MAX_CONNECTIONS} at most`,
      }),
      messagesPerMinutePerClient: integer('INBOUND_MESSAGES_PER_MINUTE', {
        default: 120,
        min: 1,
        max: 1_000_000,
        description:
          'messages one client address may begin (MAIL FROM) per minute; past it, 450 and the client tries later',
      }),
      tls: custom(['INBOUND_TLS_CERT', 'INBOUND_TLS_KEY'], {
        default: 'unset',
        description: 'PEM text or file paths: with both, the listener offers STARTTLS',
        read: inboundTls,
      }),
    },
    reportParsing: {
      timeoutMs: duration('REPORT_PARSE_TIMEOUT', {
        default: '2s',
        min: '10ms',
        max: '1m',
        description:
          'reading one received message that has used this much CPU time is stopped: it is `unreadable`',
        details:
          "on a parse thread, never on the API's event loop; the thread is ended and the message kept, with why. " +
          'A report takes milliseconds, a 10 MB message about 0.4 s',
      }),
      threads: integer('REPORT_PARSE_THREADS', {
        default: 1,
        min: 1,
        max: 64,
        description: 'threads that read received messages: one leaves the other cores to the API',
      }),
      memoryMb: integer('REPORT_PARSE_MEMORY', {
        default: 64,
        min: 16,
        max: 4096,
        description:
          'the heap of each parse thread, in MiB; a message that needs more is kept as `unreadable`',
      }),
    },
    spamd: {
      url: custom('SPAMD_URL', {
        default: 'unset',
        description:
          "SpamAssassin's spamd (`spamd://host:783` or `tcp://host:port`) that gives received mail a spam verdict; unset: none",
        details:
          'the verdict (score, threshold, whether spamd calls it spam) is advice: when spamd is down, slow or ' +
          'answers nonsense, the message is received unscored and a warning logged. Whether spamd runs network ' +
          'tests is its own setting (`spamd -L`: local rules only)',
        read(context) {
          const raw = rawValue(context, 'SPAMD_URL');
          if (raw !== undefined && !parseSpamdUrl(raw)) {
            context.problems.push(
              `SPAMD_URL must be spamd://host:port or tcp://host:port (port 783 when left out), got '${raw}'.`,
            );
            return undefined;
          }
          return raw?.trim();
        },
      }),
      timeoutMs: duration('SPAMD_TIMEOUT', {
        default: '10s',
        min: '100ms',
        max: '5m',
        description:
          'one check, connection to last byte, takes at most this; past it the message goes unscored',
        details:
          'SpamAssassin takes about a second for a message with local rules only, more with network tests',
      }),
      maxBytes: integer('SPAMD_MAX_BYTES', {
        default: 512 * 1024,
        shownDefault: '`524288` (512 KiB)',
        min: 1024,
        max: 64 * 1024 * 1024,
        description: 'a larger message is scored on its first this many bytes, cut at a line break',
        details:
          'the verdict says `truncated: true`. spamc instead passes a message over its 500 KB limit unscored, ' +
          'which lets spam padded past the limit through; what makes mail large is attachments, which no rule reads',
      }),
    },
  }),

  ...section('SMTP submission', {
    submission: {
      host: text('SUBMISSION_HOST', {
        default: '127.0.0.1',
        description: 'where the SMTP submission server listens (with a submission port set)',
        details: 'in `postwire serve`, or alone with `postwire submission`',
      }),
      port: optionalPort('SUBMISSION_PORT', {
        description: 'its port for STARTTLS submission (587 in production); unset: no such port',
        details:
          'AUTH only after STARTTLS, except from a loopback address with `SUBMISSION_ALLOW_PLAIN_LOOPBACK`',
      }),
      tlsPort: optionalPort('SUBMISSION_TLS_PORT', {
        description: 'its port for implicit TLS submission (465 in production); unset: no such port',
      }),
      tls: custom(['SUBMISSION_TLS_CERT', 'SUBMISSION_TLS_KEY'], {
        default: 'unset',
        description: 'PEM text or file paths: the certificate both submission ports present',
        details:
          'needed for `SUBMISSION_TLS_PORT`, and for AUTH on `SUBMISSION_PORT` from anywhere but loopback',
        read: (context) => tlsPair(context, 'SUBMISSION_TLS_CERT', 'SUBMISSION_TLS_KEY', 'SMTP submission'),
      }),
      allowPlainLoopback: boolean('SUBMISSION_ALLOW_PLAIN_LOOPBACK', {
        default: false,
        description: 'AUTH without TLS from a loopback address (development); never from elsewhere',
      }),
      maxBytes: integer('SUBMISSION_MAX_BYTES', {
        default: 40 * 1024 * 1024,
        shownDefault: '`41943040` (40 MiB)',
        min: 1024,
        max: 1024 * 1024 * 1024,
        description: 'a larger message is refused: announced in EHLO SIZE, and answered 552 at DATA',
      }),
      sessionTimeoutMs: duration('SUBMISSION_SESSION_TIMEOUT', {
        default: '5m',
        min: '1s',
        max: '1h',
        description:
          'a submission session still open this long is ended with a 421, however busy the client keeps it',
        details:
          'as `INBOUND_SESSION_TIMEOUT`: the 60 s idle timeout alone lets a byte every few seconds hold a ' +
          'connection for ever. A message cut off is not stored; the client keeps it and sends it again. In 5 ' +
          'minutes a 40 MiB message (`SUBMISSION_MAX_BYTES`) needs about 140 KB/s',
      }),
      maxConnectionsPerClient: integer('SUBMISSION_MAX_CONNECTIONS_PER_CLIENT', {
        default: 20,
        min: 1,
        max: SUBMISSION_MAX_CONNECTIONS,
        description:
          'SMTP submission sessions one client address may hold at once (both ports together); the next is refused with a 421',
        details: `counted from the connection, before AUTH; all clients together hold ${SUBMISSION_MAX_CONNECTIONS} at most on each port`,
      }),
    },
  }),

  ...section('Tracking and unsubscribe', {
    publicUrl: custom('PUBLIC_URL', {
      default: 'unset',
      description:
        "the base URL recipients' mail clients reach; tracking and unsubscribe links are built on it",
      details:
        'for example `https://mail.acme.example`. Served by the API process: open pixels (`/o/…`), click ' +
        'redirects (`/c/…`) and one-click unsubscribe (`/u/…`). Unset: a send asking for tracking or unsubscribe is a 422 ' +
        "`public_url_missing`. Workers need it too (they build each recipient's copy)",
      read: publicUrl,
    }),
    engagement: {
      trackOpens: boolean('TRACK_OPENS', {
        default: false,
        description: 'what a send gets when it does not say `tracking.opens`; `true` needs `PUBLIC_URL`',
      }),
      trackClicks: boolean('TRACK_CLICKS', {
        default: false,
        description: 'what a send gets when it does not say `tracking.clicks`; `true` needs `PUBLIC_URL`',
      }),
      listUnsubscribe: boolean('LIST_UNSUBSCRIBE', {
        default: false,
        description: 'what a send gets when it does not say `unsubscribe`; `true` needs `PUBLIC_URL`',
      }),
    },
  }),
};

export type Config = ValuesOf<typeof CONFIG_SCHEMA>;
export type HttpTimeouts = Config['httpTimeouts'];
export type InboundConfig = Config['inbound'];
export type SpamdConfig = Config['spamd'];
export type EngagementDefaults = Config['engagement'];

/** Rules between settings, checked once each has been read. */
const RULES: Array<(config: Config) => string | undefined> = [
  ...(
    [
      ['TRACK_OPENS', 'trackOpens'],
      ['TRACK_CLICKS', 'trackClicks'],
      ['LIST_UNSUBSCRIBE', 'listUnsubscribe'],
    ] as const
  ).map(
    ([name, key]) =>
      (config: Config) =>
        config.engagement[key] && config.publicUrl === undefined
          ? `${name}=true needs PUBLIC_URL (the base URL recipients' mail clients reach).`
          : undefined,
  ),
  (config) =>
    config.mailTransport === 'relay' && !config.smtpUrl
      ? 'MAIL_TRANSPORT=relay needs SMTP_URL (smtp://user:pass@host:port).'
      : undefined,
  (config) =>
    config.submission.tlsPort !== undefined && !config.submission.tls
      ? 'SUBMISSION_TLS_PORT needs SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY.'
      : undefined,
  // Without a certificate no client could AUTH: the port would take connections and refuse every login.
  (config) =>
    config.submission.port !== undefined && !config.submission.tls && !config.submission.allowPlainLoopback
      ? 'SUBMISSION_PORT needs SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY (AUTH only after STARTTLS), or, ' +
        'to try it on this machine, SUBMISSION_ALLOW_PLAIN_LOOPBACK=true (AUTH without TLS from loopback only).'
      : undefined,
];

export class ConfigError extends Error {
  constructor(problems: string[]) {
    super(`Invalid configuration:\n${problems.map((problem) => `  - ${problem}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * The configuration the environment gives, or a ConfigError naming every bad setting. `stdoutIsTTY` picks the
 * default log format.
 */
export function loadConfig(
  env: Env = process.env,
  { stdoutIsTTY = process.stdout.isTTY === true }: { stdoutIsTTY?: boolean } = {},
): Config {
  const problems: string[] = [];
  const config = readSchema(CONFIG_SCHEMA, { env, problems, stdoutIsTTY });
  for (const rule of RULES) {
    const problem = rule(config);
    if (problem) problems.push(problem);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/** Every setting at its default (and logs as JSON): what tests and benchmarks start from. */
export function defaultConfig(): Config {
  return loadConfig({}, { stdoutIsTTY: false });
}

/** The defaults, for code built without a Config (tests, benchmarks): read from the schema like the rest. */
export const DEFAULTS: Readonly<Config> = defaultConfig();

/** A PEM setting: the text itself (line breaks may come as \n escapes) or the path of a PEM file. */
function pemSetting(context: ReadContext, name: string): string | undefined {
  const value = rawValue(context, name);
  if (value === undefined) return undefined;
  if (value.includes('-----BEGIN')) return value.replace(/\\n/g, '\n');
  try {
    return readFileSync(value, 'utf8');
  } catch {
    context.problems.push(`${name} is neither a PEM key nor a readable file ('${value}').`);
    return undefined;
  }
}

function inboundTls(context: ReadContext): { cert: string; key: string } | undefined {
  return tlsPair(context, 'INBOUND_TLS_CERT', 'INBOUND_TLS_KEY', 'STARTTLS on the inbound listener');
}

/** A certificate and its key, both or neither, each PEM text or a file path. */
function tlsPair(
  context: ReadContext,
  certEnv: string,
  keyEnv: string,
  what: string,
): { cert: string; key: string } | undefined {
  const cert = pemSetting(context, certEnv);
  const key = pemSetting(context, keyEnv);
  if ((cert === undefined) !== (key === undefined)) {
    context.problems.push(`${what} needs both ${certEnv} and ${keyEnv}.`);
    return undefined;
  }
  if (cert === undefined || key === undefined) return undefined;
  try {
    createPrivateKey(key);
  } catch {
    context.problems.push(`${keyEnv} does not hold a valid PEM private key.`);
    return undefined;
  }
  return { cert, key };
}

/** A TCP port, or unset (undefined: nothing listens there). 0 picks a free port (tests). */
function optionalPort(
  env: string,
  described: { description: string; details?: string; default?: string },
): Setting<number | undefined> {
  return custom(env, {
    default: 'unset',
    ...described,
    read(context) {
      const raw = rawValue(context, env);
      if (raw === undefined) return undefined;
      const value = Number(raw);
      if (!Number.isInteger(value) || value < 0 || value > 65535) {
        context.problems.push(`${env} must be an integer from 0 to 65535, got '${raw}'.`);
        return undefined;
      }
      return value;
    },
  });
}

/** PUBLIC_URL: an absolute http(s) URL without query or fragment; kept without its trailing slash. */
function publicUrl(context: ReadContext): string | undefined {
  const raw = rawValue(context, 'PUBLIC_URL');
  if (raw === undefined) return undefined;
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    url = undefined;
  }
  if (!url || !['http:', 'https:'].includes(url.protocol) || url.search || url.hash || url.username) {
    context.problems.push(
      `PUBLIC_URL must be an http(s) URL such as https://mail.acme.example, got '${raw}'.`,
    );
    return undefined;
  }
  return url.href.replace(/\/+$/, '');
}

/** REPORT_FEEDBACK_LOOPS: `reporter=domain|domain,reporter=domain`; empty when unset. */
function feedbackLoops(context: ReadContext): ReadonlyMap<string, readonly string[]> {
  const loops = new Map<string, string[]>();
  for (const entry of (context.env.REPORT_FEEDBACK_LOOPS ?? '').split(',')) {
    if (entry.trim() === '') continue;
    const [reporter = '', covered = ''] = entry.split('=').map((part) => part.trim().toLowerCase());
    const domains = covered.split('|').map((domain) => domain.trim());
    if (!DOMAIN_NAME.test(reporter) || domains.some((domain) => !DOMAIN_NAME.test(domain))) {
      context.problems.push(
        `REPORT_FEEDBACK_LOOPS takes reporter=domain|domain entries separated by commas (fbl.example.net=example.net|example.org), got '${entry.trim()}'.`,
      );
      continue;
    }
    loops.set(reporter, [...(loops.get(reporter) ?? []), ...domains]);
  }
  return loops;
}

function dkimConfig(context: ReadContext): DkimConfig | undefined {
  const domain = rawValue(context, 'DKIM_DOMAIN');
  const selector = rawValue(context, 'DKIM_SELECTOR');
  const key = rawValue(context, 'DKIM_PRIVATE_KEY');
  if (!domain && !selector && !key) return undefined;
  if (!domain || !selector || !key) {
    context.problems.push('DKIM signing needs all of DKIM_DOMAIN, DKIM_SELECTOR and DKIM_PRIVATE_KEY.');
    return undefined;
  }
  if (!DOMAIN_NAME.test(domain)) {
    context.problems.push(`DKIM_DOMAIN must be a domain name such as example.com, got '${domain}'.`);
  }
  if (!/^[a-z0-9]([a-z0-9_-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9_-]*[a-z0-9])?)*$/i.test(selector)) {
    context.problems.push(`DKIM_SELECTOR must be a DNS label such as mail2026, got '${selector}'.`);
  }
  const pem = pemSetting(context, 'DKIM_PRIVATE_KEY');
  if (pem === undefined) return undefined;
  try {
    createPrivateKey(pem);
  } catch {
    // Never echo key material into a log line.
    context.problems.push('DKIM_PRIVATE_KEY does not hold a valid PEM private key.');
    return undefined;
  }
  return { domain: domain.toLowerCase(), selector, privateKey: pem };
}

function readTrustProxy(context: ReadContext): TrustProxy {
  const raw = rawValue(context, 'TRUST_PROXY')?.trim();
  if (raw === undefined || ['off', 'false', 'no', '0'].includes(raw.toLowerCase())) return false;
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    if (hops <= 100) return hops;
  } else {
    const entries = raw.split(',').map((entry) => entry.trim());
    if (entries.every(isAddressOrNetwork)) return entries;
  }
  context.problems.push(
    `TRUST_PROXY must be off, a hop count from 1 to 100, or IP addresses and CIDR networks separated by commas (10.0.0.0/8,192.0.2.7), got '${raw}'.`,
  );
  return false;
}

function isAddressOrNetwork(entry: string): boolean {
  const [address = '', prefix, ...rest] = entry.split('/');
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  if (prefix === undefined) return true;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128);
}

function decodeKey(text: string): Buffer | undefined {
  const bytes = /^[0-9a-fA-F]{64}$/.test(text) ? Buffer.from(text, 'hex') : Buffer.from(text, 'base64');
  return bytes.length === 32 ? bytes : undefined;
}
