import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { locksRows } from '../../db/engine/sql.ts';
import type { Database } from '../../db/schema.ts';
import { type Lease, releaseLeases } from '../../queue/lease.ts';
import type { QueueJob, QueueSource } from '../../queue/runtime.ts';
import { type DomainRecord, toDomainRecord } from './domains.repo.ts';

// The domain re-check queue: domains whose next check is due (`next_check_at`), claimed by the domain check
// worker under a lease and given back. Its SQL is here; the check itself writes its result and clears the
// lease (domains.repo.ts saveCheck, called by DomainService.check), so there is no outcome to record.

export interface CheckJob extends QueueJob {
  domain: DomainRecord;
}

/** The re-check queue's statements. */
export function createDomainQueue(db: Kysely<Database>, engine: Engine) {
  return {
    /** Leases up to `limit` domains whose next check is due, the longest-waiting first. */
    async claimDue(lease: Lease, limit: number): Promise<DomainRecord[]> {
      const now = lease.now.toISOString();
      let due = db
        .selectFrom('domains')
        .select('id')
        .where('next_check_at', '<=', now)
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', now)]))
        .orderBy('next_check_at')
        .limit(limit);
      // Two workers claiming at once skip each other's rows instead of waiting for them.
      if (locksRows(engine)) due = due.forUpdate().skipLocked();
      const rows = await db
        .updateTable('domains')
        .set({ locked_by: lease.workerId, locked_until: lease.until.toISOString() })
        .where('id', 'in', due)
        .returningAll()
        .execute();
      return rows.map(toDomainRecord);
    },

    /** Gives back leases without a check (these rows, or all the worker holds). */
    release: (workerId: string, ids?: readonly string[]) =>
      releaseLeases(db, 'domains', { workerId, rows: ids, waiting: sql<boolean>`1 = 1` }),

    /** When the next check falls due. */
    async nextDueAt(): Promise<string | undefined> {
      const row = await db
        .selectFrom('domains')
        .select((eb) => eb.fn.min('next_check_at').as('next'))
        .executeTakeFirst();
      return row?.next ?? undefined;
    },
  };
}

export type DomainQueue = ReturnType<typeof createDomainQueue>;

/** The domains table as the runtime's queue: each due domain a job, in one lane. */
export function createDomainCheckQueueSource(repo: DomainQueue): QueueSource<CheckJob, { checked: boolean }> {
  return {
    claim: async (lease, request) =>
      (await repo.claimDue(lease, request.limit)).map((domain) => ({ lane: '', rows: [domain.id], domain })),
    release: (releasing, rows) => repo.release(releasing, rows),
    nextDueAt: async () => {
      const next = await repo.nextDueAt();
      return next === undefined ? undefined : Date.parse(next);
    },
    // The check has written its result (and given the lease back) already; a failed one is retried when its
    // lease runs out.
    record: async (attempted) => attempted.map(() => ({ held: true })),
  };
}
