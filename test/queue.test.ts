import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { sql } from 'kysely';
import { loadConfig } from '../src/config.ts';
import type { Engine } from '../src/db/connection.ts';
import { inTransaction } from '../src/db/transaction.ts';
import type { Clock } from '../src/lib/clock.ts';
import type { Lease } from '../src/queue/lease.ts';
import { silentWorkerLogger } from '../src/lib/worker-logger.ts';
import { createDeliveryQueue, type DeliveryOutcome } from '../src/modules/deliveries/deliveries.queue.ts';
import {
  createDeliveryQueueSource,
  type DeliveryJob,
} from '../src/modules/deliveries/deliveries.queue-source.ts';
import {
  createInboundQueueSource,
  type InboundJob,
  type InboundOutcome,
} from '../src/modules/inbound/inbound.queue.ts';
import type { ReceivedIntake } from '../src/modules/inbound/received-intake.ts';
import type { SendJob, SendOutcome } from '../src/modules/sending/sending.queue.ts';
import { createSendingQueueSource } from '../src/modules/sending/sending.queue-source.ts';
import { noMetrics } from '../src/modules/metrics/instruments.ts';
import { createHeartbeatRepo } from '../src/queue/heartbeats.repo.ts';
import { type Notifier, type QueueChannel, QUEUE_CHANNELS } from '../src/queue/notifier.ts';
import {
  type Attempted,
  createQueueWorker,
  type LaneShaping,
  type QueueJob,
  type QueueSettings,
  type QueueSource,
  type QueueWorker,
  type RecordResult,
} from '../src/queue/runtime.ts';
import type { Services } from '../src/services.ts';
import {
  ALL_ENGINES,
  createTestDatabase,
  createTestServices,
  engineSkip,
  type TestDatabase,
} from './helpers/app.ts';
import { commitFailure } from './helpers/failing-commit.ts';

// The queue runtime held to the real queues: the webhook deliveries, the sending queue (email recipients) and
// the inbound queue (received messages), claimed, topped up, given back and recorded through the very
// QueueSource each worker runs on (its adapter, `<name>.queue.ts`), on both engines. A job is a delivery to its
// lane's webhook (one event each), an email to one recipient at its lane's domain, or a received message (one
// lane); a millisecond apart so the queue's order is theirs. Time is an injected clock the test moves by hand
// (the leases are compared with it in SQL), attempts end when the test says, and what a test reads back (done,
// held by whom) is the rows. The only failure made on purpose, a COMMIT that fails, is the database's own (a
// statement observer throws instead of running it), not a model of the queue.

type Job = QueueJob;
type Outcome = unknown;
type QueueKind = 'deliveries' | 'sending' | 'inbound';

/** A clock the test moves by hand. */
function manualClock(start = Date.parse('2026-11-22T10:00:00.000Z')) {
  let now = start;
  const clock: Clock & { advance(ms: number): void } = {
    now: () => new Date(now),
    advance: (ms) => {
      now += ms;
    },
  };
  return clock;
}

/** Queues that a test opened, closed after it (workers first, then the database). */
const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const queue of opened.splice(0).reverse()) await queue.close();
});

/** What each queue's rows are, and how a test adds and finishes its jobs. */
interface QueueUnderTest {
  channel: QueueChannel;
  notifier: Notifier;
  /** The worker's own QueueSource on this queue, for `workerId` (the inbound one writes under its leases). */
  sourceFor(workerId: string): QueueSource<Job, Outcome>;
  /** Adds a job in `lane`; returns its rows. */
  add(lane: string): Promise<string[]>;
  /** The table, and which of its rows are still to do (in the queue, leased or not). */
  table: 'deliveries' | 'email_recipients' | 'inbound_messages';
  waiting: { column: 'status' | 'ready_seq'; pending: boolean };
  /** The rows whose attempt was recorded. */
  doneRows(): Promise<string[]>;
  /** A successful attempt's outcome, as the queue's worker writes one. */
  succeeded(job: Job, workerId: string, clock: Clock): Outcome;
}

/** The webhook deliveries: a webhook per lane, a delivery per job (a webhook test send: one event). */
async function deliveriesUnderTest(
  engine: Engine,
  database: TestDatabase,
  services: Services,
  projectId: string,
): Promise<QueueUnderTest> {
  const webhookOf = new Map<string, string>();
  const real = createDeliveryQueueSource({
    queue: createDeliveryQueue(database.handle.db, engine, services.repositories.webhooks),
    logger: silentWorkerLogger,
    metrics: noMetrics,
  });
  return {
    channel: QUEUE_CHANNELS.deliveries,
    notifier: services.notifiers.delivery,
    sourceFor: () => real as QueueSource<Job, Outcome>,
    async add(lane) {
      let webhookId = webhookOf.get(lane);
      if (!webhookId) {
        const record = await services.webhooks.prepareCreate(projectId, {
          url: `https://lane-${lane}.example/hooks`,
          events: ['email.delivered'],
        });
        await inTransaction(database.handle.db, (transaction) =>
          services.webhooks.create(transaction, record),
        );
        webhookId = record.id;
        webhookOf.set(lane, webhookId);
      }
      const event = await services.events.emit(projectId, 'email.sent', {}, { webhookId });
      assert.equal(event.delivery_ids.length, 1);
      return event.delivery_ids;
    },
    table: 'deliveries',
    waiting: { column: 'status', pending: true },
    doneRows: async () =>
      (
        await database.handle.db
          .selectFrom('deliveries')
          .select('id')
          .where('status', '=', 'succeeded')
          .execute()
      ).map((row) => row.id),
    succeeded(job, workerId, clock): DeliveryOutcome {
      const now = clock.now().toISOString();
      return {
        delivery: job as DeliveryJob,
        workerId,
        now,
        attempt: { attemptedAt: now, statusCode: 200, durationMs: 1, error: null, responseExcerpt: null },
        status: 'succeeded',
        lastError: null,
        health: { ok: true },
      };
    },
  };
}

