// Running the processes: logging, health and metrics, and how workers find work and each other.
import { custom, duration, fixed, rawValue, section } from '../lib/settings.ts';
import { optionalPort } from './readers.ts';

/**
 * How often an idle worker looks for due jobs when no wake-up comes (another process on SQLite, a lost
 * LISTEN connection): the longest a job can wait for a worker that was not told about it.
 */
export const WORKER_POLL_INTERVAL_MS = 1000;

export const LOG_FORMATS = ['json', 'pretty'] as const;
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFormat = (typeof LOG_FORMATS)[number];

export const LOGGING_SETTINGS = section('Logging', {
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
});

export const HEALTH_SETTINGS = section('Health and metrics', {
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
});

export const WORKER_SETTINGS = section('Workers', {
  workerDeadAfterMs: duration('WORKER_DEAD_AFTER', {
    default: '15s',
    min: '300ms',
    max: '1h',
    description: 'a worker silent this long is dead: the others give its leased jobs back',
    details:
      'workers heartbeat three times per this period; a worker silent for two thirds of it is dead, and the ' +
      'others give its leased mail and deliveries back at once (not when its leases run out)',
  }),
});
