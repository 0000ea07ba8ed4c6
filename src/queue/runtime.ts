import { DEFAULTS, WORKER_POLL_INTERVAL_MS } from '../config.ts';
import type { DatabaseHandle } from '../db/connection.ts';
import type { Clock } from '../lib/clock.ts';
import { silentWorkerLogger, type WorkerLogger } from '../lib/worker-logger.ts';
import { createBatcher } from './batcher.ts';
import { createHeartbeatRepo, type HeartbeatStore } from './heartbeats.repo.ts';
import { type Lease, newWorkerId } from './lease.ts';
import type { Notifier, QueueChannel } from './notifier.ts';
import { createWorkLoop } from './work-loop.ts';

// The one runtime both background queues run on (webhook deliveries, email recipients; later inbound
// reports and domain checks). A queue is rows in the database; a worker leases due rows, attempts them
// within bounded lanes, writes outcomes in batches and gives back what it does not finish. What differs
// per queue is only its policy: which rows to claim (a QueueSource), how to attempt a job and what the
// attempt's outcome is.

/** A unit of work: one or more leased rows attempted together. */
export interface QueueJob {
  /** The job's concurrency lane: a webhook, a recipient's mail host, or one lane for the whole queue. */
  lane: string;
  /** The leased rows it holds; they are given back together. */
  rows: readonly string[];
}

/** The outcome of one attempt as written: whether the lease was still ours, and when a retry is due. */
export interface RecordResult {
  /** False when the lease had run out and another worker claimed the rows: the attempt changed nothing. */
  held: boolean;
  /** The job comes due again then (a retry): the worker looks for it then. */
  retryAt?: number | undefined;
}

/** Where a queue's jobs come from and where their outcomes go: the queue's SQL, behind its repository. */
export interface QueueSource<Job extends QueueJob, Outcome> {
  /**
   * Leases due jobs of any lane but `excludeLanes`, about `limit` of them (a job holding several rows counts
   * once), in the queue's order. More than a lane can hold may come back; the runtime gives those back.
   */
  claim(lease: Lease, request: { limit: number; excludeLanes: readonly string[] }): Promise<Job[]>;
  /**
   * Leases up to each lane's `limit` of its due jobs: how lanes known to have a backlog are topped up
   * without a look over the whole queue. A queue without it is only ever claimed from as a whole.
   */
  claimLanes?(lease: Lease, lanes: ReadonlyArray<{ lane: string; limit: number }>): Promise<Job[]>;
  /** Gives back these rows (or every row) the worker holds, unattempted. */
  release(workerId: string, rows?: readonly string[]): Promise<void>;
  /** When the next job not due yet becomes due (epoch ms), so an idle worker sleeps until then. */
  nextDueAt(now: Date): Promise<number | undefined>;
  /** Writes the outcomes in one transaction; one result per outcome, in order. */
  record(outcomes: ReadonlyArray<Attempted<Job, Outcome>>): Promise<RecordResult[]>;
}

/** An attempt's outcome together with the job it was for. */
export interface Attempted<Job, Outcome> {
  job: Job;
  outcome: Outcome;
}

export interface QueueSettings {
  /** Attempts in flight at once in this worker. */
  concurrency: number;
  /** Attempts in flight at once in one lane. */
  laneConcurrency: number;
  /** Jobs one lane may hold, in flight and waiting for a slot (so its slots never wait for a claim). */
  laneCapacity: number;
  /** Jobs the worker may hold overall. */
  capacity: number;
  /** While attempts are in flight, claim only once this many jobs fit (each claim is a commit). */
  claimBatch: number;
  /** An attempt ends within this (the policy enforces it); one starts only with this much lease left. */
  attemptTimeoutMs: number;
  /** How long a claim holds; past it, another worker takes the job. */
  leaseMs: number;
  /** The fallback poll when no wake-up comes (another process on SQLite, a lost LISTEN). */
  pollIntervalMs: number;
  /** How long stop() waits for attempts in flight before aborting them. */
  stopGraceMs: number;
  /** Outcomes are written at most this often, each write one transaction for all that finished. */
  outcomeWriteIntervalMs: number;
  /** Attempted jobs whose outcome is not written yet; past it, claims and attempts wait for the writes. */
  maxUnrecorded: number;
}

