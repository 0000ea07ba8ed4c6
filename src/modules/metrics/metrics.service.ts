import { timingSafeEqual, createHash } from 'node:crypto';
import type { Clock } from '../../lib/clock.ts';
import { QUEUE_NAMES } from '../../queue/running-workers.ts';
import type { ProcessMetrics } from './instruments.ts';
import type { MetricsRepo } from './metrics.repo.ts';

export interface MetricsServiceDeps {
  metrics: ProcessMetrics;
  repo: MetricsRepo;
  clock: Clock;
  /** METRICS_TOKEN; unset: /metrics is off. */
  token: string | undefined;
  /** Each queue's depth is counted up to this many rows. */
  queueDepthLimit: number;
}

export type MetricsAccess = 'off' | 'denied' | 'allowed';

export function createMetricsService({ metrics, repo, clock, token, queueDepthLimit }: MetricsServiceDeps) {
  // Compared as digests of equal length, so neither the comparison's time nor an early length check tells
  // a guesser how much of the token it has right.
  const expected = token === undefined ? undefined : digest(token);
  return {
    /** Whether an `Authorization` header opens /metrics: off without METRICS_TOKEN, else the bearer token. */
    access(authorization: string | undefined): MetricsAccess {
      if (!expected) return 'off';
      const match = /^Bearer (.+)$/i.exec(authorization ?? '');
      if (!match) return 'denied';
      return timingSafeEqual(digest(match[1]!), expected) ? 'allowed' : 'denied';
    },

    /** The Prometheus text exposition: the counters as they stand, the queues read from the database now. */
    async scrape(): Promise<{ contentType: string; body: string }> {
      const now = clock.now();
      const queues = await repo.queues(now, queueDepthLimit);
      const { depth, oldestDueAge } = metrics.queueGauges;
      for (const queue of QUEUE_NAMES) {
        const snapshot = queues[queue];
        depth.set({ queue }, snapshot.depth);
        const dueFor =
          snapshot.oldestDueAt === undefined ? 0 : (now.getTime() - Date.parse(snapshot.oldestDueAt)) / 1000;
        oldestDueAge.set({ queue }, Math.max(0, dueFor));
      }
      const { rate, suspended, depth: destinationDepth } = metrics.destinationGauges;
      const { suspendedForSource } = metrics;
      for (const gauge of [rate, suspended, destinationDepth, suspendedForSource]) gauge.reset();
      const destinations = await repo.destinations(now, queueDepthLimit);
      for (const [destination, values] of destinations.labels) {
        if (destination !== 'other') rate.set({ destination }, values.rate);
        suspended.set({ destination }, values.suspended);
        destinationDepth.set({ destination }, values.depth);
      }
      for (const [source, count] of destinations.suspendedBySource) suspendedForSource.set({ source }, count);
      return { contentType: metrics.registry.contentType, body: await metrics.registry.metrics() };
    },
  };
}

export type MetricsService = ReturnType<typeof createMetricsService>;

const digest = (value: string) => createHash('sha256').update(value).digest();
