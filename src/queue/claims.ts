// A round of the work loop: the heartbeat, giving back leases too short to use, then claims until every lane
// with work holds what it may; idle, it works out how long to sleep.
import { accept, SHAPED_GIVE_BACK_MS, startWaiting } from './attempts.ts';
import type { ClaimRequest, QueueJob } from './contract.ts';
import type { Lease } from './lease.ts';
import {
  held,
  heldCount,
  mayClaim,
  type OutcomesLook,
  topUpLimit,
  type WorkerState,
} from './worker-state.ts';

/** One round; resolves to how long to sleep before the next (a wake-up comes sooner). */
export async function round<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
): Promise<number> {
  const { source, workerId, clock, settings } = state.options;
  state.rounds += 1;
  const thisRound = state.rounds;
  state.foundNothing = false;
  await heartbeat(state);
  if (state.expiring.length > 0) {
    const rows = state.expiring;
    state.expiring = [];
    await source.release(workerId, rows);
    // They are due again at once: claim them afresh, with a lease long enough for an attempt.
    state.nextDiscoveryAt = -Infinity;
  }
  // Lanes that shaping held for a moment may start now.
  if (state.nextShapedAt <= clock.now().getTime()) startWaiting(state);
  await fill(state);
  const idle = heldCount(state) === 0 && state.unrecorded === 0;
  if (idle) {
    // Sleep until the next job is due (one whose time this worker's last look has already passed is
    // held elsewhere, or its lane is busy in another worker: the poll finds it).
    const dueAt = (await source.nextDueAt(clock.now())) ?? Infinity;
    if (dueAt > state.lastDiscoveryAt) state.nextDiscoveryAt = Math.min(state.nextDiscoveryAt, dueAt);
    if (state.foundNothing) {
      const ready = state.idleWaiters.filter((waiter) => waiter.after < thisRound);
      state.idleWaiters = state.idleWaiters.filter((waiter) => waiter.after >= thisRound);
      for (const waiter of ready) waiter.resolve();
    } else if (state.idleWaiters.length > 0) {
      // Someone waits for a look that finds nothing: the last one found work, so look again.
      state.nextDiscoveryAt = -Infinity;
    }
  }
  const until = Math.min(
    state.nextDiscoveryAt,
    state.nextShapedAt,
    state.options.heartbeats ? state.nextHeartbeatAt : Infinity,
  );
  return Math.max(0, Math.min(settings.pollIntervalMs, until - clock.now().getTime()));
}

/** Says this worker is alive, and gives back the jobs of workers of its queue that are not. */
async function heartbeat(state: WorkerState<QueueJob, unknown>): Promise<void> {
  const { heartbeats: store, clock, workerId, channel, source, logger, name } = state.options;
  const now = clock.now();
  if (!store || now.getTime() < state.nextHeartbeatAt) return;
  state.nextHeartbeatAt = now.getTime() + state.heartbeatEveryMs;
  await store.beat(workerId, channel, now);
  state.lastHeartbeatAt = now.getTime();
  const dead = await store.dead(channel, new Date(now.getTime() - state.deadWhenSilentMs));
  if (dead.length === 0) return;
  for (const deadWorker of dead) await source.release(deadWorker);
  await store.forget(dead);
  logger.warn({ workers: dead }, `${name}: gave back the jobs of workers that stopped their heartbeat`);
  state.nextDiscoveryAt = -Infinity;
}