export interface QueueWorkerOptions<Job extends QueueJob, Outcome> {
  /** How the worker names itself in logs: `webhook worker`, `sending worker`. */
  name: string;
  /** Names this worker in `locked_by`; unique per worker. */
  workerId: string;
  source: QueueSource<Job, Outcome>;
  /** Makes the attempt; resolves to its outcome, or to nothing when `signal` (stopping) cut it short. */
  attempt(job: Job, signal: AbortSignal): Promise<Outcome | undefined>;
  /** After the last outcome is written and the leases are back: close connections. */
  close?(): Promise<void> | void;
  settings: QueueSettings;
  clock: Clock;
  logger: WorkerLogger;
  /** In-process wake-ups: the code that writes jobs notifies it. */
  notifier?: Notifier | undefined;
  /** PostgreSQL: LISTEN on the queue's channel for other processes' jobs. */
  database: Pick<DatabaseHandle, 'listen'>;
  channel: QueueChannel;
  /**
   * Where the worker says it is alive, and finds workers of its queue that stopped: their jobs are given
   * back within `deadAfterMs` of the last heartbeat, not when their leases run out.
   */
  heartbeats?: HeartbeatStore | undefined;
  deadAfterMs?: number | undefined;
}

/** What every queue worker is built from, besides the needs of its own policy. */
export interface QueueWorkerDeps {
  database: DatabaseHandle;
  clock: Clock;
  /** In-process wake-ups from the code that writes the queue's jobs. */
  notifier?: Notifier | undefined;
  logger?: WorkerLogger | undefined;
  /** Randomness for retry jitter (tests pin it). */
  random?: () => number;
  /** Names this worker in `locked_by`; unique per worker. */
  workerId?: string;
  /** A worker silent this long is dead (WORKER_DEAD_AFTER). */
  deadAfterMs?: number | undefined;
}

/** The optional parts of QueueWorkerDeps, filled in: silent logs, Math.random, a fresh id, the default poll. */
export function withQueueDefaults(deps: QueueWorkerDeps, settings: { pollIntervalMs?: number | undefined }) {
  return {
    logger: deps.logger ?? silentWorkerLogger,
    random: deps.random ?? Math.random,
    workerId: deps.workerId ?? newWorkerId(),
    pollIntervalMs: settings.pollIntervalMs ?? WORKER_POLL_INTERVAL_MS,
    heartbeats: createHeartbeatRepo(deps.database.db),
    deadAfterMs: deps.deadAfterMs ?? DEFAULTS.workerDeadAfterMs,
  };
}

export interface QueueWorker {
  readonly id: string;
  start(): Promise<void>;
  /** Stops claiming, waits for attempts in flight (bounded), writes their outcomes, then gives back the rest. */
  stop(): Promise<void>;
  /** Looks for due jobs now. */
  wake(): void;
  /**
   * Resolves once the worker has looked for due jobs after this call, found none, and holds nothing: what a
   * test waits for before saying that nothing happened.
   */
  whenIdle(): Promise<void>;
  /** Attempts running now (read at a metrics scrape; nothing is counted for it). */
  attemptsInFlight(): number;
  /**
   * When this worker last recorded its heartbeat (epoch ms on its clock); undefined before the first, or
   * once it stopped. What /readyz checks: a worker whose beats stopped landing cannot claim either.
   */
  lastHeartbeatAt(): number | undefined;
}

/** An attempt starts only with at least the attempt timeout plus this much of its lease left. */
const LEASE_MARGIN_MS = 1000;
/** The most outcomes one write takes. */
const OUTCOME_BATCH = 256;

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

interface HeldJob<Job> {
  job: Job;
  leaseEndsAt: number;
}

