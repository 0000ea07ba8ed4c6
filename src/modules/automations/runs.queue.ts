import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { locksRows } from '../../db/engine/sql.ts';
import type { Database } from '../../db/schema.ts';
import { type Lease, releaseLeases } from '../../queue/lease.ts';
import type { QueueJob, QueueSource } from '../../queue/runtime.ts';

// The runs' queue: live runs (running, or waiting with a timeout) whose `due_at` has come, claimed by the runs
// worker under a lease. A run that waits (a delay, a wait for an event) is only a row with a later `due_at`,
// found by the claim through its index when the time comes: nothing polls it meanwhile. Each attempt writes the
// steps it takes itself (runs.repo.ts advance, a transaction per step) and gives the lease back; a worker that
// dies leaves its runs to be claimed again when their lease runs out, at the step they had reached.

export interface RunJob extends QueueJob {
  runId: string;
}

export function createRunQueue(db: Kysely<Database>, engine: Engine) {
  return {
    /** Leases up to `limit` due runs, the longest due first. */
    async claimDue(lease: Lease, limit: number): Promise<string[]> {
      const now = lease.now.toISOString();
      let due = db
        .selectFrom('automation_runs')
        .select('id')
        .where('status', 'in', ['running', 'waiting'])
        .where('due_at', '<=', now)
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', now)]))
        .orderBy('due_at')
        .limit(limit);
      if (locksRows(engine)) due = due.forUpdate().skipLocked();
      const rows = await db
        .updateTable('automation_runs')
        .set({ locked_by: lease.workerId, locked_until: lease.until.toISOString() })
        .where('id', 'in', due)
        .returning('id')
        .execute();
      return rows.map((row) => row.id);
    },

    /** Gives back leases (these runs, or all the worker holds). */
    release: (workerId: string, ids?: readonly string[]) =>
      releaseLeases(db, 'automation_runs', { workerId, rows: ids, waiting: sql<boolean>`1 = 1` }),

    /** When the next run falls due: the earliest `due_at` of those free to claim, or the earliest lease's end. */
    async nextDueAt(now: Date): Promise<number | undefined> {
      const at = now.toISOString();
      const live = () =>
        db
          .selectFrom('automation_runs')
          .where('status', 'in', ['running', 'waiting'])
          .where('due_at', 'is not', null);
      const free = await live()
        .select((eb) => eb.fn.min('due_at').as('next'))
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', at)]))
        .executeTakeFirst();
      const leased = await live()
        .select((eb) => eb.fn.min('locked_until').as('next'))
        .where('locked_until', '>=', at)
        .executeTakeFirst();
      const times = [free?.next, leased?.next].filter((time): time is string => typeof time === 'string');
      return times.length === 0 ? undefined : Math.min(...times.map((time) => Date.parse(time)));
    },
  };
}

export type RunQueue = ReturnType<typeof createRunQueue>;

/** The runs table as the runtime's queue: each due run a job, in one lane. */
export function createRunQueueSource(queue: RunQueue): QueueSource<RunJob, { done: boolean }> {
  return {
    claim: async (lease, request) =>
      (await queue.claimDue(lease, request.limit)).map((id) => ({ lane: '', rows: [id], runId: id })),
    release: (workerId, rows) => queue.release(workerId, rows),
    nextDueAt: (now) => queue.nextDueAt(now),
    // The attempt wrote its steps and gave its lease back; one that failed is claimed again when the lease runs out.
    record: async (attempted) => attempted.map(() => ({ held: true })),
  };
}
