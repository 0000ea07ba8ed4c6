// The HTTP server's settings: where it listens, its timeouts, memory for bodies, rate limits, template
// rendering and which proxies name the client.
import { isIP } from 'node:net';
import { availableParallelism } from 'node:os';
import {
  boolean,
  custom,
  duration,
  fixed,
  integer,
  rawValue,
  type ReadContext,
  section,
  text,
} from '../lib/settings.ts';

/**
 * Which proxies' `X-Forwarded-For` names the client: none (`false`), the nearest N hops, or the proxies at
 * these addresses and networks. Fastify's `trustProxy` takes each form as it is.
 */
export type TrustProxy = false | number | string[];

export const HTTP_SETTINGS = section('HTTP server', {
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
  compileSchemasAtStart: boolean('HTTP_COMPILE_SCHEMAS_AT_START', {
    default: true,
    description: "compile every route's validators and serializers before the API listens",
    details:
      "`false`: a start takes about half the CPU, and each route's first request compiles its own (up to a " +
      'few hundred ms on the event loop, once per route and process, while other requests wait); the tests ' +
      'start their servers so',
  }),
  httpBodyMemoryBytes: integer('HTTP_BODY_MEMORY_LIMIT', {
    default: 64 * 1024 * 1024,
    shownDefault: '`67108864` (64 MiB)',
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    description: 'bytes of request bodies held in memory at once; past it, 429 `server_busy`; `0`: no limit',
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
});

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