/** The sending queue: an email to one recipient at its lane's domain per job (each domain a lane). */
function sendingUnderTest(
  engine: Engine,
  database: TestDatabase,
  services: Services,
  projectId: string,
  clock: Clock,
): QueueUnderTest {
  const real = createSendingQueueSource({
    db: database.handle.db,
    engine,
    events: services.events,
    repositories: services.repositories,
    now: () => clock.now().toISOString(),
    perDomain: true,
    recipientPerJob: false,
    pollIntervalMs: SETTINGS.pollIntervalMs,
  });
  const db = database.handle.db;
  return {
    channel: QUEUE_CHANNELS.sending,
    notifier: services.notifiers.send,
    sourceFor: () => real as QueueSource<Job, Outcome>,
    async add(lane) {
      const plan = await services.emails.prepareSend(
        projectId,
        { from: 'queue@example.com', to: [`someone@lane-${lane}.example`], subject: 'Queued', text: 'Hello' },
        { domainId: null },
      );
      await services.emails.accept(plan);
      const rows = await db
        .selectFrom('email_recipients')
        .select('id')
        .where('email_id', '=', plan.emails[0]!.id)
        .execute();
      return rows.map((row) => row.id);
    },
    table: 'email_recipients',
    waiting: { column: 'ready_seq', pending: false },
    doneRows: async () =>
      (await db.selectFrom('email_recipients').select('id').where('status', '=', 'sent').execute()).map(
        (row) => row.id,
      ),
    succeeded(job, workerId, clock): SendOutcome {
      const { email, recipients } = job as SendJob;
      const now = clock.now().toISOString();
      return {
        workerId,
        emailId: email.id,
        projectId: email.projectId,
        recipientCount: email.recipientCount,
        attemptedAt: now,
        now,
        updates: recipients.map((row) => ({
          id: row.id,
          status: 'sent',
          response: '250 accepted',
          responseCode: 250,
          email,
          address: row.address,
          data: { smtp_response: '250 accepted' },
          outcomes: ['sent'],
        })),
      };
    },
  };
}

/** The inbound queue: a received message per job, all in its one lane. */
function inboundUnderTest(
  engine: Engine,
  database: TestDatabase,
  services: Services,
  clock: Clock,
): QueueUnderTest {
  const db = database.handle.db;
  const intake: Pick<ReceivedIntake, 'write'> = {
    write: () => Promise.reject(new Error('these messages are reports, not received mail')),
  };
  return {
    channel: QUEUE_CHANNELS.inbound,
    notifier: services.notifiers.inbound,
    sourceFor: (workerId) =>
      createInboundQueueSource({
        db,
        engine,
        clock,
        workerId,
        events: services.events,
        recipients: services.repositories.recipients,
        suppressions: services.repositories.suppressions,
        intake,
        metrics: noMetrics,
      }) as QueueSource<Job, Outcome>,
    async add() {
      const id = await services.inbound.store({
        receivedAt: clock.now().toISOString(),
        mailFrom: 'mailer-daemon@example.net',
        rcptTo: ['bounces@example.com'],
        remoteAddress: null,
        raw: Buffer.from('Subject: a report\r\n\r\nNothing to say.\r\n'),
      });
      return [id];
    },
    table: 'inbound_messages',
    waiting: { column: 'status', pending: true },
    doneRows: async () =>
      (await db.selectFrom('inbound_messages').select('id').where('status', '<>', 'pending').execute()).map(
        (row) => row.id,
      ),
    succeeded: (job): InboundOutcome => ({
      kind: 'unreadable',
      subject: null,
      status: 'unreadable',
      detail: `read ${(job as InboundJob).message.id}`,
      effects: [],
    }),
  };
}

/**
 * `kind`'s queue on a fresh database of `engine`, with a job per entry of `jobs` in its lane, due in the jobs'
 * order. Each worker's source is its queue's own, with a log of the calls the runtime made (by job name);
 * `claimLanes: false` leaves out the deliveries' per-lane top-up, so the runtime's other path (claiming from
 * the whole queue only, as the sending and inbound queues do) runs on the same SQL.
 */