/** The worker's jobs of one lane: attempts in flight, and claimed ones waiting for a slot. */
interface Lane<Job> {
  inFlight: number;
  waiting: Array<HeldJob<Job>>;
  /** The lane may have more due jobs than this worker holds: top it up when it has room. */
  backlogged: boolean;
}

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
  const { clock, settings, source, logger, name, workerId } = options;
  if (settings.leaseMs <= settings.attemptTimeoutMs + LEASE_MARGIN_MS) {
    throw new Error(`${name}: the lease must be longer than the attempt timeout plus ${LEASE_MARGIN_MS} ms.`);
  }
  const topUpAt = Math.max(1, Math.floor(settings.laneCapacity / 2));
  const claimFloor = Math.max(settings.claimBatch, Math.floor(settings.capacity / 8));

  let abort = new AbortController();
  const lanes = new Map<string, Lane<Job>>();
  const inFlight = new Set<Promise<void>>();
  let waitingCount = 0;
  /** Rows of jobs this worker holds: waiting, in flight, or attempted and not yet written. */
  const heldRows = new Set<string>();
  /** Attempted jobs whose outcome is queued or being written: still leased to this worker. */
  let unrecorded = 0;
  /** Rows whose lease ran too short to start an attempt; given back at the next round. */
  let expiring: string[] = [];
  let running = false;
  let unsubscribe: (() => void) | undefined;
  /** When to look over the whole queue next; a wake-up from new work makes it now. */
  let nextDiscoveryAt = -Infinity;
  let lastDiscoveryAt = -Infinity;
  /** The most jobs one look asks for; shrinks while looks return more than the lanes can hold. */
  let discoveryLimit = settings.capacity;
  let rounds = 0;
  /** Set by a look that found nothing due; cleared when a round starts. */
  let foundNothing = false;
  let idleWaiters: Array<{ after: number; resolve: () => void }> = [];
  const deadAfterMs = options.deadAfterMs ?? DEFAULTS.workerDeadAfterMs;
  // Three heartbeats per dead-after period: a live worker is never seen silent for more than a third of it,
  // so one silent for two thirds is dead, and the others notice within the next third.
  const heartbeatEveryMs = deadAfterMs / 3;
  let nextHeartbeatAt = -Infinity;
  let lastHeartbeatAt: number | undefined;

  const outcomes = createBatcher<Attempted<Job, Outcome>>({
    maxBatch: OUTCOME_BATCH,
    minIntervalMs: settings.outcomeWriteIntervalMs,
    write: writeOutcomes,
    onWritten: () => {
      startWaiting();
      loop.wake();
    },
  });

  const loop = createWorkLoop({
    round,
    errorPauseMs: settings.pollIntervalMs,
    onRoundError(error) {
      logger.error({ err: error, worker: workerId }, `${name}: claiming jobs failed`);
    },
    listen:
      options.database.listen && ((onLost) => options.database.listen!(options.channel, newWork, onLost)),
    onListenProblem(error, lost) {
      logger.warn(
        { err: error },
        lost
          ? `${name}: LISTEN connection lost; polling until it is back`
          : `${name}: could not LISTEN; polling until it can`,
      );
    },
  });

  /** New jobs may be due in any lane: look over the whole queue at the next round. */
  function newWork(): void {
    nextDiscoveryAt = -Infinity;
    loop.wake();
  }

  const held = (lane: Lane<Job>) => lane.inFlight + lane.waiting.length;
  const heldCount = () => inFlight.size + waitingCount;

  async function round(): Promise<number> {
    rounds += 1;
    const thisRound = rounds;
    foundNothing = false;
    await heartbeat();
    if (expiring.length > 0) {
      const rows = expiring;
      expiring = [];
      await source.release(workerId, rows);
      // They are due again at once: claim them afresh, with a lease long enough for an attempt.
      nextDiscoveryAt = -Infinity;
    }
    await fill();
    const idle = heldCount() === 0 && unrecorded === 0;
    if (idle) {
      // Sleep until the next job is due (one whose time this worker's last look has already passed is
      // held elsewhere, or its lane is busy in another worker: the poll finds it).
      const dueAt = (await source.nextDueAt(clock.now())) ?? Infinity;
      if (dueAt > lastDiscoveryAt) nextDiscoveryAt = Math.min(nextDiscoveryAt, dueAt);
      if (foundNothing) {
        const ready = idleWaiters.filter((waiter) => waiter.after < thisRound);
        idleWaiters = idleWaiters.filter((waiter) => waiter.after >= thisRound);
        for (const waiter of ready) waiter.resolve();
      } else if (idleWaiters.length > 0) {
        // Someone waits for a look that finds nothing: the last one found work, so look again.
        nextDiscoveryAt = -Infinity;
      }
    }
    const until = Math.min(nextDiscoveryAt, options.heartbeats ? nextHeartbeatAt : Infinity);
    return Math.max(0, Math.min(settings.pollIntervalMs, until - clock.now().getTime()));
  }

  /** Says this worker is alive, and gives back the jobs of workers of its queue that are not. */
  async function heartbeat(): Promise<void> {
    const store = options.heartbeats;
    const now = clock.now();
    if (!store || now.getTime() < nextHeartbeatAt) return;
    nextHeartbeatAt = now.getTime() + heartbeatEveryMs;
    await store.beat(workerId, options.channel, now);
    lastHeartbeatAt = now.getTime();
    const dead = await store.dead(options.channel, new Date(now.getTime() - 2 * heartbeatEveryMs));
    if (dead.length === 0) return;
    for (const deadWorker of dead) await source.release(deadWorker);
    await store.forget(dead);
    logger.warn({ workers: dead }, `${name}: gave back the jobs of workers that stopped their heartbeat`);
    nextDiscoveryAt = -Infinity;
  }

  /** Whether a claim may be made with `room` jobs free overall. */
  function mayClaim(room: number): boolean {
    if (unrecorded >= settings.maxUnrecorded || room <= 0) return false;
    // A claim of a handful of jobs costs a statement and a commit, like a large one: while held jobs still
    // wait for their lanes' slots, let an eighth of the capacity come free and claim it in one go (with a
    // fan-out backlog past the capacity, each finished delivery otherwise paid for a claim of one).
    return waitingCount === 0 || room >= claimFloor;
  }

  /**
   * How many jobs to top a lane up by now, with `room` free overall: none while it has no more work or no
   * room, nor (with claimLanes) before half its capacity, or all the room left, is free.
   */
  function topUpLimit(lane: Lane<Job>, room: number): number {
    const limit = Math.min(settings.laneCapacity - held(lane), room);
    if (!lane.backlogged || limit <= 0) return 0;
    if (source.claimLanes && limit < Math.min(topUpAt, room)) return 0;
    return limit;
  }

  /**
   * Whether a round has anything to do once an attempt has ended: every job held has started (a look may
   * find more, or the worker is now idle), or a lane can be topped up. The rest a round does comes due on
   * its own timer or wakes it itself. A round woken by every finished webhook delivery, to find nothing
   * to do, cost about as much as the rest of the delivery's bookkeeping.
   */
  function roundWanted(): boolean {
    if (waitingCount === 0) return true;
    const room = settings.capacity - heldCount();
    if (!mayClaim(room)) return false;
    for (const lane of lanes.values()) if (topUpLimit(lane, room) > 0) return true;
    return false;
  }

  /** Claims until every lane with work holds what it may, or nothing more is due. */
  async function fill(): Promise<void> {
    while (running) {
      let room = settings.capacity - heldCount();
      if (!mayClaim(room)) return;
      const now = clock.now();
      const lease: Lease = { workerId, now, until: new Date(now.getTime() + settings.leaseMs) };

      const topUps: Array<{ lane: string; limit: number }> = [];
      for (const [key, lane] of lanes) {
        const limit = topUpLimit(lane, room);
        if (limit === 0) continue;
        if (!source.claimLanes) {
          // A lane with more work has room again: only a look over the whole queue can find its jobs.
          lane.backlogged = false;
          nextDiscoveryAt = -Infinity;
          continue;
        }
        topUps.push({ lane: key, limit });
        room -= limit;
      }
      if (source.claimLanes) {
        if (topUps.length > 0) {
          const claimed = await source.claimLanes(lease, topUps);
          const got = new Map<string, number>();
          for (const job of claimed) got.set(job.lane, (got.get(job.lane) ?? 0) + 1);
          for (const { lane, limit } of topUps) {
            const state = lanes.get(lane);
            if (state && (got.get(lane) ?? 0) < limit) state.backlogged = false;
          }
          await accept(claimed, lease);
          continue;
        }
      }

      if (now.getTime() < nextDiscoveryAt) return;
      if (inFlight.size > 0 && room < settings.claimBatch) return;
      lastDiscoveryAt = now.getTime();
      nextDiscoveryAt = lastDiscoveryAt + settings.pollIntervalMs;
      // Lanes without room, or topped up on their own, are left out: the look finds the others' work.
      const excludeLanes: string[] = [];
      for (const [key, lane] of lanes) {
        const full = held(lane) >= settings.laneCapacity;
        if (full) lane.backlogged = true;
        if (full || (lane.backlogged && source.claimLanes)) excludeLanes.push(key);
      }
      const limit = Math.min(room, discoveryLimit);
      const claimed = await source.claim(lease, { limit, excludeLanes });
      if (claimed.length === 0) foundNothing = true;
      const { kept, excess } = await accept(claimed, lease);
      // Ask next time for about as many as this look could use: giving rows back costs two writes each.
      discoveryLimit = excess > 0 ? Math.max(settings.laneCapacity, kept) : settings.capacity;
      // A full look may have left more: look again at once.
      if (claimed.length >= limit) nextDiscoveryAt = -Infinity;
      else if (excess === 0) return;
    }
  }

  /**
   * Takes claimed jobs into their lanes and starts what the slots allow. Jobs past a lane's or the worker's
   * capacity go back at once (holding them would keep them from other workers); their lane is marked as
   * having more, to be topped up as it makes room.
   */
  async function accept(claimed: readonly Job[], lease: Lease): Promise<{ kept: number; excess: number }> {
    const giveBack: string[] = [];
    let kept = 0;
    let excess = 0;
    for (const job of claimed) {
      // Rows this worker already holds (its own attempt outlived its lease, or its outcome is not written
      // yet) were claimed again: the attempt under way stands for them; any others go back.
      if (job.rows.some((row) => heldRows.has(row))) {
        giveBack.push(...job.rows.filter((row) => !heldRows.has(row)));
        continue;
      }
      let lane = lanes.get(job.lane);
      if (!lane) {
        lane = { inFlight: 0, waiting: [], backlogged: false };
        lanes.set(job.lane, lane);
      }
      if (held(lane) >= settings.laneCapacity || heldCount() >= settings.capacity) {
        lane.backlogged = true;
        giveBack.push(...job.rows);
        excess += 1;
        continue;
      }
      for (const row of job.rows) heldRows.add(row);
      lane.waiting.push({ job, leaseEndsAt: lease.until.getTime() });
      waitingCount += 1;
      kept += 1;
    }
    startWaiting();
    if (giveBack.length > 0) await source.release(workerId, giveBack);
    return { kept, excess };
  }

  /** Starts waiting jobs while their lane's slots and the overall limit allow. */
  function startWaiting(): void {
    for (const [key, lane] of lanes) {
      // Unrecorded outcomes are what a crash sends again: past maxUnrecorded, attempts wait for the writes.
      while (
        lane.waiting.length > 0 &&
        lane.inFlight < settings.laneConcurrency &&
        inFlight.size < settings.concurrency &&
        unrecorded < settings.maxUnrecorded
      ) {
        const { job, leaseEndsAt } = lane.waiting.shift()!;
        waitingCount -= 1;
        // An attempt must be able to end, and its outcome be written, while the lease still holds.
        if (leaseEndsAt - clock.now().getTime() < settings.attemptTimeoutMs + LEASE_MARGIN_MS) {
          forget(job);
          expiring.push(...job.rows);
          loop.wake();
          continue;
        }
        dispatch(lane, job);
      }
      if (held(lane) === 0 && !lane.backlogged) lanes.delete(key);
    }
  }

  const forget = (job: Job) => {
    for (const row of job.rows) heldRows.delete(row);
  };

  function dispatch(lane: Lane<Job>, job: Job): void {
    lane.inFlight += 1;
    const done: Promise<void> = options
      .attempt(job, abort.signal)
      .then((outcome) => {
        if (outcome === undefined) {
          // Cut short by stop(): no verdict; stop() gives the lease back for a retry.
          forget(job);
          return;
        }
        unrecorded += 1;
        outcomes.add({ job, outcome });
      })
      .catch((error: unknown) => {
        // The lease runs out and another claim retries it: at least once, never lost.
        forget(job);
        logger.error({ err: error, rows: job.rows }, `${name}: an attempt failed`);
      })
      .finally(() => {
        inFlight.delete(done);
        lane.inFlight -= 1;
        startWaiting();
        if (roundWanted()) loop.wake();
      });
    inFlight.add(done);
  }

  /** Writes a batch of outcomes; if the batch fails, each on its own, so one bad outcome sinks no other. */
  async function writeOutcomes(batch: Array<Attempted<Job, Outcome>>): Promise<void> {
    let results: Array<RecordResult | undefined>;
    const report = (error: unknown, item: Attempted<Job, Outcome>) =>
      // The lease runs out and another claim retries it: at least once, never lost.
      logger.error({ err: error, rows: item.job.rows }, `${name}: recording an attempt failed`);
    try {
      results = await source.record(batch);
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
      unrecorded -= 1;
      forget(item.job);
      const result = results[index];
      if (!result) continue;
      if (!result.held) {
        logger.warn(
          { rows: item.job.rows, worker: workerId },
          `${name}: lease lost before the attempt was recorded; another worker owns the job`,
        );
      } else if (result.retryAt !== undefined) {
        // A retry is due then: look for it (its lane may have no other work this worker knows of).
        nextDiscoveryAt = Math.min(nextDiscoveryAt, result.retryAt);
      }
    }
  }

  return {
    id: workerId,
    wake: newWork,
    attemptsInFlight: () => inFlight.size,
    lastHeartbeatAt: () => lastHeartbeatAt,

    whenIdle() {
      return new Promise<void>((resolve) => {
        idleWaiters.push({ after: rounds, resolve });
        newWork();
      });
    },

    async start() {
      if (running) return;
      running = true;
      if (abort.signal.aborted) abort = new AbortController();
      nextDiscoveryAt = -Infinity;
      discoveryLimit = settings.capacity;
      nextHeartbeatAt = -Infinity;
      unsubscribe = options.notifier?.subscribe(newWork);
      await loop.start();
    },

    async stop() {
      if (!running) return;
      running = false;
      lastHeartbeatAt = undefined;
      unsubscribe?.();
      await loop.stop();
      // Jobs waiting for a slot are not started; the release below gives them back.
      for (const lane of lanes.values()) {
        for (const { job } of lane.waiting) forget(job);
        lane.waiting = [];
      }
      waitingCount = 0;

      const settled = Promise.allSettled([...inFlight]);
      if (!(await settlesWithin(settled, settings.stopGraceMs))) {
        abort.abort();
        // Aborted attempts return at once; only a database that does not answer keeps one longer.
        await settlesWithin(settled, 1000);
      }
      // The outcomes go in before the leases go back: released first, a finished job would run again.
      await settlesWithin(outcomes.drain(), settings.stopGraceMs);
      lanes.clear();
      expiring = [];
      await source.release(workerId).catch((error: unknown) => {
        logger.error({ err: error }, `${name}: could not give back its leases; they expire`);
      });
      await options.heartbeats?.forget([workerId]).catch((error: unknown) => {
        logger.error({ err: error }, `${name}: could not remove its heartbeat; the others will`);
      });
      abort.abort();
      await options.close?.();
    },
  };
}
