import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import type { Clock } from '../src/lib/clock.ts';
import type { HeartbeatStore } from '../src/queue/heartbeats.repo.ts';
import type { Lease } from '../src/queue/lease.ts';
import { createNotifier } from '../src/queue/notifier.ts';
import {
  createQueueWorker,
  type QueueSettings,
  type QueueSource,
  type QueueWorker,
  type RecordResult,
} from '../src/queue/runtime.ts';

// The queue runtime on its own: a scripted in-memory queue (rows with leases, read through an injected
// clock) instead of a database, and attempts the test finishes when it chooses.

interface Job {
  id: string;
  lane: string;
  rows: readonly string[];
}

interface Outcome {
  id: string;
  workerId: string;
}

interface Row {
  id: string;
  lane: string;
  lockedBy: string | null;
  lockedUntil: number;
  done: boolean;
}

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

/** A queue table in memory: what the SQL of a real queue does, with a log of the calls the runtime made. */
function scriptedQueue(jobs: Array<{ id: string; lane: string }>, options: { claimLanes?: boolean } = {}) {
  const rows = new Map<string, Row>(
    jobs.map((job) => [job.id, { ...job, lockedBy: null, lockedUntil: -Infinity, done: false }]),
  );
  const log: string[] = [];
  let failNextRecord = false;
  const toJob = (row: Row): Job => ({ id: row.id, lane: row.lane, rows: [row.id] });
  const take = (lease: Lease, due: Row[]) => {
    for (const row of due) {
      row.lockedBy = lease.workerId;
      row.lockedUntil = lease.until.getTime();
    }
    log.push(`claim ${lease.workerId} ${due.map((row) => row.id).join(',')}`);
    return due.map(toJob);
  };
  const claimable = (lease: Lease) =>
    [...rows.values()].filter((row) => !row.done && row.lockedUntil < lease.now.getTime());

  const source: QueueSource<Job, Outcome> = {
    async claim(lease, request) {
      const due = claimable(lease)
        .filter((row) => !request.excludeLanes.includes(row.lane))
        .slice(0, request.limit);
      return take(lease, due);
    },
    async release(workerId, ids) {
      for (const row of rows.values()) {
        if (row.lockedBy !== workerId || row.done) continue;
        if (ids && !ids.includes(row.id)) continue;
        row.lockedBy = null;
        row.lockedUntil = -Infinity;
      }
      log.push(`release ${workerId} ${ids ? ids.join(',') : 'all'}`);
    },
    async nextDueAt() {
      return undefined;
    },
    async record(attempted) {
      if (failNextRecord) {
        failNextRecord = false;
        throw new Error('the database went away');
      }
      log.push(`record ${attempted.map(({ outcome }) => outcome.id).join(',')}`);
      return attempted.map(({ outcome }): RecordResult => {
        const row = rows.get(outcome.id)!;
        const held = row.lockedBy === outcome.workerId && !row.done;
        if (held) {
          row.done = true;
          row.lockedBy = null;
        }
        return { held };
      });
    },
  };
  if (options.claimLanes) {
    source.claimLanes = async (lease, lanes) =>
      take(
        lease,
        lanes.flatMap(({ lane, limit }) =>
          claimable(lease)
            .filter((row) => row.lane === lane)
            .slice(0, limit),
        ),
      );
  }
  return {
    source,
    rows,
    log,
    failNextRecord: () => (failNextRecord = true),
    done: () => [...rows.values()].filter((row) => row.done).map((row) => row.id),
    heldBy: (workerId: string) =>
      [...rows.values()].filter((row) => row.lockedBy === workerId && !row.done).map((row) => row.id),
  };
}

/** Attempts that end when the test says, with a record of what ran at once. */
function controlledAttempts() {
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
          started += 1;
          perLane.set(job.lane, (perLane.get(job.lane) ?? 0) + 1);
          maxPerLane.set(job.lane, Math.max(maxPerLane.get(job.lane) ?? 0, perLane.get(job.lane)!));
          maxOverall = Math.max(maxOverall, running.size + 1);
          const end = (outcome: Outcome | undefined) => {
            running.delete(job.id);
            perLane.set(job.lane, perLane.get(job.lane)! - 1);
            resolve(outcome);
          };
          running.set(job.id, { job, signal, finish: () => end({ id: job.id, workerId }) });
          signal.addEventListener('abort', () => end(undefined), { once: true });
          check();
        });
    },
    running,
    /** Resolves once `count` attempts have started in all. */
    started: (count: number) =>
      new Promise<void>((resolve) => {
        waiters.push({ count, resolve });
        check();
      }),
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

const silent = { info() {}, warn() {}, error() {} };

function worker(options: {
  queue: ReturnType<typeof scriptedQueue>;
  attempts: ReturnType<typeof controlledAttempts>;
  clock: Clock;
  workerId?: string;
  settings?: Partial<QueueSettings>;
}): QueueWorker {
  const workerId = options.workerId ?? 'worker-a';
  const created = createQueueWorker<Job, Outcome>({
    name: 'test worker',
    workerId,
    source: options.queue.source,
    attempt: options.attempts.attempt(workerId),
    settings: { ...SETTINGS, ...options.settings },
    clock: options.clock,
    logger: silent,
    database: {},
    channel: 'postwire_deliveries',
    notifier: createNotifier(),
  });
  return created;
}