/** Claims until every lane with work holds what it may, or nothing more is due. */
async function fill<Job extends QueueJob, Outcome>(state: WorkerState<Job, Outcome>): Promise<void> {
  const { settings, source } = state.options;
  const { lanes } = state;
  while (state.running) {
    // The outcomes' write to come makes the look with them (recordAndClaim), and its end wakes a round.
    if (state.claiming || (source.recordAndClaim && state.unrecorded > 0)) return;
    let room = settings.capacity - heldCount(state);
    if (!mayClaim(state, room)) return;
    const lease = freshLease(state);
    const { now } = lease;

    const topUps: Array<{ lane: string; limit: number }> = [];
    for (const [key, lane] of lanes) {
      const limit = topUpLimit(state, lane, room);
      if (limit === 0) continue;
      if (!source.claimLanes) {
        // A lane with more work has room again: a look finds its jobs (one over the whole queue, unless
        // the source says lane limits: then a look at the lanes it holds).
        lane.backlogged = false;
        lookForLanes(state);
        continue;
      }
      topUps.push({ lane: key, limit });
      room -= limit;
    }
    if (source.claimLanes) {
      if (topUps.length > 0) {
        // Outcomes wait to be written: their write, started now, takes the top-ups with it (one commit for
        // both, topUpsWithOutcomes) where a claim of their own was a commit more, and its end wakes a round.
        if (source.recordAndClaimLanes && state.writeOutcomesNow()) return;
        const claimed = await whileClaiming(state, () => source.claimLanes!(lease, topUps));
        await toppedUp(state, topUps, claimed, lease);
        continue;
      }
    }

    const request = lookOver(state, now.getTime(), room);
    if (!request) return;
    const claimed = await whileClaiming(state, () => source.claim(lease, request));
    if (!(await looked(state, request, claimed, lease))) return;
  }
}

/** Makes a claim with `claiming` set meanwhile: an outcomes' write then makes none at the same time. */
async function whileClaiming<T>(state: WorkerState<QueueJob, unknown>, claim: () => Promise<T>): Promise<T> {
  state.claiming = true;
  try {
    return await claim();
  } finally {
    state.claiming = false;
  }
}

/** A lease from now, for a claim made now. */
function freshLease(state: WorkerState<QueueJob, unknown>): Lease {
  const { clock, workerId, settings } = state.options;
  const now = clock.now();
  return { workerId, now, until: new Date(now.getTime() + settings.leaseMs) };
}

/** Takes what lanes' top-ups claimed into them; a lane that got less than it asked for has no more. */
async function toppedUp<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  topUps: ReadonlyArray<{ lane: string; limit: number }>,
  claimed: readonly Job[],
  lease: Lease,
): Promise<void> {
  const got = new Map<string, number>();
  for (const job of claimed) got.set(job.lane, (got.get(job.lane) ?? 0) + 1);
  for (const { lane, limit } of topUps) {
    const laneState = state.lanes.get(lane);
    if (laneState && (got.get(lane) ?? 0) < limit) laneState.backlogged = false;
  }
  await accept(state, claimed, lease);
}

/**
 * The look over the whole queue due now with `room` jobs free (the lanes without room, or topped up on
 * their own, left out), marked as made; undefined when none is due.
 */
function lookOver<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  now: number,
  room: number,
): ClaimRequest | undefined {
  const { settings, source } = state.options;
  const discovering = now >= state.nextDiscoveryAt;
  if (!discovering && !state.topUpDue) return undefined;
  if (state.inFlight.size > 0 && room < settings.claimBatch) return undefined;
  state.topUpDue = false;
  if (discovering) {
    state.lastDiscoveryAt = now;
    state.nextDiscoveryAt = state.lastDiscoveryAt + settings.pollIntervalMs;
  }
  const excludeLanes: string[] = [];
  for (const [key, lane] of state.lanes) {
    const full = held(lane) >= settings.laneCapacity;
    if (full) lane.backlogged = true;
    const shaped = (lane.heldUntil ?? -Infinity) > now;
    if (full || shaped || (lane.backlogged && source.claimLanes)) excludeLanes.push(key);
  }
  const limit = Math.min(room, state.discoveryLimit);
  const laneLimits = startableLimits(state, discovering ? limit : 0, room, now, excludeLanes);
  if (!laneLimits) return discovering ? { limit, excludeLanes } : undefined;
  // The rest of the worker's room is the look's over the lanes it holds none of; none in a look at the
  // lanes it holds alone (its part over the queue would read past their rows, all of them when they are
  // the queue's only ones, for nothing).
  const rest = Math.max(0, Math.min(limit, room - laneLimits.reduce((sum, lane) => sum + lane.limit, 0)));
  return { limit: discovering ? rest : 0, excludeLanes, laneLimits };
}

