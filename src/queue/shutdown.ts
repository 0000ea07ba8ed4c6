// How a queue worker stops, in one order: stop claiming, let attempts in flight finish (bounded), write their
// outcomes, and only then give back what it holds, so that no finished job runs again.
import { forget } from './attempts.ts';
import type { Batcher } from './batcher.ts';
import type { Attempted, QueueJob } from './contract.ts';
import type { WorkLoop } from './work-loop.ts';
import type { WorkerState } from './worker-state.ts';

/**
 * Waits for `promise` at most `ms`; true when it settled in time. The timer is cleared either way, so a
 * stopped worker leaves nothing behind that keeps the process alive.
 */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Stops claiming, waits for attempts in flight (bounded), writes their outcomes, then gives back the rest. */
export async function stopWorker<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  loop: WorkLoop,
  outcomes: Batcher<Attempted<Job, Outcome>>,
): Promise<void> {
  const { options } = state;
  const { settings, source, workerId, logger, name } = options;
  if (!state.running) return;
  state.running = false;
  state.lastHeartbeatAt = undefined;
  state.unsubscribe?.();
  await loop.stop();
  // Jobs waiting for a slot are not started; the release below gives them back.
  for (const lane of state.lanes.values()) {
    for (const { job } of lane.waiting) forget(state, job);
    lane.waiting = [];
  }
  state.waitingCount = 0;

  const settled = Promise.allSettled([...state.inFlight]);
  if (!(await settlesWithin(settled, settings.stopGraceMs))) {
    state.abort.abort();
    // Aborted attempts return at once; only a database that does not answer keeps one longer.
    await settlesWithin(settled, 1000);
  }
  // The outcomes go in before the leases go back: released first, a finished job would run again. Those
  // waiting out the interval between writes are written now.
  outcomes.writeNow();
  await settlesWithin(outcomes.drain(), settings.stopGraceMs);
  state.lanes.clear();
  state.expiring = [];
  state.reclaimed.clear();
  await source.release(workerId).catch((error: unknown) => {
    logger.error({ err: error }, `${name}: could not give back its leases; they expire`);
  });
  await options.heartbeats?.forget([workerId]).catch((error: unknown) => {
    logger.error({ err: error }, `${name}: could not remove its heartbeat; the others will`);
  });
  state.abort.abort();
  await options.close?.();
}
