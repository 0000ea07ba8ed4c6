// Claimed jobs from their lanes to their written outcomes: taken into a lane, started as its slots allow,
// attempted, and their outcomes written in batches (the batcher calls writeOutcomes).
import type { Attempted, QueueJob, RecordResult } from './contract.ts';
import type { Lease } from './lease.ts';
import {
  held,
  heldCount,
  LEASE_MARGIN_MS,
  type Lane,
  type OutcomesLook,
  roundWanted,
  type WorkerState,
} from './worker-state.ts';

/**
 * Takes claimed jobs into their lanes and starts what the slots allow. Jobs past a lane's or the worker's
 * capacity go back at once (holding them would keep them from other workers); their lane is marked as
 * having more, to be topped up as it makes room.
 */
export async function accept<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  claimed: readonly Job[],
  lease: Lease,
): Promise<{ kept: number; excess: number }> {
  const { settings } = state.options;
  if (!state.running) {
    // Stopping: a claim that came back meanwhile (with an outcomes' write the stop waits for) is not started.
    const rows = claimed.flatMap((job) => job.rows.filter((row) => !state.heldRows.has(row)));
    if (rows.length > 0) await state.options.source.release(state.options.workerId, rows);
    return { kept: 0, excess: 0 };
  }
  const giveBack: string[] = [];
  let kept = 0;
  let excess = 0;
  for (const job of claimed) {
    // Rows this worker already holds (its own attempt outlived its lease, or its outcome is not written
    // yet) were claimed again: the attempt under way stands for them; any others go back.
    if (job.rows.some((row) => state.heldRows.has(row))) {
      giveBack.push(...job.rows.filter((row) => !state.heldRows.has(row)));
      // Claimed again after its outcome's write gave the lease back (a job due again at once, a fan-out's
      // next slice), the fresh lease would hold it from everyone until it ran out: given back once written.
      for (const row of job.rows) if (state.heldRows.has(row)) state.reclaimed.add(row);
      continue;
    }
    let lane = state.lanes.get(job.lane);
    if (!lane) {
      lane = { inFlight: 0, waiting: [], backlogged: false };
      state.lanes.set(job.lane, lane);
    }
    if (held(lane) >= settings.laneCapacity || heldCount(state) >= settings.capacity) {
      lane.backlogged = true;
      giveBack.push(...job.rows);
      excess += 1;
      continue;
    }
    for (const row of job.rows) state.heldRows.add(row);
    lane.waiting.push({ job, leaseEndsAt: lease.until.getTime() });
    state.waitingCount += 1;
    kept += 1;
  }
  startWaiting(state);
  if (giveBack.length > 0) await state.options.source.release(state.options.workerId, giveBack);
  return { kept, excess };
}

/**
 * A lane shaping holds this long or longer gives its waiting jobs back rather than keep them from the
 * other lanes (they are claimed again when it may start); a shorter wait keeps them.
 */
export const SHAPED_GIVE_BACK_MS = 1000;

/** Starts waiting jobs while their lane's slots and the overall limit allow. */
export function startWaiting<Job extends QueueJob, Outcome>(state: WorkerState<Job, Outcome>): void {
  const { settings, clock, shaping } = state.options;
  const now = clock.now().getTime();
  if (shaping && state.nextShapedAt <= now) state.nextShapedAt = Infinity;
  for (const [key, lane] of state.lanes) {
    // Unrecorded outcomes are what a crash sends again: past maxUnrecorded, attempts wait for the writes.
    while (
      lane.waiting.length > 0 &&
      lane.inFlight < settings.laneConcurrency &&
      state.inFlight.size < settings.concurrency &&
      state.unrecorded < settings.maxUnrecorded
    ) {
      if (shaping) {
        const at = shaping.startAt(key, now);
        if (at > now) {
          holdLane(state, lane, at, now);
          break;
        }
      }
      const { job, leaseEndsAt } = lane.waiting.shift()!;
      state.waitingCount -= 1;
      // An attempt must be able to end, and its outcome be written, while the lease still holds.
      if (leaseEndsAt - now < settings.attemptTimeoutMs + LEASE_MARGIN_MS) {
        forget(state, job);
        state.expiring.push(...job.rows);
        state.wake();
        continue;
      }
      shaping?.started(key, now);
      dispatch(state, lane, job);
    }
    if (held(lane) === 0 && !lane.backlogged && !((lane.heldUntil ?? -Infinity) > now)) {
      state.lanes.delete(key);
    }
  }
}