const jobs = (count: number, lanes: string[]) =>
  Array.from({ length: count }, (_, index) => ({
    id: `job${String(index).padStart(3, '0')}`,
    lane: lanes[index % lanes.length]!,
  }));

describe('queue runtime', () => {
  for (const claimLanes of [false, true]) {
    const how = claimLanes ? 'topped up per lane' : 'claimed as a whole';
    test(`lanes never exceed their bound, nor the worker its own (${how})`, async () => {
      const clock = manualClock();
      const queue = scriptedQueue(jobs(40, ['a', 'b', 'c']), { claimLanes });
      const attempts = controlledAttempts();
      const w = worker({ queue, attempts, clock });
      await w.start();
      try {
        for (let finished = 0; finished < 40;) {
          await attempts.started(Math.min(40, finished + 1));
          const batch = [...attempts.running.values()];
          for (const entry of batch) entry.finish();
          finished += batch.length;
        }
        await w.whenIdle();
        assert.equal(queue.done().length, 40, 'every job done');
        assert.ok(attempts.maxOverall <= SETTINGS.concurrency, `overall ${attempts.maxOverall}`);
        for (const [lane, max] of attempts.maxPerLane) {
          assert.ok(max <= SETTINGS.laneConcurrency, `lane ${lane} had ${max} at once`);
        }
        assert.equal(attempts.maxOverall, SETTINGS.concurrency, 'the slots are used');
      } finally {
        await w.stop();
      }
    });
  }

  test('with a backlog past its capacity, a worker claims an eighth of the capacity at a time, not one job', async () => {
    const clock = manualClock();
    const lanes = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
    const queue = scriptedQueue(jobs(200, lanes), { claimLanes: true });
    const attempts = controlledAttempts();
    // Eight lanes of eight jobs would hold 64; the worker holds 32, so the lanes always have more.
    const settings = { capacity: 32, laneCapacity: 8, laneConcurrency: 1, concurrency: 8, maxUnrecorded: 64 };
    const w = worker({ queue, attempts, clock, settings });
    await w.start();
    try {
      for (let finished = 0; finished < 200; finished++) {
        await attempts.started(finished + 1);
        [...attempts.running.values()][0]!.finish();
      }
      await w.whenIdle();
      assert.equal(queue.done().length, 200);
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
    } finally {
      await w.stop();
    }
  });

  test("a dead worker's lease runs out and its jobs come back to another worker", async () => {
    const clock = manualClock();
    const queue = scriptedQueue(jobs(3, ['a']));
    const attempts = controlledAttempts();
    // Worker A claims and starts attempts that never end: it hangs as a dead process would.
    const a = worker({ queue, attempts, clock, workerId: 'worker-a', settings: { stopGraceMs: 0 } });
    await a.start();
    await attempts.started(2);
    assert.deepEqual(queue.heldBy('worker-a').length, 3);

    const otherAttempts = controlledAttempts();
    const b = worker({ queue, attempts: otherAttempts, clock, workerId: 'worker-b' });
    await b.start();
    await b.whenIdle();
    assert.equal(otherAttempts.running.size, 0, 'nothing to take while the lease holds');

    clock.advance(SETTINGS.leaseMs + 1);
    b.wake();
    await otherAttempts.started(2);
    otherAttempts.finishAll();
    await otherAttempts.started(3);
    otherAttempts.finishAll();
    await b.whenIdle();
    assert.deepEqual(queue.done(), ['job000', 'job001', 'job002']);

    // A's attempts end late: its lease is gone, so they change nothing.
    attempts.finishAll();
    await a.stop();
    await b.stop();
    assert.deepEqual(queue.done(), ['job000', 'job001', 'job002']);
    assert.ok(queue.log.some((line) => line.startsWith('claim worker-b')));
  });

  test(
    'a worker whose heartbeat stopped has its jobs given back before its lease runs out',
    { timeout: 10_000 },
    async () => {
      const clock = manualClock();
      const queue = scriptedQueue(jobs(2, ['a']));
      // A worker that died holding both jobs under a long lease; its last heartbeat was at the start.
      for (const row of queue.rows.values()) {
        row.lockedBy = 'ghost';
        row.lockedUntil = clock.now().getTime() + 3_600_000;
      }
      const beats = new Map<string, number>([['ghost', clock.now().getTime()]]);
      const heartbeats: HeartbeatStore = {
        async beat(workerId, _queue, now) {
          beats.set(workerId, now.getTime());
        },
        async dead(_queue, before) {
          return [...beats].filter(([, at]) => at < before.getTime()).map(([id]) => id);
        },
        async forget(ids) {
          for (const id of ids) beats.delete(id);
        },
      };
      const attempts = controlledAttempts();
      const w = createQueueWorker<Job, Outcome>({
        name: 'test worker',
        workerId: 'worker-b',
        source: queue.source,
        attempt: attempts.attempt('worker-b'),
        settings: SETTINGS,
        clock,
        logger: silent,
        database: {},
        channel: 'postwire_deliveries',
        heartbeats,
        deadAfterMs: 15_000,
      });
      await w.start();
      try {
        await w.whenIdle();
        assert.equal(attempts.running.size, 0, 'the ghost is not dead yet: its jobs stay leased');
        assert.deepEqual([...beats.keys()].sort(), ['ghost', 'worker-b']);

        // Past two thirds of WORKER_DEAD_AFTER without a heartbeat, and this worker's next heartbeat is due.
        clock.advance(10_001);
        w.wake();
        await attempts.started(2);
        assert.ok(queue.log.includes('release ghost all'), queue.log.join('\n'));
        assert.deepEqual([...beats.keys()], ['worker-b'], 'the dead worker is forgotten');
        attempts.finishAll();
        await w.whenIdle();
        assert.deepEqual(queue.done(), ['job000', 'job001']);
      } finally {
        await w.stop();
      }
      assert.deepEqual([...beats.keys()], [], 'a stopped worker removes its heartbeat');
    },
  );

  test('stop writes the outcomes of finished attempts before it gives the leases back', async () => {
    const clock = manualClock();
    const queue = scriptedQueue(jobs(2, ['a']));
    const attempts = controlledAttempts();
    const w = worker({ queue, attempts, clock });
    await w.start();
    await attempts.started(2);
    const stopping = w.stop();
    attempts.finishAll();
    await stopping;
    const record = queue.log.findIndex((line) => line.startsWith('record'));
    const release = queue.log.findIndex((line) => line === 'release worker-a all');
    assert.ok(record >= 0 && release > record, queue.log.join('\n'));
    assert.deepEqual(queue.done(), ['job000', 'job001']);
  });

  test('stop gives back what it did not finish: waiting jobs and attempts cut short', async () => {
    const clock = manualClock();
    const queue = scriptedQueue(jobs(6, ['a']));
    const attempts = controlledAttempts();
    const w = worker({ queue, attempts, clock, settings: { stopGraceMs: 0 } });
    await w.start();
    await attempts.started(2);
    assert.equal(queue.heldBy('worker-a').length, 4, 'two in flight, two waiting for a slot');
    await w.stop();
    assert.deepEqual(queue.heldBy('worker-a'), [], 'every lease given back');
    assert.deepEqual(queue.done(), [], 'nothing recorded for attempts cut short');
    assert.equal(attempts.running.size, 0);
  });

  test('a claimed job whose lease ran too short to finish is given back, not started', async () => {
    const clock = manualClock();
    const queue = scriptedQueue(jobs(3, ['a']));
    const attempts = controlledAttempts();
    const w = worker({ queue, attempts, clock, settings: { laneConcurrency: 1, stopGraceMs: 0 } });
    await w.start();
    try {
      await attempts.started(1);
      // The next job has waited for its slot until less than the attempt timeout is left of its lease.
      clock.advance(SETTINGS.leaseMs - SETTINGS.attemptTimeoutMs);
      attempts.finishAll();
      await attempts.started(2);
      assert.ok(
        queue.log.some((line) => line === 'release worker-a job001,job002'),
        queue.log.join('\n'),
      );
      // Given back and claimed again under a fresh lease, it is attempted after all.
      const [again] = [...attempts.running.values()];
      assert.equal(again!.job.id, 'job001');
    } finally {
      attempts.finishAll();
      await w.stop();
    }
  });

  test('a batch that fails to record is written outcome by outcome', async () => {
    const clock = manualClock();
    const queue = scriptedQueue(jobs(2, ['a']));
    const attempts = controlledAttempts();
    const w = worker({ queue, attempts, clock, settings: { outcomeWriteIntervalMs: 0 } });
    await w.start();
    try {
      await attempts.started(2);
      queue.failNextRecord();
      attempts.finishAll();
      await w.whenIdle();
      assert.deepEqual(queue.done(), ['job000', 'job001']);
      assert.deepEqual(
        queue.log.filter((line) => line.startsWith('record')),
        ['record job000', 'record job001'],
      );
    } finally {
      await w.stop();
    }
  });

  test('whenIdle waits for a look made after it was asked for', async () => {
    const clock = manualClock();
    const queue = scriptedQueue([]);
    const attempts = controlledAttempts();
    const w = worker({ queue, attempts, clock });
    await w.start();
    try {
      await w.whenIdle();
      queue.rows.set('late', { id: 'late', lane: 'a', lockedBy: null, lockedUntil: -Infinity, done: false });
      const idle = w.whenIdle();
      await attempts.started(1);
      let resolved = false;
      void idle.then(() => (resolved = true));
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(resolved, false, 'not idle while it holds a job');
      attempts.finishAll();
      await idle;
      assert.deepEqual(queue.done(), ['late']);
    } finally {
      await w.stop();
    }
  });
});

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
