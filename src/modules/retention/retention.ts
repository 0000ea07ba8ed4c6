import { DEFAULTS } from '../../config.ts';
import type { PruneTarget } from '../../db/prune.ts';
import type { Clock } from '../../lib/clock.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';

// RETENTION: events, webhook attempts, stored MIME and attachments, tracking rows, received reports and DMARC
// aggregate records older than the retention, and finished contact imports (with their error reports), are
// deleted, a batch at a time, by the workers (and `postwire prune`). Emails and their recipients, suppressions,
// templates, contacts and contact properties, segments and topics (and who is in them, who chose what),
// broadcasts and their exclusions, and the daily numbers are kept.
// The API logs have limits of their own (API_LOG_RETENTION, API_LOG_MAX_ROWS), applied even with RETENTION off.

export interface PrunedTable {
  table: string;
  rows: number;
}

/** The repositories whose old rows go, each naming its own (the process's, from services.ts). */
export type PrunedRepositories = Record<
  | 'deliveries'
  | 'events'
  | 'emails'
  | 'tracking'
  | 'engagement'
  | 'received'
  | 'inbound'
  | 'dmarc'
  | 'contactImports',
  { pruneTargets(cutoff: Date): PruneTarget[] }
> & { apiLogs: { pruneTargets(cutoff: Date, maxRows: number, now: Date): PruneTarget[] } };

export interface RetentionDeps {
  repositories: PrunedRepositories;
  clock: Clock;
  /** Rows older than this go; undefined (RETENTION=off): only the API logs are pruned, by their own limits. */
  retentionMs: number | undefined;
  /**
   * The API logs: older than `retentionMs` go, and each project's past its newest `maxRows` (by default the
   * configuration's defaults).
   */
  apiLogs?: { retentionMs: number; maxRows: number };
  /** Rows per DELETE: small, so no statement holds the write lock long beside sends and deliveries. */
  batchSize?: number;
  /** How often the workers prune. */
  intervalMs?: number;
  /**
   * The share of the time the workers' pruning may take: after each batch it pauses so that batches fill at
   * most this fraction (on SQLite a DELETE holds the process's event loop while it runs).
   */
  dutyCycle?: number;
  logger?: WorkerLogger;
}

/** The share of the time the workers' pruning takes (the configuration's retentionPruning). */
export const WORKER_DUTY_CYCLE = DEFAULTS.retentionPruning.dutyCycle;

export function createRetention(deps: RetentionDeps) {
  const { repositories } = deps;
  const apiLogLimits = deps.apiLogs ?? {
    retentionMs: DEFAULTS.apiLogRetentionMs,
    maxRows: DEFAULTS.apiLogMaxRows,
  };
  const batchSize = deps.batchSize ?? DEFAULTS.retentionPruning.batchSize;
  const dutyCycle = deps.dutyCycle ?? WORKER_DUTY_CYCLE;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let stopped = false;

  /** In dependency order: attempts, then events (their deliveries go with them), then per-email rows. */
  const targets = (): PruneTarget[] => {
    const now = deps.clock.now().getTime();
    const apiLogs = repositories.apiLogs.pruneTargets(
      new Date(now - apiLogLimits.retentionMs),
      apiLogLimits.maxRows,
      new Date(now),
    );
    if (deps.retentionMs === undefined) return apiLogs;
    const cutoff = new Date(now - deps.retentionMs);
    return [
      ...repositories.deliveries.pruneTargets(cutoff),
      ...repositories.events.pruneTargets(cutoff),
      ...repositories.emails.pruneTargets(cutoff),
      ...repositories.tracking.pruneTargets(cutoff),
      ...repositories.engagement.pruneTargets(cutoff),
      ...repositories.received.pruneTargets(cutoff),
      ...repositories.inbound.pruneTargets(cutoff),
      ...repositories.dmarc.pruneTargets(cutoff),
      ...repositories.contactImports.pruneTargets(cutoff),
      ...apiLogs,
    ];
  };

  /**
   * Deletes what is older than the retention, a batch at a time. With a `dutyCycle` below 1 it pauses after
   * each batch, so the sends and deliveries of this process (and the database) get the rest of the time.
   */
  async function prune(options: { dutyCycle?: number } = {}): Promise<PrunedTable[]> {
    const share = options.dutyCycle ?? 1;
    const pruned: PrunedTable[] = [];
    for (const target of targets()) {
      let rows = 0;
      while (!stopped) {
        const started = performance.now();
        const deleted = await target.deleteBatch(batchSize);
        rows += deleted;
        if (deleted < batchSize) break;
        const pauseMs = share >= 1 ? 0 : ((performance.now() - started) * (1 - share)) / share;
        await new Promise((resolve) => (pauseMs > 0 ? setTimeout(resolve, pauseMs) : setImmediate(resolve)));
      }
      pruned.push({ table: target.table, rows });
    }
    return pruned;
  }

  return {
    /** What would go now, per table. */
    async dryRun(): Promise<PrunedTable[]> {
      const counted: PrunedTable[] = [];
      for (const target of targets()) counted.push({ table: target.table, rows: await target.count() });
      return counted;
    },

    /** Deletes everything older than the retention now, a batch at a time; how many rows went per table. */
    prune,

    /** The workers' pruning: every interval, until nothing old is left, taking at most its duty cycle. */
    start(): void {
      stopped = false;
      const tick = () => {
        running = prune({ dutyCycle })
          .then((pruned) => {
            const rows = pruned.reduce((sum, entry) => sum + entry.rows, 0);
            if (rows > 0) deps.logger?.info({ pruned }, `Retention: deleted ${rows} old rows`);
          })
          .catch((error: unknown) => deps.logger?.error({ err: error }, 'Retention: pruning failed'))
          .finally(() => {
            running = undefined;
            if (!stopped)
              timer = setTimeout(tick, deps.intervalMs ?? DEFAULTS.retentionPruning.intervalMs).unref();
          });
      };
      timer = setTimeout(tick, 0).unref();
    },

    async stop(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}

export type Retention = ReturnType<typeof createRetention>;
