import type { QueueDefaults, QueueJob, QueueSource, QueueWorker, QueueWorkerDeps } from './contract.ts';
import type { QueueChannel } from './notifier.ts';
import { createQueueWorker } from './runtime.ts';

/** A queue of few, long jobs: a broadcast's fan-out, a contact import, a domain's DNS check, an automation run's steps. */
export interface LongJobQueue<Job extends QueueJob, Outcome> {
  /** How the worker names itself in logs: `broadcast worker`. */
  name: string;
  channel: QueueChannel;
  source: QueueSource<Job, Outcome>;
  attempt(job: Job, signal: AbortSignal): Promise<Outcome | undefined>;
  /** Jobs attempted at once by this worker. */
  concurrency: number;
  attemptTimeoutMs: number;
  leaseMs: number;
  /** How long stop() waits for the attempts in flight. */
  stopGraceMs: number;
}

/**
 * A worker for a queue of few, long jobs, on the runtime every queue runs on. Its jobs share one lane and are
 * claimed one at a time: each holds its slot for seconds, so there is no lane to keep from starving the others
 * and nothing to gain from claiming ahead; an outcome is written as it comes, since there are too few to batch.
 */
export function createLongJobWorker<Job extends QueueJob, Outcome>(
  deps: QueueWorkerDeps,
  defaults: QueueDefaults,
  queue: LongJobQueue<Job, Outcome>,
): QueueWorker {
  const { concurrency } = queue;
  return createQueueWorker({
    name: queue.name,
    workerId: defaults.workerId,
    source: queue.source,
    attempt: queue.attempt,
    settings: {
      concurrency,
      laneConcurrency: concurrency,
      laneCapacity: concurrency,
      capacity: concurrency,
      claimBatch: 1,
      attemptTimeoutMs: queue.attemptTimeoutMs,
      leaseMs: queue.leaseMs,
      pollIntervalMs: defaults.pollIntervalMs,
      stopGraceMs: queue.stopGraceMs,
      outcomeWriteIntervalMs: 0,
      maxUnrecorded: concurrency,
    },
    clock: deps.clock,
    logger: defaults.logger,
    notifier: deps.notifier,
    database: deps.database,
    channel: queue.channel,
    heartbeats: defaults.heartbeats,
    deadAfterMs: defaults.deadAfterMs,
  });
}