async function openQueue(
  kind: QueueKind,
  engine: Engine,
  jobs: Array<{ id: string; lane: string }>,
  options: { claimLanes?: boolean } = {},
) {
  const failingCommit = commitFailure();
  const database: TestDatabase = await createTestDatabase(engine, {
    observe: (sql) => failingCommit.check(sql),
  });
  // A claim must never return a row whose lease still holds (by the lease's own clock), whoever holds it:
  // each claim is checked against the table as it stood just before. A violation rejects `broken`, which
  // every wait of the tests races against (a worker that claims its own rows again can spin without ever
  // yielding to a timer on SQLite, so a test timeout would never fire), and the claim throws.
  const violations: string[] = [];
  let breakTests!: (error: Error) => void;
  const broken = new Promise<never>((_resolve, reject) => (breakTests = reject));
  broken.catch(() => {});
  /** `promise`, unless a claim returned a row leased to someone first: then the double claim. */
  const watch = <T>(promise: Promise<T>): Promise<T> => Promise.race([promise, broken]);
  const clock = manualClock();
  // The sending queue's rows accepted for direct delivery, as its lanes are (perDomain): migration 0047.
  const services = createTestServices(
    database.handle,
    { mailTransport: 'direct' },
    { clock, resolver: async () => ['93.184.216.34'] },
  );
  const workers: QueueWorker[] = [];
  const queue = {
    clock,
    database,
    services,
    log: [] as string[],
    workers,
    close: async () => {
      await Promise.all(workers.map((worker) => worker.stop()));
      await services.close();
      await database.drop();
      assert.deepEqual(violations, [], 'no claim returned a row whose lease held');
    },
  };
  opened.push(queue);

  const project = await services.projects.createProject('Queue');
  const under =
    kind === 'deliveries'
      ? await deliveriesUnderTest(engine, database, services, project.id)
      : kind === 'sending'
        ? sendingUnderTest(engine, database, services, project.id, clock)
        : inboundUnderTest(engine, database, services, clock);
  const nameOf = new Map<string, string>();
  /** Queues the job: a row (or rows) in its lane. */
  const add = async (job: { id: string; lane: string }) => {
    for (const row of await under.add(job.lane)) nameOf.set(row, job.id);
    clock.advance(1);
  };
  for (const job of jobs) await add(job);

  const named = (rows: readonly string[]) => rows.map((row) => nameOf.get(row) ?? row).join(',');
  const log = queue.log;
  const db = database.handle.db;
  /** The rows still to do, as SQL on the queue's table. */
  const stillToDo = () =>
    under.waiting.pending
      ? sql<boolean>`status = 'pending'`
      : sql<boolean>`${sql.ref(under.waiting.column)} IS NOT NULL`;

  const claimWaiters: Array<() => void> = [];
  const checkedClaim = async (lease: Lease, claim: () => Promise<Job[]>): Promise<Job[]> => {
    await new Promise((resolve) => setImmediate(resolve)); // see HANG_GUARD
    const live = await db
      .selectFrom(under.table)
      .select(['id', 'locked_by', 'locked_until'])
      .where(stillToDo())
      .where('locked_until', '>=', lease.now.toISOString())
      .execute();
    const claimed = await claim();
    log.push(`claim ${lease.workerId} ${named(claimed.flatMap((job) => job.rows))}`);
    for (const resolve of claimWaiters.splice(0)) resolve();
    const leased = new Map(live.map((row) => [row.id, row]));
    const doubled = claimed
      .flatMap((job) => job.rows)
      .filter((row) => leased.has(row))
      .map((row) => {
        const held = leased.get(row)!;
        return `${lease.workerId} claimed ${named([row])}, leased to ${held.locked_by} until ${held.locked_until} (now ${lease.now.toISOString()})`;
      });
    if (doubled.length > 0) {
      violations.push(...doubled);
      const more = doubled.length > 3 ? `; and ${doubled.length - 3} more` : '';
      const error = new Error(`double claim: ${doubled.slice(0, 3).join('; ')}${more}`);
      breakTests(error);
      throw error;
    }
    return claimed;
  };

  /** Releases under way: a claim that brought more than a lane holds gives the rest back after it starts. */
  const inFlight = new Set<Promise<void>>();

  /** The worker's source, its calls logged and its claims checked. */
  const sourceFor = (workerId: string): QueueSource<Job, Outcome> => {
    const real = under.sourceFor(workerId);
    const source: QueueSource<Job, Outcome> = {
      claim: (lease, request) => checkedClaim(lease, () => real.claim(lease, request)),
      release(releasing, rows) {
        const released = real.release(releasing, rows).then(() => {
          log.push(`release ${releasing} ${rows ? named(rows) : 'all'}`);
        });
        inFlight.add(released);
        void released.finally(() => inFlight.delete(released)).catch(() => {});
        return released;
      },
      nextDueAt: (now) => real.nextDueAt(now),
      limitsLanes: real.limitsLanes,
      async record(attempted) {
        const rows = named(attempted.flatMap(({ job }) => job.rows));
        try {
          const results = await real.record(attempted);
          log.push(`record ${rows}`);
          return results;
        } catch (error) {
          log.push(`record ${rows} failed`);
          throw error;
        }
      },
    };
    if (options.claimLanes !== false && real.claimLanes) {
      const claimLanes = real.claimLanes.bind(real);
      source.claimLanes = (lease, lanes) => checkedClaim(lease, () => claimLanes(lease, lanes));
    }
    /** An outcomes' write that claims too: logged as record() is, its claim checked as every claim is. */
    const checkedWrite = async (
      attempted: ReadonlyArray<Attempted<Job, Outcome>>,
      lease: Lease,
      write: () => Promise<{ results: RecordResult[]; claimed?: Job[] | undefined }>,
    ) => {
      let written: Awaited<ReturnType<typeof write>> | undefined;
      const rows = named(attempted.flatMap(({ job }) => job.rows));
      const claimed = await checkedClaim(lease, async () => {
        try {
          written = await write();
        } catch (error) {
          log.push(`record ${rows} failed`);
          throw error;
        }
        log.push(`record ${rows}`);
        return written.claimed ?? [];
      });
      return { results: written!.results, claimed: written!.claimed && claimed };
    };
    if (real.recordAndClaim) {
      // PostgreSQL's sending queue: the look made by the outcomes' statement (it must never take a row it
      // records, which this worker still holds).
      const recordAndClaim = real.recordAndClaim.bind(real);
      source.recordAndClaim = (attempted, lease, next) =>
        checkedWrite(attempted, lease, () => recordAndClaim(attempted, lease, next));
    }
    if (options.claimLanes !== false && real.recordAndClaimLanes) {
      // The deliveries queue: lanes topped up with the outcomes' write.
      const recordAndClaimLanes = real.recordAndClaimLanes.bind(real);
      source.recordAndClaimLanes = (attempted, lease, lanes) =>
        checkedWrite(attempted, lease, () => recordAndClaimLanes(attempted, lease, lanes));
    }
    return source;
  };

  const names = (rows: ReadonlyArray<{ id: string }>) =>
    rows.map((row) => nameOf.get(row.id) ?? row.id).sort();

  return {
    ...queue,
    sourceFor,
    /** The source of a worker that is not running (to claim as a dead one did). */
    source: sourceFor('ghost'),
    channel: under.channel,
    notifier: under.notifier,
    succeeded: under.succeeded,
    add,
    /** The name a test gave the job holding this row. */
    name: (row: string) => nameOf.get(row),
    /** The next COMMIT fails (as a lost connection would fail it), and its transaction rolls back. */
    failNextCommit: () => failingCommit.arm(),
    done: async () => names((await under.doneRows()).map((id) => ({ id }))),
    heldBy: async (workerId: string) =>
      names(
        await db
          .selectFrom(under.table)
          .select('id')
          .where('locked_by', '=', workerId)
          .where(stillToDo())
          .execute(),
      ),
    watch,
    /** Resolves once the releases under way have been written. */
    released: () => watch(Promise.allSettled([...inFlight]).then(() => undefined)),
    violations,
    /** Resolves once the next claim (of any worker) has come back. */
    nextClaim: () => watch(new Promise<void>((resolve) => claimWaiters.push(resolve))),
    /** The workers the heartbeat table knows. */
    beating: async () =>
      (await db.selectFrom('queue_workers').select('id').execute()).map((row) => row.id).sort(),
  };
}

