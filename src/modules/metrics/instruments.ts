import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EmailSource } from '../../db/schema.ts';
import type { PoolUse } from '../../db/handle.ts';
import type { RunningQueueWorkers } from '../../queue/running-workers.ts';
import type { EventKind } from '../event-kinds/event-kinds.ts';

// What the process counts as it works, for /metrics. Each process has a registry of its own (never
// prom-client's global one): tests build many apps in one process, and each must count only its own.

/** What the services tell the metrics as things happen: increments only, nothing that waits. */
export interface MetricsRecorder {
  /** Emails were accepted (stored for sending) by this process: over HTTP (`api`) or SMTP submission (`smtp`). */
  emailsAccepted(sources: readonly EmailSource[]): void;
  /** Events committed by this process: one per recipient for `email.*` outcomes. */
  eventsEmitted(kinds: readonly EventKind[]): void;
  /** Webhook delivery attempts made by this process, by whether the receiver took them (2xx in time). */
  webhookAttempts(succeeded: number, failed: number): void;
  /** A received report was read, with its verdict (`applied`, `no_change`, `unmatched`, …). */
  inboundReportRead(outcome: string): void;
  /** A destination asked this process's sending worker to slow down (issue 38): its provider, or `other`. */
  destinationThrottled(kind: string, provider: string | null): void;
}

/** For code built without metrics (tests of a single service, the CLI): counts nothing. */
export const noMetrics: MetricsRecorder = {
  emailsAccepted() {},
  eventsEmitted() {},
  webhookAttempts() {},
  inboundReportRead() {},
  destinationThrottled() {},
};

export interface ProcessMetrics extends MetricsRecorder {
  registry: Registry;
  /** One request answered: `route` is the route's pattern (`/v1/emails/:id`), never the URL. */
  observeRequest(method: string, route: string, status: number, seconds: number): void;
  /** The gauges a scrape fills in from the database's queues (metrics.service.ts). */
  queueGauges: {
    depth: Gauge<'queue'>;
    oldestDueAge: Gauge<'queue'>;
  };
  /**
   * Per destination of direct delivery, filled in by a scrape: a built-in provider by its name, every other
   * destination summed up as `other` (bounded cardinality: the providers and one).
   */
  destinationGauges: {
    rate: Gauge<'destination'>;
    suspended: Gauge<'destination'>;
    depth: Gauge<'destination'>;
  };
  /**
   * Per sending source of direct delivery (a DIRECT_SOURCE_IPS address, or `default`), the destinations
   * suspended for it now, filled in by a scrape (bounded cardinality: the addresses listed).
   */
  suspendedForSource: Gauge<'source'>;
}

export interface ProcessMetricsOptions {
  latencyBuckets: readonly number[];
  /** This process's queue workers: their attempts in flight are read at each scrape. */
  runningWorkers: RunningQueueWorkers;
  /** The database's connection pool (PostgreSQL); without one, no pool metrics are exported. */
  poolUse?: (() => PoolUse) | undefined;
}

