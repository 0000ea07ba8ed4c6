import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { locksRows } from '../../db/engine/sql.ts';
import type { Database } from '../../db/schema.ts';
import { type Lease, releaseLeases } from '../../queue/lease.ts';
import type { Clock } from '../../lib/clock.ts';
import type { QueueJob, QueueSource, RecordResult } from '../../queue/runtime.ts';

// The fan-out queue: broadcasts being sent (`sending`), or scheduled and due, claimed by the broadcast worker
// under a lease. A claim moves a due scheduled broadcast to `sending` (from then on it cannot be canceled). Each
// attempt writes its batches itself (broadcasts.repo.ts advance, in the batch's transaction); its outcome's
// write gives the lease back, due again at once for the next slice. A worker that dies leaves the broadcast to
// be claimed again when its heartbeat stops or its lease runs out, resuming at its cursor.

export interface FanOutJob extends QueueJob {
  broadcastId: string;
}

/** The fan-out queue's statements. */
export function createBroadcastQueue(db: Kysely<Database>, engine: Engine) {
  return {
    /** Leases up to `limit` broadcasts to fan out: sending ones, and scheduled ones whose time has come. */
    async claimDue(lease: Lease, limit: number): Promise<string[]> {
      const now = lease.now.toISOString();
      let due = db
        .selectFrom('broadcasts')
        .select('id')
        .where((eb) =>
          eb.or([
            eb('status', '=', 'sending'),
            eb.and([eb('status', '=', 'scheduled'), eb('scheduled_at', '<=', now)]),
          ]),
        )
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', now)]))
        .orderBy('id')
        .limit(limit);
      if (locksRows(engine)) due = due.forUpdate().skipLocked();
      const rows = await db
        .updateTable('broadcasts')
        .set({ status: 'sending', locked_by: lease.workerId, locked_until: lease.until.toISOString() })
        .where('id', 'in', due)
        .returning('id')
        .execute();
      return rows.map((row) => row.id);
    },

    /** Gives back leases (these broadcasts, or all the worker holds). */
    release: (workerId: string, ids?: readonly string[]) =>
      releaseLeases(db, 'broadcasts', { workerId, rows: ids, waiting: sql<boolean>`1 = 1` }),

    /**
     * A broadcast this worker holds comes due again: at once (`until` null: its lease given back) or at
     * `until` (held that long, unattempted). False when the worker no longer holds it.
     */
    async dueAgain(workerId: string, id: string, until: string | null): Promise<boolean> {
      const result = await db
        .updateTable('broadcasts')
        .set({ locked_by: until === null ? null : workerId, locked_until: until })
        .where('id', '=', id)
        .where('locked_by', '=', workerId)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) === 1;
    },

    /**
     * When the next broadcast falls due: a sending one at once (when its lease is free) or when its lease
     * runs out; a scheduled one at its time.
     */
    async nextDueAt(now: Date): Promise<string | undefined> {
      const sending = await db
        .selectFrom('broadcasts')
        .select((eb) => [
          eb.fn.countAll<number | string>().as('count'),
          eb.fn.min('locked_until').as('earliest'),
        ])
        .where('status', '=', 'sending')
        .executeTakeFirst();
      const scheduled = await db
        .selectFrom('broadcasts')
        .select((eb) => eb.fn.min('scheduled_at').as('next'))
        .where('status', '=', 'scheduled')
        .executeTakeFirst();
      const times: string[] = [];
      if (Number(sending?.count ?? 0) > 0) {
        // One without a lease (count of leases < count) is due now; else the earliest lease's end.
        const unleased = await db
          .selectFrom('broadcasts')
          .select('id')
          .where('status', '=', 'sending')
          .where('locked_until', 'is', null)
          .executeTakeFirst();
        times.push(unleased ? now.toISOString() : (sending?.earliest ?? now.toISOString()));
      }
      if (scheduled?.next) times.push(scheduled.next);
      return times.sort()[0];
    },
  };
}

export type BroadcastQueue = ReturnType<typeof createBroadcastQueue>;

/**
 * An attempt's outcome: the broadcast is done (sent, or no longer sending: its row's lease is off already), or
 * due again at `dueAt` (epoch ms): at once for its next slice, later while paused or after a failed batch.
 */
export type FanOutOutcome = { done: true } | { done: false; dueAt: number };

/** The broadcasts table as the runtime's queue: each due broadcast a job, in one lane. */
export function createFanOutQueueSource(
  queue: BroadcastQueue,
  { clock, workerId }: { clock: Clock; workerId: string },
): QueueSource<FanOutJob, FanOutOutcome> {
  return {
    claim: async (lease, request) =>
      (await queue.claimDue(lease, request.limit)).map((id) => ({ lane: '', rows: [id], broadcastId: id })),
    release: (workerId, rows) => queue.release(workerId, rows),
    nextDueAt: async (now) => {
      const next = await queue.nextDueAt(now);
      return next === undefined ? undefined : Date.parse(next);
    },
    // The outcome's write hands the lease back, not the attempt: given back by the attempt, the broadcast was
    // claimed again by the look the attempt's end starts, while the runtime still held it, and so sat under
    // that fresh lease, unattempted, until it ran out. retryAt makes the worker look for it at once.
    record: async (attempted) => {
      const now = clock.now().getTime();
      const results: RecordResult[] = [];
      for (const { job, outcome } of attempted) {
        if (outcome.done) {
          results.push({ held: true });
          continue;
        }
        const held = await queue.dueAgain(
          workerId,
          job.broadcastId,
          outcome.dueAt <= now ? null : new Date(outcome.dueAt).toISOString(),
        );
        results.push({ held, retryAt: outcome.dueAt });
      }
      return results;
    },
  };
}