type Queue = Awaited<ReturnType<typeof openQueue>>;

/** Attempts that end when the test says, with a record of what ran at once. */
function controlledAttempts(queue: Pick<Queue, 'clock' | 'watch' | 'succeeded'>) {
  const { clock } = queue;
  const running = new Map<string, { job: Job; finish: () => void; signal: AbortSignal }>();
  const perLane = new Map<string, number>();
  let maxOverall = 0;
  const maxPerLane = new Map<string, number>();
  let waiters: Array<{ count: number; resolve: () => void }> = [];
  let started = 0;

  const check = () => {
    const ready = waiters.filter((waiter) => started >= waiter.count);
    waiters = waiters.filter((waiter) => started < waiter.count);
    for (const waiter of ready) waiter.resolve();
  };

  return {
    attempt(workerId: string) {
      return (job: Job, signal: AbortSignal) =>
        new Promise<Outcome | undefined>((resolve) => {
          const key = job.rows.join(',');
          started += 1;
          perLane.set(job.lane, (perLane.get(job.lane) ?? 0) + 1);
          maxPerLane.set(job.lane, Math.max(maxPerLane.get(job.lane) ?? 0, perLane.get(job.lane)!));
          maxOverall = Math.max(maxOverall, running.size + 1);
          const end = (outcome: Outcome | undefined) => {
            running.delete(key);
            perLane.set(job.lane, perLane.get(job.lane)! - 1);
            resolve(outcome);
          };
          running.set(key, { job, signal, finish: () => end(queue.succeeded(job, workerId, clock)) });
          signal.addEventListener('abort', () => end(undefined), { once: true });
          check();
        });
    },
    running,
    /** Resolves once `count` attempts have started in all. */
    started: (count: number) =>
      queue.watch(
        new Promise<void>((resolve) => {
          waiters.push({ count, resolve });
          check();
        }),
      ),
    /** Attempts started so far, of the same job too. */
    get count() {
      return started;
    },
    finishAll() {
      for (const entry of [...running.values()]) entry.finish();
    },
    get maxOverall() {
      return maxOverall;
    },
    maxPerLane,
  };
}

const SETTINGS: QueueSettings = {
  concurrency: 4,
  laneConcurrency: 2,
  laneCapacity: 4,
  capacity: 8,
  claimBatch: 1,
  attemptTimeoutMs: 1000,
  leaseMs: 5000,
  pollIntervalMs: 60_000,
  stopGraceMs: 10_000,
  outcomeWriteIntervalMs: 0,
  maxUnrecorded: 8,
};

/** A worker on the queue as a process runs one: its wake-ups, LISTEN (PostgreSQL) and heartbeats included. */
function worker(options: {
  queue: Queue;
  attempts: ReturnType<typeof controlledAttempts>;
  workerId?: string;
  settings?: Partial<QueueSettings>;
  deadAfterMs?: number;
  shaping?: LaneShaping;
  /** The source as the worker sees it (a test's own view of the queue's). */
  source?: (source: QueueSource<Job, Outcome>) => QueueSource<Job, Outcome>;
}): QueueWorker {
  const { queue } = options;
  const workerId = options.workerId ?? 'worker-a';
  const source = queue.sourceFor(workerId);
  const created = createQueueWorker<Job, Outcome>({
    name: 'test worker',
    workerId,
    source: options.source ? options.source(source) : source,
    attempt: options.attempts.attempt(workerId),
    settings: { ...SETTINGS, ...options.settings },
    clock: queue.clock,
    logger: silentWorkerLogger,
    database: queue.database.handle,
    channel: queue.channel,
    notifier: queue.notifier,
    heartbeats: createHeartbeatRepo(queue.database.handle.db),
    deadAfterMs: options.deadAfterMs,
    shaping: options.shaping,
  });
  queue.workers.push(created);
  return { ...created, whenIdle: () => queue.watch(created.whenIdle()) };
}

