// What a queue worker knows at any moment, shared by its parts: the claims (claims.ts), the attempts and
// their outcomes (attempts.ts) and the stop (shutdown.ts). Here too the rules that read it alone: how much a
// lane holds, and whether a claim may be made.
import type { Attempted, QueueJob, QueueWorkerOptions, RecordResult } from './contract.ts';
import { silentWhenDead } from './heartbeats.repo.ts';

/** An attempt starts only with at least the attempt timeout plus this much of its lease left. */
export const LEASE_MARGIN_MS = 1000;

export interface HeldJob<Job> {
  job: Job;
  leaseEndsAt: number;
}

/** The worker's jobs of one lane: attempts in flight, and claimed ones waiting for a slot. */
export interface Lane<Job> {
  inFlight: number;
  waiting: Array<HeldJob<Job>>;
  /** The lane may have more due jobs than this worker holds: top it up when it has room. */
  backlogged: boolean;
  /** Shaping holds the lane until then (epoch ms): its jobs went back, and claims leave it out. */
  heldUntil?: number;
}

export interface WorkerState<Job extends QueueJob, Outcome> {
  readonly options: QueueWorkerOptions<Job, Outcome>;
  /** A lane tops up once this many of its jobs are free (with claimLanes). */
  readonly topUpAt: number;
  /** While jobs wait for slots, a claim waits until this many are free. */
  readonly claimFloor: number;
  abort: AbortController;
  readonly lanes: Map<string, Lane<Job>>;
  readonly inFlight: Set<Promise<void>>;
  waitingCount: number;
  /** Rows of jobs this worker holds: waiting, in flight, or attempted and not yet written. */
  readonly heldRows: Set<string>;
  /**
   * Held rows a claim took again before this worker let go of them (their attempt or its outcome's write
   * under way): the attempt stands for them, and their new lease goes back once the outcome is written.
   */
  readonly reclaimed: Set<string>;
  /** Attempted jobs whose outcome is queued or being written: still leased to this worker. */
  unrecorded: number;
  /** Rows whose lease ran too short to start an attempt; given back at the next round. */
  expiring: string[];
  running: boolean;
  unsubscribe: (() => void) | undefined;
  /** When a lane that shaping holds for a moment may start its next attempt (epoch ms). */
  nextShapedAt: number;
  /** When to look over the whole queue next; a wake-up from new work makes it now. */
  nextDiscoveryAt: number;
  /** A lane the worker holds has room for more (QueueSource.limitsLanes): look at the lanes it holds. */
  topUpDue: boolean;
  lastDiscoveryAt: number;
  /** The most jobs one look asks for; shrinks while looks return more than the lanes can hold. */
  discoveryLimit: number;
  /** Looks in a row whose every job went back because its lane was full (claims.ts `looked`). */
  fruitlessLooks: number;
  rounds: number;
  /** Set by a look that found nothing due; cleared when a round starts. */
  foundNothing: boolean;
  /** A claim is under way (a round's, or an outcomes' write's): no other is made meanwhile. */
  claiming: boolean;
  idleWaiters: Array<{ after: number; resolve: () => void }>;
  readonly heartbeatEveryMs: number;
  /** Another worker silent this long is dead: its jobs are given back (silentWhenDead). */
  readonly deadWhenSilentMs: number;
  nextHeartbeatAt: number;
  lastHeartbeatAt: number | undefined;
  /** Asks the work loop for a round. */
  wake(): void;
  /** Queues an attempt's outcome for the next write. */
  queueOutcome(item: Attempted<Job, Outcome>): void;
  /** Starts the write of the outcomes waiting now (Batcher.writeNow); false when none wait or one is under way. */
  writeOutcomesNow(): boolean;
}

/**
 * A claim made by an outcomes' write: a look over the queue (claims.ts lookWithOutcomes) or the lanes'
 * top-ups (topUpsWithOutcomes).
 */
export interface OutcomesLook<Job, Outcome = unknown> {
  /** Writes the outcomes and makes the claim (the source's recordAndClaim or recordAndClaimLanes). */
  record(
    batch: ReadonlyArray<Attempted<Job, Outcome>>,
  ): Promise<{ results: RecordResult[]; claimed?: Job[] | undefined }>;
  /** Takes in what the claim found; undefined: it made none, and the next round makes it. */
  claimed(jobs: readonly Job[] | undefined): Promise<void>;
}