/**
 * A lane the worker holds has room for more: with a source that says lane limits, a look at the lanes it
 * holds (their parts of the look alone: an index probe each), else a look over the whole queue.
 */
function lookForLanes(state: WorkerState<QueueJob, unknown>): void {
  if (state.options.source.limitsLanes) state.topUpDue = true;
  else state.nextDiscoveryAt = -Infinity;
}

/**
 * The lanes' own limits in a look (ClaimRequest.laneLimits): of a lane this worker holds jobs of, no more
 * than it has room for (a source that says lane limits in its claim: QueueSource.limitsLanes), and of a
 * paced lane (LaneShaping.startable) no more than it can start before a wait long enough to give its jobs
 * back (SHAPED_GIVE_BACK_MS), less what it holds. A lane that can start none is left out (added to
 * `excludeLanes`). A look asked for the worker's whole room while the one lane it held had room for a
 * quarter of it, and gave the rest back: about 2.5 rows an email on PostgreSQL, 12 on SQLite (issue 38).
 */
function startableLimits<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  limit: number,
  room: number,
  now: number,
  excludeLanes: string[],
): Array<{ lane: string; limit: number }> | undefined {
  const { shaping, settings, source } = state.options;
  const counts = new Map<string, number>();
  if (source.limitsLanes) for (const key of state.lanes.keys()) counts.set(key, Infinity);
  if (shaping?.startable) {
    for (const [key, count] of shaping.startable(now, SHAPED_GIVE_BACK_MS)) counts.set(key, count);
  }
  const limits: Array<{ lane: string; limit: number }> = [];
  for (const [key, count] of counts) {
    if (excludeLanes.includes(key)) continue;
    const lane = state.lanes.get(key);
    const laneRoom = Math.min(settings.laneCapacity - (lane ? held(lane) : 0), room);
    const laneLimit = Math.min(count - (lane?.waiting.length ?? 0), laneRoom);
    // A lane that may take all the look's part over the queue takes needs no limit of its own.
    if (limit > 0 && laneLimit >= limit) continue;
    if (laneLimit > 0) {
      limits.push({ lane: key, limit: laneLimit });
      continue;
    }
    excludeLanes.push(key);
    if (count === Infinity) continue;
    // Look for its jobs again when it may start one.
    const at = shaping!.startAt(key, now);
    if (at > now && at < Infinity) state.nextDiscoveryAt = Math.min(state.nextDiscoveryAt, at);
  }
  return limits.length > 0 ? limits : undefined;
}

/** Takes what a look claimed into the lanes; whether to look again at once. */
async function looked<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  request: ClaimRequest,
  claimed: readonly Job[],
  lease: Lease,
): Promise<boolean> {
  const { settings } = state.options;
  // (A look at the lanes it holds alone finds no more than theirs.)
  if (claimed.length === 0 && request.limit > 0) state.foundNothing = true;
  const { kept, excess } = await accept(state, claimed, lease);
  // Ask next time for about as many as this look could use: giving rows back costs two writes each.
  state.discoveryLimit = excess > 0 ? Math.max(settings.laneCapacity, kept) : settings.capacity;
  // A second look in a row that kept nothing, every job of it going back to a full lane: the first left
  // those lanes out of this one, so the source cannot tell them apart (a domain's lane became its
  // destination's while jobs of both were held). Looking again at once would claim and give back the same
  // rows until a slot frees, holding the event loop the attempts need to end; a lane making room, an
  // outcome or the poll starts the next look instead.
  state.fruitlessLooks = kept === 0 && excess > 0 ? state.fruitlessLooks + 1 : 0;
  if (state.fruitlessLooks >= 2) return false;
  // A lane that took all its limit may have more: topped up as it makes room. A full look may have left
  // more: look again at once (the lanes with limits of their own left out: they took what they have room for).
  const got = new Map<string, number>();
  for (const job of claimed) got.set(job.lane, (got.get(job.lane) ?? 0) + 1);
  const limited = new Set<string>();
  for (const { lane, limit } of request.laneLimits ?? []) {
    limited.add(lane);
    const laneState = state.lanes.get(lane);
    if (laneState && (got.get(lane) ?? 0) >= limit) laneState.backlogged = true;
  }
  const rest = limited.size > 0 ? claimed.filter((job) => !limited.has(job.lane)).length : claimed.length;
  if (rest >= request.limit && (request.limit > 0 || limited.size === 0)) {
    state.nextDiscoveryAt = -Infinity;
    return true;
  }
  return excess > 0;
}