/**
 * A runtime that loops on its queue (claiming and giving back the same rows for ever) never yields to a timer
 * on SQLite, whose statements complete synchronously: each claim here first lets the event loop turn, as a
 * round trip to PostgreSQL does, so such a loop fails its test at this timeout instead of hanging the run.
 * Each case takes a second or two.
 */
const HANG_GUARD = { timeout: 60_000 };

const jobs = (count: number, lanes: string[]) =>
  Array.from({ length: count }, (_, index) => ({
    id: `job${String(index).padStart(3, '0')}`,
    lane: lanes[index % lanes.length]!,
  }));

/** Lets `total` attempts run: each batch that has started is finished, until all have. */
async function finishAsTheyStart(attempts: ReturnType<typeof controlledAttempts>, total: number) {
  for (let finished = 0; finished < total;) {
    await attempts.started(Math.min(total, finished + 1));
    const batch = [...attempts.running.values()];
    for (const entry of batch) entry.finish();
    finished += batch.length;
  }
}

/** `a` jobs of lane a queued first (job000…), then `b` of lane b (job100…). */
const twoLanes = (a: number, b: number) => [
  ...jobs(a, ['a']),
  ...jobs(b, ['b']).map((job, index) => ({ ...job, id: `job10${index}` })),
];

/** Which queues have lanes of their own (the inbound queue has one), and which top lanes up. */
const LANES: Record<QueueKind, { lanes: boolean; claimLanes: boolean }> = {
  deliveries: { lanes: true, claimLanes: true },
  sending: { lanes: true, claimLanes: false },
  inbound: { lanes: false, claimLanes: false },
};

