import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Clock } from '../src/lib/clock.ts';
import { silentWorkerLogger } from '../src/lib/worker-logger.ts';
import { QUEUE_CHANNELS } from '../src/queue/notifier.ts';
import { createQueueWorker, type QueueJob, type QueueSource } from '../src/queue/runtime.ts';

// The queue runtime when a claim takes a job again in the moment between its outcome's write (which gave the
// lease back, the job due again at once) and the worker letting go of it: the claim's fresh lease must not keep
// the job from everyone until it runs out. A queue of one job in memory; the clock never moves, so a lease never
// runs out and only a given-back job can be attempted again.

test('a job claimed again while its outcome is being written is given back once written', async () => {
  const clock: Clock = { now: () => new Date('2026-11-29T08:00:00.000Z') };
  let lockedBy: string | null = null;
  let attempts = 0;
  let recording: (() => void) | undefined;
  const source: QueueSource<QueueJob, 'more' | 'done'> = {
    async claim(lease) {
      if (lockedBy !== null || attempts >= 2) return [];
      lockedBy = lease.workerId;
      // The write under way ends only after this claim's jobs are taken in (setImmediate: after the claim's own
      // continuation), as when the claim's answer comes back before the write's.
      if (recording) setImmediate(recording);
      return [{ lane: '', rows: ['job'] }];
    },
    async release(workerId) {
      if (lockedBy === workerId) lockedBy = null;
    },
    nextDueAt: async (now) => (lockedBy === null && attempts < 2 ? now.getTime() : undefined),
    async record(outcomes) {
      const now = clock.now().getTime();
      // The outcome gives the lease back, due again at once; the worker's next look claims it before this ends.
      lockedBy = null;
      if (outcomes[0]!.outcome === 'more') {
        await new Promise<void>((resolve) => {
          recording = resolve;
          worker.wake();
        });
        recording = undefined;
      }
      return outcomes.map(() => ({ held: true, retryAt: now }));
    },
  };
  const worker = createQueueWorker<QueueJob, 'more' | 'done'>({
    name: 'test worker',
    workerId: 'w1',
    source,
    attempt: async () => {
      attempts += 1;
      return attempts === 1 ? 'more' : 'done';
    },
    settings: {
      concurrency: 2,
      laneConcurrency: 2,
      laneCapacity: 2,
      capacity: 2,
      claimBatch: 1,
      attemptTimeoutMs: 1000,
      leaseMs: 60_000,
      pollIntervalMs: 10,
      stopGraceMs: 1000,
      outcomeWriteIntervalMs: 0,
      maxUnrecorded: 2,
    },
    clock,
    logger: silentWorkerLogger,
    database: {},
    channel: QUEUE_CHANNELS.broadcasts,
  });
  await worker.start();
  try {
    await worker.whenIdle();
  } finally {
    await worker.stop();
  }
  // The second attempt ran: the claim taken while the first's outcome was written did not hold the job.
  assert.equal(attempts, 2);
});
