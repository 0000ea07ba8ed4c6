// What a queue gives the runtime (a QueueSource: its SQL; an attempt; its settings) and what it gets back (a
// QueueWorker). Read with runtime.ts, which builds the worker from these.
import { DEFAULTS, WORKER_POLL_INTERVAL_MS } from '../config.ts';
import type { DatabaseHandle } from '../db/connection.ts';
import type { Clock } from '../lib/clock.ts';
import { silentWorkerLogger, type WorkerLogger } from '../lib/worker-logger.ts';
import { createHeartbeatRepo, type HeartbeatStore } from './heartbeats.repo.ts';
import { type Lease, newWorkerId } from './lease.ts';
import type { Notifier, QueueChannel } from './notifier.ts';

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

/**
 * A look over the whole queue: due jobs of any lane but `excludeLanes`, about `limit` of them; of each lane
 * in `laneLimits`, at most its `limit` (a source that cannot say so in its claim may take more: the runtime
 * gives the excess back).
 */
export interface ClaimRequest {
  limit: number;
  excludeLanes: readonly string[];
  laneLimits?: ReadonlyArray<{ lane: string; limit: number }> | undefined;
}

/** Where a queue's jobs come from and where their outcomes go: the queue's SQL, its adapter (`<name>.queue.ts`). */
export interface QueueSource<Job extends QueueJob, Outcome> {
  /**
   * Leases due jobs of any lane but `excludeLanes`, about `limit` of them (a job holding several rows counts
   * once), in the queue's order. More than a lane can hold may come back; the runtime gives those back.
   */
  claim(lease: Lease, request: ClaimRequest): Promise<Job[]>;
  /**
   * Leases up to each lane's `limit` of its due jobs: how lanes known to have a backlog are topped up
   * without a look over the whole queue. A queue without it is only ever claimed from as a whole.
   */
  claimLanes?(lease: Lease, lanes: ReadonlyArray<{ lane: string; limit: number }>): Promise<Job[]>;
  /**
   * Its claim takes no more of a lane in ClaimRequest.laneLimits than that lane's limit: a look then asks of
   * each lane the worker holds jobs of only what that lane has room for (claims.ts startableLimits).
   */
  limitsLanes?: boolean;
  /**
   * Gives back these rows (or every row) the worker holds, unattempted. What it answers (releaseLeases: the
   * ids it gave back) is the adapter's; the runtime does not read it.
   */
  release(workerId: string, rows?: readonly string[]): Promise<unknown>;
  /** When the next job not due yet becomes due (epoch ms), so an idle worker sleeps until then. */
  nextDueAt(now: Date): Promise<number | undefined>;
  /** Writes the outcomes in one transaction; one result per outcome, in order. */
  record(outcomes: ReadonlyArray<Attempted<Job, Outcome>>): Promise<RecordResult[]>;
  /**
   * Writes the outcomes as record() does and, in the same transaction, makes the look `next` as claim()
   * would (the sending queue on PostgreSQL: one statement and one commit for both, where there were two).
   * `claimed` is undefined when it made no claim: the worker then claims on its own. With it, a worker
   * leaves its looks over the queue to its outcomes' writes while it has outcomes to write.
   */
  recordAndClaim?(
    outcomes: ReadonlyArray<Attempted<Job, Outcome>>,
    lease: Lease,
    next: ClaimRequest,
  ): Promise<{ results: RecordResult[]; claimed?: Job[] | undefined }>;
  /**
   * Writes the outcomes as record() does and, in the same transaction, tops up `lanes` as claimLanes() would
   * (the deliveries queue: one commit, and on PostgreSQL one statement, for both). `claimed` is undefined when
   * it made no claim. Unlike recordAndClaim this takes nothing from the rounds: a lane half empty is still
   * topped up at once on its own (claims.ts fill); the outcomes' writes fill the lanes up as they pass, so that
   * is needed less often.
   */
  recordAndClaimLanes?(
    outcomes: ReadonlyArray<Attempted<Job, Outcome>>,
    lease: Lease,
    lanes: ReadonlyArray<{ lane: string; limit: number }>,
  ): Promise<{ results: RecordResult[]; claimed?: Job[] | undefined }>;
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

/**
 * Per-lane pacing a queue may ask for (the sending queue's destinations, src/modules/destinations): when a
 * lane may start its next attempt. A lane that must wait long gives its jobs back and is left out of claims
 * until then, so it holds no slot another lane could use.
 */
export interface LaneShaping {
  /**
   * When (epoch ms) the lane may start its next attempt: now or earlier means at once; Infinity when one of
   * the attempts in flight ends (then the lane's jobs keep waiting).
   */
  startAt(lane: string, now: number): number;
  /** An attempt of the lane starts now. */
  started(lane: string, now: number): void;
  /**
   * The lanes whose pace lets them start only a few attempts within `withinMs` from now, and how many: a look
   * claims no more of theirs than that, so it takes none it would give back for the wait (a paced lane's
   * jobs claimed and given back at each of its starts were most of a worker's claim work beside it).
   */
  startable?(now: number, withinMs: number): Iterable<[lane: string, count: number]>;
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
  shaping?: LaneShaping | undefined;
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

/** What withQueueDefaults gives a worker: its id, logger, poll and heartbeats. */
export type QueueDefaults = ReturnType<typeof withQueueDefaults>;

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