/**
 * A lane that may start its next attempt only at `at`: a short wait is slept (the round then starts it), a
 * long one gives the lane's waiting jobs back and leaves the lane out of claims until then.
 */
function holdLane<Job extends QueueJob>(
  state: WorkerState<Job, unknown>,
  lane: Lane<Job>,
  at: number,
  now: number,
): void {
  // Until an attempt in flight ends: its end starts the next (dispatch).
  if (at === Infinity) return;
  if (at - now < SHAPED_GIVE_BACK_MS) {
    state.nextShapedAt = Math.min(state.nextShapedAt, at);
    return;
  }
  for (const { job } of lane.waiting) {
    forget(state, job);
    state.expiring.push(...job.rows);
  }
  state.waitingCount -= lane.waiting.length;
  lane.waiting = [];
  lane.backlogged = false;
  lane.heldUntil = at;
  // Look for the lane's jobs again once it may start.
  state.nextDiscoveryAt = Math.min(state.nextDiscoveryAt, at);
  state.wake();
}

/** The job's rows are no longer this worker's to hold; returns those a claim took again meanwhile. */
export function forget(state: WorkerState<QueueJob, unknown>, job: QueueJob): string[] {
  const reclaimed: string[] = [];
  for (const row of job.rows) {
    state.heldRows.delete(row);
    if (state.reclaimed.delete(row)) reclaimed.push(row);
  }
  return reclaimed;
}

function dispatch<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  lane: Lane<Job>,
  job: Job,
): void {
  const { logger, name } = state.options;
  lane.inFlight += 1;
  const done: Promise<void> = state.options
    .attempt(job, state.abort.signal)
    .then((outcome) => {
      if (outcome === undefined) {
        // Cut short by stop(): no verdict; stop() gives the lease back for a retry.
        forget(state, job);
        return;
      }
      state.unrecorded += 1;
      state.queueOutcome({ job, outcome });
    })
    .catch((error: unknown) => {
      // The lease runs out and another claim retries it: at least once, never lost.
      forget(state, job);
      logger.error({ err: error, rows: job.rows }, `${name}: an attempt failed`);
    })
    .finally(() => {
      state.inFlight.delete(done);
      lane.inFlight -= 1;
      startWaiting(state);
      if (roundWanted(state)) state.wake();
    });
  state.inFlight.add(done);
}

/** Writes a batch of outcomes; if the batch fails, each on its own, so one bad outcome sinks no other. */
export async function writeOutcomes<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  batch: Array<Attempted<Job, Outcome>>,
  look?: OutcomesLook<Job, Outcome>,
): Promise<void> {
  const { source, logger, name, workerId } = state.options;
  let results: Array<RecordResult | undefined>;
  const report = (error: unknown, item: Attempted<Job, Outcome>) =>
    // The lease runs out and another claim retries it: at least once, never lost.
    logger.error({ err: error, rows: item.job.rows }, `${name}: recording an attempt failed`);
  // With the outcomes, the claim a round would make once they are written (claims.ts lookWithOutcomes,
  // topUpsWithOutcomes).
  let claimed: Job[] | undefined;
  try {
    if (look) ({ results, claimed } = await look.record(batch));
    else results = await source.record(batch);
  } catch (error) {
    results = [];
    for (const item of batch) {
      if (batch.length === 1) {
        report(error, item);
        results.push(undefined);
        continue;
      }
      results.push(
        await source.record([item]).then(
          ([result]) => result,
          (failure: unknown) => {
            report(failure, item);
            return undefined;
          },
        ),
      );
    }
  }
  for (const [index, item] of batch.entries()) {
    state.unrecorded -= 1;
    const reclaimed = forget(state, item.job);
    if (reclaimed.length > 0) {
      // The next round gives their lease back (a no-op for rows the outcome finished) and looks again.
      state.expiring.push(...reclaimed);
      state.wake();
    }
    const result = results[index];
    if (!result) continue;
    if (!result.held) {
      logger.warn(
        { rows: item.job.rows, worker: workerId },
        `${name}: lease lost before the attempt was recorded; another worker owns the job`,
      );
    } else if (result.retryAt !== undefined) {
      // A retry is due then: look for it (its lane may have no other work this worker knows of).
      state.nextDiscoveryAt = Math.min(state.nextDiscoveryAt, result.retryAt);
    }
  }
  await look?.claimed(claimed);
}