/** A worker that holds nothing yet; `wake` and `queueOutcome` are set once the loop and the batcher exist. */
export function newWorkerState<Job extends QueueJob, Outcome>(
  options: QueueWorkerOptions<Job, Outcome>,
  deadAfterMs: number,
): WorkerState<Job, Outcome> {
  const { settings } = options;
  return {
    options,
    topUpAt: Math.max(1, Math.floor(settings.laneCapacity / 2)),
    claimFloor: Math.max(settings.claimBatch, Math.floor(settings.capacity / 8)),
    abort: new AbortController(),
    lanes: new Map(),
    inFlight: new Set(),
    waitingCount: 0,
    heldRows: new Set(),
    reclaimed: new Set(),
    unrecorded: 0,
    expiring: [],
    running: false,
    unsubscribe: undefined,
    nextShapedAt: Infinity,
    nextDiscoveryAt: -Infinity,
    topUpDue: false,
    lastDiscoveryAt: -Infinity,
    discoveryLimit: settings.capacity,
    fruitlessLooks: 0,
    rounds: 0,
    foundNothing: false,
    claiming: false,
    idleWaiters: [],
    // Three heartbeats per dead-after period: a live worker is never seen silent for more than a third of
    // it, so one silent for two thirds is dead, and the others notice within the next third.
    heartbeatEveryMs: deadAfterMs / 3,
    deadWhenSilentMs: silentWhenDead(deadAfterMs),
    nextHeartbeatAt: -Infinity,
    lastHeartbeatAt: undefined,
    wake: () => {},
    queueOutcome: () => {},
    writeOutcomesNow: () => false,
  };
}

export const held = <Job>(lane: Lane<Job>) => lane.inFlight + lane.waiting.length;
export const heldCount = (state: WorkerState<QueueJob, unknown>) => state.inFlight.size + state.waitingCount;

/** New jobs may be due in any lane: look over the whole queue at the next round. */
export function newWork(state: WorkerState<QueueJob, unknown>): void {
  state.nextDiscoveryAt = -Infinity;
  state.wake();
}

/** Whether a claim may be made with `room` jobs free overall (and `unrecorded` outcomes left to write). */
export function mayClaim(
  state: WorkerState<QueueJob, unknown>,
  room: number,
  unrecorded = state.unrecorded,
): boolean {
  if (unrecorded >= state.options.settings.maxUnrecorded || room <= 0) return false;
  // A claim of a handful of jobs costs a statement and a commit, like a large one: while held jobs still
  // wait for their lanes' slots, let an eighth of the capacity come free and claim it in one go (with a
  // fan-out backlog past the capacity, each finished delivery otherwise paid for a claim of one).
  return state.waitingCount === 0 || room >= state.claimFloor;
}

/**
 * How many jobs to top a lane up by now, with `room` free overall: none while it has no more work or no
 * room, nor (with claimLanes) before half its capacity, or all the room left, is free.
 */
export function topUpLimit<Job extends QueueJob>(
  state: WorkerState<Job, unknown>,
  lane: Lane<Job>,
  room: number,
): number {
  const limit = Math.min(state.options.settings.laneCapacity - held(lane), room);
  if (!lane.backlogged || limit <= 0) return 0;
  if (state.options.source.claimLanes && limit < Math.min(state.topUpAt, room)) return 0;
  return limit;
}

/**
 * Whether a round has anything to do once an attempt has ended: every job held has started (a look may
 * find more, or the worker is now idle), or a lane can be topped up. The rest a round does comes due on
 * its own timer or wakes it itself. A round woken by every finished webhook delivery, to find nothing
 * to do, cost about as much as the rest of the delivery's bookkeeping.
 */
export function roundWanted<Job extends QueueJob>(state: WorkerState<Job, unknown>): boolean {
  if (state.waitingCount === 0) return true;
  const room = state.options.settings.capacity - heldCount(state);
  if (!mayClaim(state, room)) return false;
  for (const lane of state.lanes.values()) if (topUpLimit(state, lane, room) > 0) return true;
  return false;
}
