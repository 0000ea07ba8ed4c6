import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { locksRows } from '../../db/engine/sql.ts';
import type { Database } from '../../db/schema.ts';
import { type Lease, releaseLeases } from '../../queue/lease.ts';
import type { QueueJob, QueueSource } from '../../queue/runtime.ts';
import { type ContactImportRecord, toImportRecord } from './contact-imports.repo.ts';

// The contact import queue: jobs queued by an accepted upload, or in progress under a lease that ran out (a
// worker that died or stopped: the job resumes after the last batch it committed). Its SQL is here; the job
// writes its own progress and end (contact-imports.repo.ts), so there is no outcome to record.

export interface ImportJob extends QueueJob {
  job: ContactImportRecord;
}

export function createContactImportQueue(db: Kysely<Database>, engine: Engine) {
  return {
    /** Leases up to `limit` due imports, the oldest first, and marks them in progress. */
    async claimDue(lease: Lease, limit: number): Promise<ContactImportRecord[]> {
      const now = lease.now.toISOString();
      let due = db
        .selectFrom('contact_imports')
        .select('id')
        .where('status', 'in', ['queued', 'in_progress'])
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', now)]))
        .orderBy('id')
        .limit(limit);
      if (locksRows(engine)) due = due.forUpdate().skipLocked();
      const rows = await db
        .updateTable('contact_imports')
        .set((eb) => ({
          status: 'in_progress',
          started_at: eb.fn.coalesce('started_at', eb.val(now)),
          locked_by: lease.workerId,
          locked_until: lease.until.toISOString(),
        }))
        .where('id', 'in', due)
        .returningAll()
        .execute();
      return rows.map(toImportRecord);
    },

    /** Gives back leases (these jobs, or all the worker holds); the jobs resume where they were. */
    release: (workerId: string, ids?: readonly string[]) =>
      releaseLeases(db, 'contact_imports', {
        workerId,
        rows: ids,
        waiting: sql<boolean>`status in ('queued', 'in_progress')`,
      }),

    /** When a leased job's lease runs out (a queued one is due now). */
    async nextDueAt(): Promise<string | undefined> {
      const row = await db
        .selectFrom('contact_imports')
        .select((eb) => eb.fn.min(eb.fn.coalesce('locked_until', 'created_at')).as('next'))
        .where('status', 'in', ['queued', 'in_progress'])
        .executeTakeFirst();
      return row?.next ?? undefined;
    },
  };
}

export type ContactImportQueue = ReturnType<typeof createContactImportQueue>;

/** The contact_imports table as the runtime's queue: each import a job, in one lane. */
export function createContactImportQueueSource(
  queue: ContactImportQueue,
): QueueSource<ImportJob, { done: boolean }> {
  return {
    claim: async (lease, request) =>
      (await queue.claimDue(lease, request.limit)).map((job) => ({ lane: '', rows: [job.id], job })),
    release: (workerId, rows) => queue.release(workerId, rows),
    nextDueAt: async () => {
      const next = await queue.nextDueAt();
      return next === undefined ? undefined : Date.parse(next);
    },
    // The job has written its progress and its end (and given the lease back) itself.
    record: async (attempted) => attempted.map(() => ({ held: true })),
  };
}
