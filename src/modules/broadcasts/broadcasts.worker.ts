import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createLongJobWorker } from '../../queue/long-job-worker.ts';
import { withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import { createBroadcastQueue, createFanOutQueueSource } from './broadcasts.queue.ts';
import type { FanOut } from './fan-out.ts';

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
 * due) is a job. An attempt writes batches for a slice of time (each batch its own transaction, with the cursor)
 * and gives the lease back; the worker claims it again at once, so many broadcasts share the worker and a
 * stop or crash loses at most the batch in flight.
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
    source: createFanOutQueueSource(queue),
    concurrency,
    attemptTimeoutMs,
    leaseMs: 2 * attemptTimeoutMs,
    stopGraceMs: sliceMs + 5000,
    async attempt(job, signal) {
      let done = false;
      try {
        done = await deps.fanOut.run(job.broadcastId, workerId, sliceMs, signal);
      } catch (error) {
        logger.error({ err: error, broadcast: job.broadcastId }, 'broadcast worker: a batch failed');
        // Left leased: claimed again when the lease runs out, from its cursor.
        return { done: false };
      }
      // More to go: due again at once (the queue's nextDueAt says so), claimed on the look after this outcome.
      // Not woken from here: a look now would claim it again while the runtime still holds this attempt.
      await queue.release(workerId, [job.broadcastId]);
      return { done };
    },
  });
}