/**
 * The room an outcomes' write of `writing` outcomes may claim with them, through `claimWith` (the source's
 * recordAndClaim or recordAndClaimLanes); undefined when the source has none, the worker is stopping, a claim
 * is under way or none may be made.
 */
function roomWithOutcomes(
  state: WorkerState<QueueJob, unknown>,
  claimWith: unknown,
  writing: number,
): number | undefined {
  if (!claimWith || !state.running || state.claiming) return undefined;
  const room = state.options.settings.capacity - heldCount(state);
  return mayClaim(state, room, state.unrecorded - writing) ? room : undefined;
}

/**
 * The look an outcomes' write of `writing` outcomes makes with them (recordAndClaim), as a round would make
 * it once they are written; undefined when none is due.
 */
export function lookWithOutcomes<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  writing: number,
): OutcomesLook<Job, Outcome> | undefined {
  const { source } = state.options;
  const room = roomWithOutcomes(state, source.recordAndClaim, writing);
  if (room === undefined) return undefined;
  for (const lane of state.lanes.values()) {
    if (topUpLimit(state, lane, room) === 0) continue;
    lane.backlogged = false;
    lookForLanes(state);
  }
  const lease = freshLease(state);
  const request = lookOver(state, lease.now.getTime(), room);
  if (!request) return undefined;
  state.claiming = true;
  return {
    record: (batch) => source.recordAndClaim!(batch, lease, request),
    async claimed(jobs) {
      state.claiming = false;
      if (jobs === undefined) state.nextDiscoveryAt = -Infinity;
      // Looking again at once is the round's to do: the write's end wakes one.
      else if (await looked(state, request, jobs, lease)) state.nextDiscoveryAt = -Infinity;
    },
  };
}

/**
 * The top-ups an outcomes' write of `writing` outcomes makes with them (recordAndClaimLanes): every lane
 * with more work filled up to its capacity, as far as the worker's room goes; undefined when no lane wants
 * any, or a claim is under way. The rounds still top a lane up on their own once half of it is free (fill):
 * this only fills lanes as the writes pass, so that they have to less often. (A top-up left to the next write
 * instead, every 10 ms or so, let a busy webhook's lane run dry before it came.)
 */
export function topUpsWithOutcomes<Job extends QueueJob, Outcome>(
  state: WorkerState<Job, Outcome>,
  writing: number,
): OutcomesLook<Job, Outcome> | undefined {
  const { settings, source } = state.options;
  let room = roomWithOutcomes(state, source.recordAndClaimLanes, writing);
  if (room === undefined) return undefined;
  const topUps: Array<{ lane: string; limit: number }> = [];
  for (const [key, lane] of state.lanes) {
    const limit = Math.min(settings.laneCapacity - held(lane), room);
    if (!lane.backlogged || limit <= 0) continue;
    topUps.push({ lane: key, limit });
    room -= limit;
  }
  if (topUps.length === 0) return undefined;
  state.claiming = true;
  const lease = freshLease(state);
  return {
    record: (batch) => source.recordAndClaimLanes!(batch, lease, topUps),
    async claimed(jobs) {
      state.claiming = false;
      // None made (the write went another way): the lanes are still backlogged, and a round tops them up.
      if (jobs !== undefined) await toppedUp(state, topUps, jobs, lease);
    },
  };
}
