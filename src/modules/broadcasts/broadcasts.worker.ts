import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createLongJobWorker } from '../../queue/long-job-worker.ts';
import { withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import { createBroadcastQueue, createFanOutQueueSource, type FanOutOutcome } from './broadcasts.queue.ts';
import type { FanOut } from './fan-out.ts';

/** A broadcast the reputation breaker holds is looked at again this often. */
const PAUSED_RECHECK_MS = 30_000;
/** A broadcast whose batch failed is tried again from its cursor after this. */
const FAILED_RETRY_MS = 10_000;

export interface BroadcastWorkerSettings {
  /** Broadcasts fanned out at once by this worker. */
  concurrency?: number;
  /** One attempt writes batches for about this long, then gives the broadcast back to be claimed again. */
  sliceMs?: number;
  pollIntervalMs?: number;
}

export interface BroadcastWorkerDeps extends QueueWorkerDeps {
  fanOut: FanOut;
  settings?: BroadcastWorkerSettings;
}

/**
 * Fans broadcasts out on the queue runtime (src/queue/runtime.ts): each broadcast being sent (or scheduled and
 * due) is a job. An attempt writes batches for a slice of time (each batch its own transaction, with the cursor);
 * its outcome's write gives the lease back and the worker claims it again at once, so many broadcasts share the
 * worker, no slice waits for a lease to run out, and a stop or crash loses at most the batch in flight.
 */
export function createBroadcastWorker(deps: BroadcastWorkerDeps): QueueWorker {
  const settings = deps.settings ?? {};
  const concurrency = settings.concurrency ?? 2;
  const sliceMs = settings.sliceMs ?? 2000;
  const defaults = withQueueDefaults(deps, settings);
  const { logger, workerId } = defaults;
  const queue = createBroadcastQueue(deps.database.db, deps.database.engine);
  // A batch may take a while on a loaded machine: the lease covers the slice, a batch after it, and a margin.
  const attemptTimeoutMs = sliceMs + 30_000;

  return createLongJobWorker(deps, defaults, {
    name: 'broadcast worker',
    channel: QUEUE_CHANNELS.broadcasts,
    source: createFanOutQueueSource(queue, { clock: deps.clock, workerId }),
    concurrency,
    attemptTimeoutMs,
    leaseMs: 2 * attemptTimeoutMs,
    stopGraceMs: sliceMs + 5000,
    async attempt(job, signal): Promise<FanOutOutcome> {
      const now = () => deps.clock.now().getTime();
      try {
        const step = await deps.fanOut.run(job.broadcastId, workerId, sliceMs, signal);
        if (step === 'done') return { done: true };
        // The next slice at once (the outcome's write gives the lease back and looks again); a paused one is
        // looked at again a while later (a resume is seen then).
        return { done: false, dueAt: step === 'more' ? now() : now() + PAUSED_RECHECK_MS };
      } catch (error) {
        // Nothing of the failed batch was kept: again from its cursor, after a pause so a failure that
        // repeats (the database down) does not spin. One that another worker took refuses the write.
        logger.error({ err: error, broadcast: job.broadcastId }, 'broadcast worker: a batch failed');
        return { done: false, dueAt: now() + FAILED_RETRY_MS };
      }
    },
  });
}