for (const [kind, { lanes: hasLanes, claimLanes: topsUp }] of Object.entries(LANES) as Array<
  [QueueKind, (typeof LANES)[QueueKind]]
>) {
  for (const engine of ALL_ENGINES) {
    const queueOf = (
      engine: Engine,
      jobs: Array<{ id: string; lane: string }>,
      options: { claimLanes?: boolean } = {},
    ) => openQueue(kind, engine, jobs, options);
    describe(`queue runtime on the ${kind} queue (${engine})`, { skip: engineSkip(engine) }, () => {
      // The cases of a queue that says lane limits in its claim (QueueSource.limitsLanes).
      const laneLimitsCase = {
        ...HANG_GUARD,
        skip: kind === 'sending' ? false : 'the sending queue says lane limits in its claim',
      };
      for (const claimLanes of hasLanes ? (topsUp ? [false, true] : [false]) : []) {
        const how = claimLanes ? 'topped up per lane' : 'claimed as a whole';
        test(`lanes never exceed their bound, nor the worker its own (${how})`, HANG_GUARD, async () => {
          const queue = await queueOf(engine, jobs(40, ['a', 'b', 'c']), { claimLanes });
          const attempts = controlledAttempts(queue);
          const w = worker({ queue, attempts });
          await w.start();
          await finishAsTheyStart(attempts, 40);
          await w.whenIdle();
          assert.equal((await queue.done()).length, 40, 'every job done');
          assert.ok(attempts.maxOverall <= SETTINGS.concurrency, `overall ${attempts.maxOverall}`);
          for (const [lane, max] of attempts.maxPerLane) {
            assert.ok(max <= SETTINGS.laneConcurrency, `lane ${lane} had ${max} at once`);
          }
          assert.equal(attempts.maxOverall, SETTINGS.concurrency, 'the slots are used');
        });
      }

      test(
        'a source that cannot leave a full lane out is not asked again and again while the lane stays full',
        { ...HANG_GUARD, skip: hasLanes ? false : 'no lanes' },
        async () => {
          const queue = await queueOf(engine, jobs(12, ['a']));
          const attempts = controlledAttempts(queue);
          let looks = 0;
          // Its looks take any lane's jobs, as a claim whose lane limits name hosts of another lane did.
          const leavesNothingOut = (source: QueueSource<Job, Outcome>): QueueSource<Job, Outcome> => ({
            ...source,
            claim(lease, request) {
              looks += 1;
              const laneParts = (request.laneLimits ?? []).reduce((sum, lane) => sum + lane.limit, 0);
              return source.claim(lease, { limit: request.limit + laneParts, excludeLanes: [] });
            },
          });
          const w = worker({ queue, attempts, source: leavesNothingOut, settings: { claimBatch: 1 } });
          await w.start();
          await attempts.started(SETTINGS.laneConcurrency);
          const looksWhenFull = looks;
          // Turns of the event loop while the lane stays full (its attempts are held): a worker that looked
          // again at once would claim and give back its jobs on every one of them.
          for (let turn = 0; turn < 200; turn += 1) await new Promise((resolve) => setImmediate(resolve));
          assert.ok(looks - looksWhenFull <= 2, `${looks - looksWhenFull} looks while the lane was full`);
          await finishAsTheyStart(attempts, 12);
          await w.whenIdle();
          assert.equal((await queue.done()).length, 12, 'every job done');
        },
      );

      test(
        "an outcomes' write tops up a lane with more work in the same write, and nothing is claimed twice",
        { ...HANG_GUARD, skip: topsUp ? false : 'no per-lane top-ups' },
        async () => {
          const queue = await queueOf(engine, jobs(20, ['a']), { claimLanes: true });
          const attempts = controlledAttempts(queue);
          // The lane holds 8 (2 in flight): after 2 finish, 2 start and the lane has room for 2, under the
          // half (4) at which a round tops it up on its own. The outcomes' write tops it up.
          const w = worker({ queue, attempts, settings: { capacity: 32, laneCapacity: 8 } });
          await w.start();
          await attempts.started(2);
          await queue.released();
          const claims = queue.log.length;
          const toppedUp = queue.nextClaim();
          attempts.finishAll();
          await toppedUp;
          const [record, claim] = queue.log.slice(claims).filter((line) => !line.startsWith('release'));
          assert.equal(record, 'record job000,job001', queue.log.join('\n'));
          assert.equal(claim, 'claim worker-a job008,job009', queue.log.join('\n'));
          for (let finished = 2; finished < 20; finished++) {
            await attempts.started(finished + 1);
            [...attempts.running.values()][0]!.finish();
          }
          await w.whenIdle();
          assert.equal((await queue.done()).length, 20, 'every job done once');
          assert.deepEqual(queue.violations, []);
        },
      );

      test(
        'a lane due a top-up while outcomes wait for their write takes it with that write, started at once',
        { ...HANG_GUARD, skip: topsUp ? false : 'no per-lane top-ups' },
        async () => {
          const queue = await queueOf(engine, jobs(20, ['a']), { claimLanes: true });
          const attempts = controlledAttempts(queue);
          // Writes a minute apart: after the first, outcomes wait for the next unless something starts it.
          const settings = { capacity: 32, laneCapacity: 8, outcomeWriteIntervalMs: 60_000, stopGraceMs: 0 };
          const w = worker({ queue, attempts, settings });
          await w.start();
          await attempts.started(2);
          await queue.released();
          const first = queue.nextClaim();
          attempts.finishAll(); // job000, job001: the first write, at once, tops the lane up (job008, job009)
          await first;
          await attempts.started(4);
          attempts.finishAll(); // job002, job003: the lane holds 6, room for 2, under its half: no top-up
          await attempts.started(6);
          const since = queue.log.length;
          const topUp = queue.nextClaim();
          attempts.finishAll(); // job004, job005: the lane holds 4, half of it free
          await topUp;
          const lines = queue.log.slice(since).filter((line) => !line.startsWith('release'));
          // Not a claim of its own: the four waiting outcomes' write, with the top-up in it.
          assert.deepEqual(
            lines,
            ['record job002,job003,job004,job005', 'claim worker-a job010,job011,job012,job013'],
            queue.log.join('\n'),
          );
          await w.stop();
          assert.ok((await queue.done()).length >= 6, 'the finished jobs written');
          assert.deepEqual(queue.violations, []);
        },
      );

      test(
        'with a backlog past its capacity, a worker claims an eighth of the capacity at a time, not one job',
        { ...HANG_GUARD, skip: hasLanes ? false : 'one lane' },
        async () => {
          const lanes = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
          const queue = await queueOf(engine, jobs(200, lanes));
          const attempts = controlledAttempts(queue);
          // Eight lanes of eight jobs would hold 64; the worker holds 32, so the lanes always have more.
          const settings = {
            capacity: 32,
            laneCapacity: 8,
            laneConcurrency: 1,
            concurrency: 8,
            maxUnrecorded: 64,
          };
          const w = worker({ queue, attempts, settings });
          await w.start();
          for (let finished = 0; finished < 200; finished++) {
            await attempts.started(finished + 1);
            [...attempts.running.values()][0]!.finish();
          }
          await w.whenIdle();
          assert.equal((await queue.done()).length, 200);
          const claimed = queue.log
            .filter((line) => line.startsWith('claim '))
            .map((line) => line.split(' ')[2]!.split(',').filter(Boolean).length)
            .filter((count) => count > 0);
          // The first claim fills the worker; after that, claims of at least 32 / 8 = 4 (the last may be short).
          assert.ok(
            claimed.slice(1, -1).every((count) => count >= 4),
            `claim sizes ${claimed.join(' ')}`,
          );
          assert.ok(claimed.length <= 1 + Math.ceil((200 - 32) / 4) + 1, `${claimed.length} claims`);
        },
      );

      test(
        "a dead worker's lease runs out and its jobs come back to another worker",
        HANG_GUARD,
        async () => {
          const queue = await queueOf(engine, jobs(3, ['a']));
          const attempts = controlledAttempts(queue);
          // Worker A claims and starts attempts that never end: it hangs as a dead process would.
          const a = worker({ queue, attempts, workerId: 'worker-a', settings: { stopGraceMs: 0 } });
          await a.start();
          await attempts.started(2);
          assert.deepEqual(await queue.heldBy('worker-a'), ['job000', 'job001', 'job002']);

          const otherAttempts = controlledAttempts(queue);
          const b = worker({ queue, attempts: otherAttempts, workerId: 'worker-b' });
          await b.start();
          await b.whenIdle();
          assert.equal(otherAttempts.running.size, 0, 'nothing to take while the lease holds');
          assert.deepEqual(await queue.heldBy('worker-b'), [], 'nothing claimed while the lease holds');

          queue.clock.advance(SETTINGS.leaseMs + 1);
          b.wake();
          await otherAttempts.started(2);
          otherAttempts.finishAll();
          await otherAttempts.started(3);
          otherAttempts.finishAll();
          await b.whenIdle();
          assert.deepEqual(await queue.done(), ['job000', 'job001', 'job002']);

          // A's attempts end late: its lease is gone, so they change nothing.
          attempts.finishAll();
          await a.stop();
          await b.stop();
          assert.deepEqual(await queue.done(), ['job000', 'job001', 'job002']);
          assert.ok(queue.log.some((line) => line.startsWith('claim worker-b')));
        },
      );

      test(
        'a worker whose own attempt outlived its lease claims the job back, and does not attempt it twice',
        HANG_GUARD,
        async () => {
          const queue = await queueOf(engine, jobs(1, ['a']));
          const attempts = controlledAttempts(queue);
          const w = worker({ queue, attempts });
          await w.start();
          await attempts.started(1);
          // The attempt hangs past its lease; the worker's next look finds the job due again and claims it.
          queue.clock.advance(SETTINGS.leaseMs + 1);
          const claimed = queue.nextClaim();
          w.wake();
          await claimed;
          assert.deepEqual(await queue.heldBy('worker-a'), ['job000'], 'claimed back under a fresh lease');
          // What the claim started, it started before the next turn of the event loop.
          await new Promise((resolve) => setImmediate(resolve));
          assert.equal(attempts.count, 1, 'the attempt under way stands for the job');
          attempts.finishAll();
          await w.whenIdle();
          assert.equal(attempts.count, 1);
          assert.deepEqual(await queue.done(), ['job000']);
        },
      );

      test(
        'a look takes of a paced lane only what it can start, and the rest of the queue around it',
        laneLimitsCase,
        async () => {
          // Five jobs of a paced lane queued first, then three of another, and three of a third left out.
          const queued = [
            ...jobs(5, ['a']),
            ...jobs(3, ['b']).map((job, index) => ({ ...job, id: `job10${index}` })),
            ...jobs(3, ['c']).map((job, index) => ({ ...job, id: `job20${index}` })),
          ];
          const queue = await queueOf(engine, queued);
          const now = queue.clock.now();
          const lease = { workerId: 'ghost', now, until: new Date(now.getTime() + 60_000) };
          const claimed = await queue.source.claim(lease, {
            limit: 10,
            excludeLanes: ['lane-c.example'],
            laneLimits: [{ lane: 'lane-a.example', limit: 2 }],
          });
          const names = claimed.flatMap((job) => job.rows.map((row) => queue.name(row))).sort();
          assert.deepEqual(names, ['job000', 'job001', 'job100', 'job101', 'job102']);
          assert.deepEqual(await queue.heldBy('ghost'), names, "the paced lane's other jobs stay unleased");
          // Its next look takes the next two, in queue order.
          const next = await queue.source.claim(lease, {
            limit: 10,
            excludeLanes: ['lane-b.example', 'lane-c.example'],
            laneLimits: [{ lane: 'lane-a.example', limit: 2 }],
          });
          assert.deepEqual(next.flatMap((job) => job.rows.map((row) => queue.name(row))).sort(), [
            'job002',
            'job003',
          ]);
        },
      );

      test(
        'a paced lane is claimed one start at a time: none of its jobs is claimed to be given back',
        laneLimitsCase,
        async () => {
          const queue = await queueOf(engine, twoLanes(4, 2));
          // Lane a may start an attempt every 2 s of the clock (a destination's pace), b at once.
          const paced = 'lane-a.example';
          let nextStart = queue.clock.now().getTime();
          const shaping: LaneShaping = {
            startAt: (lane, now) => (lane === paced ? nextStart : now),
            started(lane, now) {
              if (lane === paced) nextStart = now + 2000;
            },
            startable: (now, withinMs) => [[paced, nextStart - now < withinMs ? 1 : 0]],
          };
          const attempts = controlledAttempts(queue);
          const w = worker({ queue, attempts, shaping });
          await w.start();
          await attempts.started(3);
          attempts.finishAll();
          for (let started = 4; started <= 6; started++) {
            queue.clock.advance(2000);
            w.wake();
            await attempts.started(started);
            attempts.finishAll();
          }
          await w.whenIdle();
          assert.deepEqual(await queue.done(), ['job000', 'job001', 'job002', 'job003', 'job100', 'job101']);
          const releases = queue.log.filter((line) => line.startsWith('release'));
          assert.deepEqual(releases, [], 'nothing claimed was given back');
          assert.equal(attempts.count, 6, 'each job attempted once');
        },
      );

      test(
        'a look takes of a lane the worker holds only what the lane has room for, and finds other lanes past it',
        laneLimitsCase,
        async () => {
          // Ten jobs of lane a queued first, then two of lane b; a lane holds only as many as it has slots
          // (direct delivery's setting), the worker twice that.
          const queue = await queueOf(engine, twoLanes(10, 2));
          const attempts = controlledAttempts(queue);
          const settings = { laneCapacity: 2, capacity: 4, concurrency: 4 };
          const w = worker({ queue, attempts, settings });
          await w.start();
          // The first look knows no lane: it takes four of a, keeps two and gives two back; the next leaves a
          // out and finds b behind a's backlog.
          await attempts.started(4);
          assert.deepEqual([...attempts.running.values()].map(({ job }) => queue.name(job.rows[0]!)).sort(), [
            'job000',
            'job001',
            'job100',
            'job101',
          ]);
          await queue.released();
          const first = queue.log.filter((line) => line.startsWith('release'));
          assert.deepEqual(first, ['release worker-a job002,job003']);
          // From then on each look asks a for what it has room for: one job as each attempt ends.
          await finishAsTheyStart(attempts, 12);
          await w.whenIdle();
          await queue.released();
          assert.equal((await queue.done()).length, 12, 'every job done');
          assert.equal(attempts.count, 12, 'each job attempted once');
          assert.deepEqual(
            queue.log.filter((line) => line.startsWith('release')),
            first,
            'nothing claimed after the first look was given back',
          );
        },
      );

      test(
        'a worker whose heartbeat stopped has its jobs given back before its lease runs out',
        HANG_GUARD,
        async () => {
          const queue = await queueOf(engine, jobs(2, ['a']));
          // A worker that died holding both jobs under a long lease; its last heartbeat was at the start.
          const now = queue.clock.now();
          const ghostLease = { workerId: 'ghost', now, until: new Date(now.getTime() + 3_600_000) };
          assert.equal((await queue.source.claim(ghostLease, { limit: 10, excludeLanes: [] })).length, 2);
          await createHeartbeatRepo(queue.database.handle.db).beat('ghost', queue.channel, now);

          const attempts = controlledAttempts(queue);
          const w = worker({ queue, attempts, workerId: 'worker-b', deadAfterMs: 15_000 });
          await w.start();
          await w.whenIdle();
          assert.equal(attempts.running.size, 0, 'the ghost is not dead yet: its jobs stay leased');
          assert.deepEqual(await queue.beating(), ['ghost', 'worker-b']);

          // Past two thirds of WORKER_DEAD_AFTER without a heartbeat, and this worker's next heartbeat is due.
          queue.clock.advance(10_001);
          w.wake();
          await attempts.started(2);
          assert.ok(queue.log.includes('release ghost all'), queue.log.join('\n'));
          assert.deepEqual(await queue.beating(), ['worker-b'], 'the dead worker is forgotten');
          attempts.finishAll();
          await w.whenIdle();
          assert.deepEqual(await queue.done(), ['job000', 'job001']);
          await w.stop();
          assert.deepEqual(await queue.beating(), [], 'a stopped worker removes its heartbeat');
        },
      );

      test(
        'stop writes the outcomes of finished attempts before it gives the leases back',
        HANG_GUARD,
        async () => {
          const queue = await queueOf(engine, jobs(2, ['a']));
          const attempts = controlledAttempts(queue);
          const w = worker({ queue, attempts });
          await w.start();
          await attempts.started(2);
          const stopping = w.stop();
          attempts.finishAll();
          await stopping;
          const record = queue.log.findIndex((line) => line.startsWith('record'));
          const release = queue.log.findIndex((line) => line === 'release worker-a all');
          assert.ok(record >= 0 && release > record, queue.log.join('\n'));
          assert.deepEqual(await queue.done(), ['job000', 'job001']);
        },
      );

      test(
        'stop gives back what it did not finish: waiting jobs and attempts cut short',
        HANG_GUARD,
        async () => {
          const queue = await queueOf(engine, jobs(6, ['a']));
          const attempts = controlledAttempts(queue);
          const w = worker({ queue, attempts, settings: { stopGraceMs: 0 } });
          await w.start();
          await attempts.started(2);
          // A queue without per-lane top-ups claims more than the lane holds, and gives the rest back.
          await queue.released();
          assert.equal((await queue.heldBy('worker-a')).length, 4, 'two in flight, two waiting for a slot');
          await w.stop();
          assert.deepEqual(await queue.heldBy('worker-a'), [], 'every lease given back');
          assert.deepEqual(await queue.done(), [], 'nothing recorded for attempts cut short');
          assert.equal(attempts.running.size, 0);
        },
      );

      test(
        'a claimed job whose lease ran too short to finish is given back, not started',
        HANG_GUARD,
        async () => {
          const queue = await queueOf(engine, jobs(3, ['a']));
          const attempts = controlledAttempts(queue);
          const w = worker({ queue, attempts, settings: { laneConcurrency: 1, stopGraceMs: 0 } });
          await w.start();
          await attempts.started(1);
          // The next job has waited for its slot until less than the attempt timeout is left of its lease.
          queue.clock.advance(SETTINGS.leaseMs - SETTINGS.attemptTimeoutMs);
          attempts.finishAll();
          await attempts.started(2);
          assert.ok(
            queue.log.some((line) => line === 'release worker-a job001,job002'),
            queue.log.join('\n'),
          );
          // Given back and claimed again under a fresh lease, it is attempted after all.
          const [again] = [...attempts.running.values()];
          assert.equal(queue.name(again!.job.rows[0]!), 'job001');
          attempts.finishAll();
        },
      );

      test('a batch that fails to record is written outcome by outcome', HANG_GUARD, async () => {
        const queue = await queueOf(engine, jobs(2, ['a']));
        const attempts = controlledAttempts(queue);
        const w = worker({ queue, attempts, settings: { outcomeWriteIntervalMs: 0 } });
        await w.start();
        await attempts.started(2);
        queue.failNextCommit();
        attempts.finishAll();
        await w.whenIdle();
        assert.deepEqual(await queue.done(), ['job000', 'job001']);
        assert.deepEqual(
          queue.log.filter((line) => line.startsWith('record')),
          ['record job000,job001 failed', 'record job000', 'record job001'],
        );
      });

      test('whenIdle waits for a look made after it was asked for', HANG_GUARD, async () => {
        const queue = await queueOf(engine, []);
        const attempts = controlledAttempts(queue);
        const w = worker({ queue, attempts });
        await w.start();
        await w.whenIdle();
        await queue.add({ id: 'late', lane: 'a' });
        const idle = w.whenIdle();
        await attempts.started(1);
        let resolved = false;
        void idle.then(() => (resolved = true));
        await new Promise((resolve) => setImmediate(resolve));
        assert.equal(resolved, false, 'not idle while it holds a job');
        attempts.finishAll();
        await idle;
        assert.deepEqual(await queue.done(), ['late']);
      });
    });
  }
}

describe('WORKER_DEAD_AFTER', () => {
  test('defaults to 15 s, reads a duration, and refuses one too short to heartbeat within', () => {
    assert.equal(loadConfig({}).workerDeadAfterMs, 15_000);
    assert.equal(loadConfig({ WORKER_DEAD_AFTER: '5s' }).workerDeadAfterMs, 5000);
    assert.throws(() => loadConfig({ WORKER_DEAD_AFTER: '10ms' }), {
      name: 'ConfigError',
      message: "Invalid configuration:\n  - WORKER_DEAD_AFTER must be from 300ms to 1h, got '10ms'.",
    });
  });
});
