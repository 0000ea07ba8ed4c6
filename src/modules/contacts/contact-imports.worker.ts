import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createLongJobWorker } from '../../queue/long-job-worker.ts';
import { withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import type { ImportJobRunner } from './contact-imports.job.ts';
import { createContactImportQueue, createContactImportQueueSource } from './contact-imports.queue.ts';

/** A batch's write must end within this; each batch carries the job's lease this far again. */
const BATCH_TIMEOUT_MS = 30_000;

export interface ContactImportWorkerDeps extends QueueWorkerDeps {
  job: ImportJobRunner;
  /** Imports run at once by this worker (each one a batch at a time). */
  concurrency?: number;
  pollIntervalMs?: number;
}

/**
 * Runs contact imports on the queue runtime (src/queue/runtime.ts): each import is a job, leased while it
 * runs and carried on by each batch it writes. A worker that stops gives its jobs back after the batch in
 * flight; one that dies leaves them to be taken up again when their lease runs out (or its heartbeats stop),
 * and they resume after their last committed batch.
 */
export function createContactImportWorker(deps: ContactImportWorkerDeps): QueueWorker {
  const concurrency = deps.concurrency ?? 1;
  const defaults = withQueueDefaults(deps, deps);
  const { logger, workerId } = defaults;
  const leaseMs = 2 * BATCH_TIMEOUT_MS + 2000;
  const queue = createContactImportQueue(deps.database.db, deps.database.engine);

  return createLongJobWorker(deps, defaults, {
    name: 'contact import worker',
    channel: QUEUE_CHANNELS.contactImports,
    source: createContactImportQueueSource(queue),
    concurrency,
    attemptTimeoutMs: BATCH_TIMEOUT_MS,
    leaseMs,
    stopGraceMs: BATCH_TIMEOUT_MS,
    async attempt({ job }, signal) {
      try {
        // A job cut short (stopping, or its lease lost) is given back to resume where its batches got.
        if (!(await deps.job.run(job, workerId, leaseMs, signal))) await queue.release(workerId, [job.id]);
      } catch (error) {
        logger.error({ err: error, contact_import: job.id }, 'contact import worker: the import failed');
      }
      return { done: true };
    },
  });
}
