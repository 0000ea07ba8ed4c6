import { DEFAULTS } from '../config.ts';
import { startWaiting, writeOutcomes } from './attempts.ts';
import { createBatcher } from './batcher.ts';
import { lookWithOutcomes, round, topUpsWithOutcomes } from './claims.ts';
import type { Attempted, QueueJob, QueueWorker, QueueWorkerOptions } from './contract.ts';
import { stopWorker } from './shutdown.ts';
import { createWorkLoop } from './work-loop.ts';
import { LEASE_MARGIN_MS, newWork, newWorkerState } from './worker-state.ts';

// The one runtime both background queues run on (webhook deliveries, email recipients; later inbound
// reports and domain checks). A queue is rows in the database; a worker leases due rows, attempts them
// within bounded lanes, writes outcomes in batches and gives back what it does not finish. What differs
// per queue is only its policy: which rows to claim (a QueueSource), how to attempt a job and what the
// attempt's outcome is.
//
// Read in this order: contract.ts (what a queue gives and gets), this file (the worker put together),
// worker-state.ts (what it knows), claims.ts (a round), attempts.ts (lanes, attempts, outcomes), shutdown.ts.

export type {
  Attempted,
  ClaimRequest,
  LaneShaping,
  QueueJob,
  QueueSettings,
  QueueSource,
  QueueWorker,
  QueueWorkerDeps,
  QueueWorkerOptions,
  RecordResult,
} from './contract.ts';
export { withQueueDefaults } from './contract.ts';

/** The most outcomes one write takes. */
const OUTCOME_BATCH = 256;

/**
 * A leased-queue worker. Concurrency is bounded overall and per lane: a lane that hangs occupies only its
 * own slots (until the attempt timeout), so the others keep flowing. Many workers, in many processes, can
 * share one database: a lease keeps two from attempting the same job at once and brings back the jobs of a
 * worker that died.
 *
 * A slot is free as soon as its attempt ends: outcomes are written in batches (one transaction for those
 * that finished within a few milliseconds), bounded by `maxUnrecorded`; until its outcome is written, a job
 * stays leased, so a crash means a retry, never a loss. Lanes hold several times their slots so the next
 * attempt starts the moment one ends; lanes known to have work are topped up by claims on their own rows;
 * only new work (a wake-up, a retry falling due, the poll) makes the worker look over the whole queue.
 */
export function createQueueWorker<Job extends QueueJob, Outcome>(
  options: QueueWorkerOptions<Job, Outcome>,
): QueueWorker {
  const { settings, logger, name, workerId } = options;
  if (settings.leaseMs <= settings.attemptTimeoutMs + LEASE_MARGIN_MS) {
    throw new Error(`${name}: the lease must be longer than the attempt timeout plus ${LEASE_MARGIN_MS} ms.`);
  }
  const state = newWorkerState(options, options.deadAfterMs ?? DEFAULTS.workerDeadAfterMs);

  const outcomes = createBatcher<Attempted<Job, Outcome>>({
    maxBatch: OUTCOME_BATCH,
    minIntervalMs: settings.outcomeWriteIntervalMs,
    write: (batch) =>
      writeOutcomes(
        state,
        batch,
        lookWithOutcomes(state, batch.length) ?? topUpsWithOutcomes(state, batch.length),
      ),
    onWritten: () => {
      startWaiting(state);
      loop.wake();
    },
  });

  const loop = createWorkLoop({
    round: () => round(state),
    errorPauseMs: settings.pollIntervalMs,
    onRoundError(error) {
      logger.error({ err: error, worker: workerId }, `${name}: claiming jobs failed`);
    },
    listen:
      options.database.listen &&
      ((onLost) => options.database.listen!(options.channel, () => newWork(state), onLost)),
    onListenProblem(error, lost) {
      logger.warn(
        { err: error },
        lost
          ? `${name}: LISTEN connection lost; polling until it is back`
          : `${name}: could not LISTEN; polling until it can`,
      );
    },
  });
  state.wake = () => loop.wake();
  state.queueOutcome = (item) => outcomes.add(item);
  state.writeOutcomesNow = () => outcomes.writeNow();

  return {
    id: workerId,
    wake: () => newWork(state),
    attemptsInFlight: () => state.inFlight.size,
    lastHeartbeatAt: () => state.lastHeartbeatAt,

    whenIdle() {
      return new Promise<void>((resolve) => {
        state.idleWaiters.push({ after: state.rounds, resolve });
        newWork(state);
      });
    },

    async start() {
      if (state.running) return;
      state.running = true;
      if (state.abort.signal.aborted) state.abort = new AbortController();
      state.nextDiscoveryAt = -Infinity;
      state.discoveryLimit = settings.capacity;
      state.nextHeartbeatAt = -Infinity;
      state.unsubscribe = options.notifier?.subscribe(() => newWork(state));
      await loop.start();
    },

    stop: () => stopWorker(state, loop, outcomes),
  };
}
