import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createQueueWorker, withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import type { Runner } from './runner.ts';
import { createRunQueue, createRunQueueSource, type RunOutcome } from './runs.queue.ts';

/** A run whose step failed for a reason that may pass (the database down) is tried again after this. */
const FAILED_RETRY_MS = 10_000;
/** Outcomes that finish within this are given back in one statement. */
const OUTCOME_WRITE_INTERVAL_MS = 5;

export interface RunWorkerSettings {
  /** Runs advanced at once by this worker. */
  concurrency?: number;
  pollIntervalMs?: number;
}

export interface RunWorkerDeps extends QueueWorkerDeps {
  runner: Runner;
  settings?: RunWorkerSettings;
}

/**
 * Advances automation runs on the queue runtime (src/queue/runtime.ts): each due run is a job. An attempt takes
 * the run's due steps (each its own transaction) and answers when the run is due next; the outcome's write gives
 * the lease back, so a run due again at once (a long chain of steps) is claimed again at once, and one that
 * waits is found by the claim's index when its time comes. A worker stopped or killed mid-run loses at most the
 * step in flight, which the next claim takes again.
 *
 * Not a long-job worker (src/queue/long-job-worker.ts): runs are many short jobs (100 000 may enter an automation
 * at once), so they are claimed many at a time and their leases given back in batches, where a long-job worker
 * claims one job per commit.
 */
export function createRunWorker(deps: RunWorkerDeps): QueueWorker {
  const settings = deps.settings ?? {};
  const concurrency = settings.concurrency ?? 8;
  const defaults = withQueueDefaults(deps, settings);
  const { logger, workerId } = defaults;
  const queue = createRunQueue(deps.database.db, deps.database.engine);
  // A step renders an email at most: the lease covers a few slow ones and a margin.
  const attemptTimeoutMs = 60_000;
  const now = () => deps.clock.now().getTime();

  return createQueueWorker({
    name: 'automation runs worker',
    workerId,
    source: createRunQueueSource(queue, { clock: deps.clock, workerId }),
    async attempt(job, signal): Promise<RunOutcome> {
      try {
        return { dueAt: await deps.runner.run(job.runId, workerId, signal) };
      } catch (error) {
        // Nothing of the failed step was kept: again from it, after a pause so a failure that repeats does
        // not spin.
        logger.error({ err: error, run: job.runId }, 'automation runs worker: a step failed');
        return { retryAt: now() + FAILED_RETRY_MS };
      }
    },
    settings: {
      concurrency,
      laneConcurrency: concurrency,
      // Claims of many runs at once: a claim is a commit, and a run's attempt is a few short transactions.
      laneCapacity: 8 * concurrency,
      capacity: 8 * concurrency,
      claimBatch: 4 * concurrency,
      attemptTimeoutMs,
      leaseMs: 2 * attemptTimeoutMs,
      pollIntervalMs: defaults.pollIntervalMs,
      stopGraceMs: 5000,
      outcomeWriteIntervalMs: OUTCOME_WRITE_INTERVAL_MS,
      maxUnrecorded: 8 * concurrency,
    },
    clock: deps.clock,
    logger,
    notifier: deps.notifier,
    database: deps.database,
    channel: QUEUE_CHANNELS.automationRuns,
    heartbeats: defaults.heartbeats,
    deadAfterMs: defaults.deadAfterMs,
  });
}
