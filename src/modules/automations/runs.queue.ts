import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { locksRows } from '../../db/engine/sql.ts';
import type { Database } from '../../db/schema.ts';
import { type Lease, releaseLeases } from '../../queue/lease.ts';
import type { Clock } from '../../lib/clock.ts';
import type { QueueJob, QueueSource, RecordResult } from '../../queue/runtime.ts';

// The runs' queue: live runs (running, or waiting with a timeout) whose `due_at` has come, claimed by the runs
// worker under a lease, many at a time. A run that waits (a delay, a wait for an event) is only a row with a
// later `due_at`, found by the claim through its index when the time comes: nothing polls it meanwhile. Each
// attempt writes the steps it takes itself (runs.repo.ts advance, a transaction per step); its outcome's write
// gives the lease back (a batch of them in one statement), and tells the worker when the run is due next. A
// worker that dies leaves its runs to be claimed again when its heartbeat stops or their lease runs out, at the
// step they had reached.

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

    /** Gives back leases (these runs, or all the worker holds); answers the runs it still held. */
    release: (workerId: string, ids?: readonly string[]) =>
      releaseLeases(db, 'automation_runs', { workerId, rows: ids, waiting: sql<boolean>`1 = 1` }),

    /** Keeps a run this worker holds leased until `until`, unattempted (a retry after a failure). */
    async holdUntil(workerId: string, id: string, until: string): Promise<boolean> {
      const result = await db
        .updateTable('automation_runs')
        .set({ locked_until: until })
        .where('id', '=', id)
        .where('locked_by', '=', workerId)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) === 1;
    },

    /**
     * When the next run falls due: the earliest `due_at` of those free to claim, or the earliest lease's end.
     * Each a look along an index that stops at its first row (a MIN with the lease's condition beside it read
     * every live run: 26 ms at 20,000 on SQLite, at every idle round).
     */
    async nextDueAt(now: Date): Promise<number | undefined> {
      const at = now.toISOString();
      const free = await db
        .selectFrom('automation_runs')
        .select('due_at as next')
        .where('status', 'in', ['running', 'waiting'])
        .where('due_at', 'is not', null)
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', at)]))
        .orderBy('due_at')
        .limit(1)
        .executeTakeFirst();
      const leased = await db
        .selectFrom('automation_runs')
        .select('locked_until as next')
        .where('locked_until', 'is not', null)
        .where('locked_until', '>=', at)
        .where('status', 'in', ['running', 'waiting'])
        .orderBy('locked_until')
        .limit(1)
        .executeTakeFirst();
      const times = [free?.next, leased?.next].filter((time): time is string => typeof time === 'string');
      return times.length === 0 ? undefined : Math.min(...times.map((time) => Date.parse(time)));
    },
  };
}

export type RunQueue = ReturnType<typeof createRunQueue>;

/**
 * An attempt's outcome: the run as its steps left it, due next at `dueAt` (epoch ms; null when nothing brings it
 * back on its own: ended, or waiting for an event without a timeout), or `retryAt` after a failed step.
 */
export type RunOutcome = { dueAt: number | null } | { retryAt: number };

/** The runs table as the runtime's queue: each due run a job, in one lane. */
export function createRunQueueSource(
  queue: RunQueue,
  { clock, workerId }: { clock: Clock; workerId: string },
): QueueSource<RunJob, RunOutcome> {
  return {
    claim: async (lease, request) =>
      (await queue.claimDue(lease, request.limit)).map((id) => ({ lane: '', rows: [id], runId: id })),
    release: (workerId, rows) => queue.release(workerId, rows),
    nextDueAt: (now) => queue.nextDueAt(now),
    // The outcome's write hands the lease back, not the attempt: given back by the attempt, a run due again at
    // once was claimed again by the look the attempt's end starts while the runtime still held it, and sat under
    // that fresh lease, unattempted, until it ran out (the broadcasts' stall). retryAt makes the worker look
    // again when the run is due next; one that waits longer costs nothing meanwhile (nextDueAt finds it).
    record: async (attempted) => {
      const done = attempted.filter(({ outcome }) => !('retryAt' in outcome)).map(({ job }) => job.runId);
      const held = new Set(await queue.release(workerId, done));
      const results: RecordResult[] = [];
      for (const { job, outcome } of attempted) {
        if ('retryAt' in outcome) {
          const until = new Date(Math.max(outcome.retryAt, clock.now().getTime())).toISOString();
          results.push({ held: await queue.holdUntil(workerId, job.runId, until), retryAt: outcome.retryAt });
          continue;
        }
        results.push({
          held: held.has(job.runId),
          retryAt: outcome.dueAt === null ? undefined : outcome.dueAt,
        });
      }
      return results;
    },
  };
}
