import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createLongJobWorker } from '../../queue/long-job-worker.ts';
import { withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import type { Runner } from './runner.ts';
import { createRunQueue, createRunQueueSource } from './runs.queue.ts';

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
 * the run's due steps (each its own transaction) and gives the lease back; a run that then waits is due again
 * only at its `due_at`, so a worker stopped or killed mid-run loses at most the step in flight, which the next
 * claim takes again.
 */
export function createRunWorker(deps: RunWorkerDeps): QueueWorker {
  const settings = deps.settings ?? {};
  const concurrency = settings.concurrency ?? 4;
  const defaults = withQueueDefaults(deps, settings);
  const { logger, workerId } = defaults;
  const queue = createRunQueue(deps.database.db, deps.database.engine);
  // A step renders an email at most: the lease covers a few slow ones and a margin.
  const attemptTimeoutMs = 60_000;

  return createLongJobWorker(deps, defaults, {
    name: 'automation runs worker',
    channel: QUEUE_CHANNELS.automationRuns,
    source: createRunQueueSource(queue),
    concurrency,
    attemptTimeoutMs,
    leaseMs: 2 * attemptTimeoutMs,
    stopGraceMs: 5000,
    async attempt(job, signal) {
      try {
        await deps.runner.run(job.runId, workerId, signal);
      } catch (error) {
        logger.error({ err: error, run: job.runId }, 'automation runs worker: a step failed');
        // Left leased: claimed again when the lease runs out, at the step it had reached.
        return { done: false };
      }
      // Not woken from here: a look now would claim it again while the runtime still holds this attempt.
      await queue.release(workerId, [job.runId]);
      return { done: true };
    },
  });
}