export function createProcessMetrics(options: ProcessMetricsOptions): ProcessMetrics {
  const registry = new Registry();
  // prom-client's process and Node.js families beside ours (process_* memory and CPU, nodejs_* event-loop
  // lag, heap and GC): what an operator's dashboards expect of a Node service (packaging/grafana-dashboard.json).
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  // Most families below count by one label and need nothing more: these two build them.
  const counter = <L extends string>(name: string, help: string, label: L) =>
    new Counter<L>({ name, help, labelNames: [label], registers });
  const queueGauge = (name: string, help: string) =>
    new Gauge<'queue'>({ name, help, labelNames: ['queue'], registers });
  const requestDuration = new Histogram({
    name: 'postwire_http_request_duration_seconds',
    help: 'HTTP requests answered, by method, route pattern and status, and how long each took',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [...options.latencyBuckets],
    registers,
  });
  const emailsAccepted = counter(
    'postwire_emails_accepted_total',
    'Emails accepted and stored for sending, by source: the HTTP API (202) or SMTP submission (250)',
    'source',
  );
  const events = counter(
    'postwire_events_total',
    'Events emitted by this process, by type (email.sent, email.delivered, email.bounced, email.failed, …); email events count recipients',
    'type',
  );
  const webhookAttempts = counter(
    'postwire_webhook_attempts_total',
    'Webhook delivery attempts made by this process, by result (succeeded: a 2xx in time; failed: anything else)',
    'result',
  );
  const inboundReports = counter(
    'postwire_inbound_reports_total',
    'Received reports (bounces, delays, complaints, …) read by this process, by outcome',
    'outcome',
  );
  const throttles = new Counter<'kind' | 'provider'>({
    name: 'postwire_destination_throttles_total',
    help: 'Replies that asked this process to slow down (direct mode), by kind (rate, connections, reputation) and provider (google, microsoft, …, other)',
    labelNames: ['kind', 'provider'],
    registers,
  });
  new Gauge({
    name: 'postwire_queue_attempts_in_flight',
    help: "Attempts running now in this process's workers, per queue",
    labelNames: ['queue'] as const,
    registers,
    collect() {
      this.reset();
      for (const { queue, worker } of options.runningWorkers.list()) {
        this.inc({ queue }, worker.attemptsInFlight());
      }
    },
  });
  const poolUse = options.poolUse;
  if (poolUse) {
    new Gauge({
      name: 'postwire_db_pool_connections',
      help: "This process's pooled database connections, by state: busy, idle, and the most it may open (max)",
      labelNames: ['state'] as const,
      registers,
      collect() {
        const use = poolUse();
        this.set({ state: 'busy' }, use.total - use.idle);
        this.set({ state: 'idle' }, use.idle);
        this.set({ state: 'max' }, use.max);
      },
    });
    new Gauge({
      name: 'postwire_db_pool_waiting',
      help: 'Queries waiting for a pooled database connection: the pool is too small for the load',
      registers,
      collect() {
        this.set(poolUse().waiting);
      },
    });
  }
  const destinationGauge = (name: string, help: string) =>
    new Gauge<'destination'>({ name, help, labelNames: ['destination'], registers });
  return {
    registry,
    destinationGauges: {
      rate: destinationGauge(
        'postwire_destination_rate_per_minute',
        'Direct mode: messages a minute a provider takes now (adaptive; summed over sources; 0: no limit yet)',
      ),
      suspended: destinationGauge(
        'postwire_destinations_suspended',
        'Direct mode: destinations suspended now (a provider: 0 or 1 per source; other: how many of the rest)',
      ),
      depth: destinationGauge(
        'postwire_destination_queue_depth',
        'Direct mode: recipients queued or waiting per destination (counted up to the queue-depth bound over all)',
      ),
    },
    suspendedForSource: new Gauge<'source'>({
      name: 'postwire_source_destinations_suspended',
      help: 'Direct mode: destinations suspended now for each sending source (a DIRECT_SOURCE_IPS address, or default)',
      labelNames: ['source'],
      registers,
    }),
    observeRequest(method, route, status, seconds) {
      requestDuration.observe({ method, route, status }, seconds);
    },
    emailsAccepted(sources) {
      for (const source of sources) emailsAccepted.inc({ source });
    },
    eventsEmitted(kinds) {
      for (const type of kinds) events.inc({ type });
    },
    webhookAttempts(succeeded, failed) {
      if (succeeded > 0) webhookAttempts.inc({ result: 'succeeded' }, succeeded);
      if (failed > 0) webhookAttempts.inc({ result: 'failed' }, failed);
    },
    inboundReportRead(outcome) {
      inboundReports.inc({ outcome });
    },
    destinationThrottled(kind, provider) {
      throttles.inc({ kind, provider: provider ?? 'other' });
    },
    queueGauges: {
      depth: queueGauge(
        'postwire_queue_depth',
        'Jobs due now per queue, in any process sharing the database (counted up to a bound, so a scrape stays cheap)',
      ),
      oldestDueAge: queueGauge(
        'postwire_queue_oldest_due_age_seconds',
        'How long the oldest job due now has been due, per queue (0 when none is)',
      ),
    },
  };
}
