import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import {
  type Database,
  type EmailStatus,
  RECIPIENT_STATUSES,
  type RecipientStatus,
} from '../../db/schema.ts';
import { type Lease, releaseLeases, storedLease } from '../../queue/lease.ts';
import { attachmentsOf, type EmailRecord, toEmailRecord } from './emails.repo.ts';
import { promoteDue, pruneQuota } from './fair-queue.repo.ts';
import { PENDING, summarizeStatus } from './status.ts';

// The sending queue: each due recipient row is a job, claimed by the sending worker under a lease. Written
// here, in the emails module that owns the rows; the worker (src/modules/sending) holds only the policy.

/** A recipient row a worker holds the lease on. */
export interface ClaimedRecipient {
  id: string;
  emailId: string;
  projectId: string;
  address: string;
  host: string;
  status: RecipientStatus;
  attempts: number;
  /** Queue position: groups go out in the order of their first recipient. */
  seq: number;
}

/** The new state of one recipient after an attempt. */
export interface RecipientUpdate {
  id: string;
  status: RecipientStatus;
  /** When status is `delayed`: when the retry is due. */
  retryAt?: string | undefined;
  response: string | null;
  responseCode: number | null;
}

export interface AttemptRecord {
  workerId: string;
  emailId: string;
  projectId: string;
  /** All recipients of the email (not only this attempt's). */
  recipientCount: number;
  attemptedAt: string;
  now: string;
  updates: RecipientUpdate[];
  /** The capture transport's MIME. */
  raw?: string | undefined;
}

/** Statuses a recipient does not leave: every one but those still being worked on. */
const FINAL: ReadonlySet<RecipientStatus> = new Set(
  RECIPIENT_STATUSES.filter((status) => !PENDING.has(status)),
);

const toClaimed = (row: {
  id: string;
  email_id: string;
  project_id: string;
  address: string;
  host: string;
  status: RecipientStatus;
  attempts: number;
  ready_seq: string | number | null;
}): ClaimedRecipient => ({
  id: row.id,
  emailId: row.email_id,
  projectId: row.project_id,
  address: row.address,
  host: row.host,
  status: row.status,
  attempts: Number(row.attempts),
  seq: Number(row.ready_seq),
});

const CLAIMED_COLUMNS = [
  'id',
  'email_id',
  'project_id',
  'address',
  'host',
  'status',
  'attempts',
  'ready_seq',
] as const;

export function createSendQueueRepo(db: Kysely<Database>, engine: Engine) {
  /** Due rows, not leased (or the lease ran out: its worker died), in queue order. */
  const claimable = (now: string) =>
    db
      .selectFrom('email_recipients')
      .select('id')
      .where('ready_seq', 'is not', null)
      .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', now)]));

  /** Leases the rows `due` selects to this worker and returns them. */
  const leaseRows = async (due: ReturnType<typeof claimable>, lease: Lease): Promise<ClaimedRecipient[]> => {
    const { workerId, lockedUntil } = storedLease(lease);
    const rows = await db
      .updateTable('email_recipients')
      .set({ locked_until: lockedUntil, locked_by: workerId })
      .where(
        'id',
        'in',
        due.$if(engine === 'postgres', (query) => query.forUpdate().skipLocked()),
      )
      .returning([...CLAIMED_COLUMNS])
      .execute();
    return rows.map(toClaimed);
  };

  return {
    /**
     * Leases up to `limit` due recipients, lowest queue position first (fair across projects), skipping
     * `excludeHosts` (domains at this worker's per-host limit). One statement; PostgreSQL skips rows another
     * worker is claiming at the same moment, SQLite serializes writers.
     */
    async claim(
      lease: Lease,
      options: { limit: number; excludeHosts: readonly string[] },
    ): Promise<ClaimedRecipient[]> {
      const due = claimable(lease.now.toISOString())
        .$if(options.excludeHosts.length > 0, (query) =>
          query.where('host', 'not in', [...options.excludeHosts]),
        )
        .orderBy('ready_seq')
        .limit(options.limit);
      return (await leaseRows(due, lease)).sort((a, b) => a.seq - b.seq);
    },

    /** Also leases the other due recipients of these emails, so one SMTP transaction can carry them all. */
    async claimSiblings(lease: Lease, emailIds: readonly string[]): Promise<ClaimedRecipient[]> {
      if (emailIds.length === 0) return [];
      return leaseRows(claimable(lease.now.toISOString()).where('email_id', 'in', [...emailIds]), lease);
    },

    async loadEmails(ids: readonly string[]): Promise<Map<string, EmailRecord>> {
      if (ids.length === 0) return new Map();
      const rows = await db
        .selectFrom('emails')
        .selectAll()
        .where('id', 'in', [...ids])
        .execute();
      const attachments = await attachmentsOf(db, ids, { content: true });
      return new Map(
        rows.map((row) => [row.id, { ...toEmailRecord(row), attachments: attachments.get(row.id) ?? [] }]),
      );
    },

    /** Gives leases back without an attempt (more claimed than there are slots, or shutting down). */
    release(workerId: string, rows?: readonly string[]): Promise<void> {
      return releaseLeases(db, 'email_recipients', {
        workerId,
        rows,
        waiting: sql<boolean>`ready_seq IS NOT NULL`,
      });
    },

    /** When the earliest waiting recipient (scheduled, or a retry) becomes due. */
    async nextWaitingAt(): Promise<string | undefined> {
      const row = await db
        .selectFrom('email_recipients')
        .select((eb) => eb.fn.min('wait_until').as('next'))
        .where('wait_until', 'is not', null)
        .executeTakeFirst();
      return row?.next ?? undefined;
    },

    promoteDue: (now: string, limit: number) => promoteDue(db, { now, limit }),

    pruneQuota: (beforeDay: string) => pruneQuota(db, beforeDay),

    /**
     * Records attempts' results for each recipient, captured MIME and each email's overall status, on the
     * caller's transaction (which also emits the events: the worker groups attempts that finish together).
     * Only the lease holder moves a recipient on; returns, per attempt and update, whether it still held it.
     */
    async recordAttempts(records: readonly AttemptRecord[]): Promise<boolean[][]> {
      const held: boolean[][] = [];
      const statusOf = new Map<string, { status: EmailStatus; now: string }>();
      const unknown: AttemptRecord[] = [];
      for (const record of records) {
        const heldUpdates: boolean[] = [];
        for (const update of record.updates) {
          const final = FINAL.has(update.status);
          // First statement a write: see fair-queue.repo.ts on SQLite lock upgrades.
          const result = await db
            .updateTable('email_recipients')
            .set((eb) => ({
              status: update.status,
              attempts: eb('attempts', '+', 1),
              ready_seq: null,
              wait_until: final ? null : (update.retryAt ?? null),
              next_attempt_at: final ? null : (update.retryAt ?? null),
              locked_until: null,
              locked_by: null,
              last_attempt_at: record.attemptedAt,
              last_response: update.response,
              last_response_code: update.responseCode,
              updated_at: record.now,
              completed_at: final ? record.now : null,
            }))
            .where('id', '=', update.id)
            .where('locked_by', '=', record.workerId)
            .where('ready_seq', 'is not', null)
            .executeTakeFirst();
          heldUpdates.push(Number(result.numUpdatedRows) > 0);
        }
        held.push(heldUpdates);
        if (!heldUpdates.includes(true)) continue;
        // An email with one recipient has that recipient's status; others are summed up from every row.
        if (record.recipientCount === 1 && record.updates.length === 1) {
          statusOf.set(record.emailId, {
            status: summarizeStatus([record.updates[0]!.status]),
            now: record.now,
          });
        } else {
          unknown.push(record);
        }
        if (record.raw !== undefined) {
          await db
            .insertInto('email_raw')
            .values({
              email_id: record.emailId,
              project_id: record.projectId,
              raw: record.raw,
              created_at: record.now,
            })
            .onConflict((conflict) => conflict.column('email_id').doNothing())
            .execute();
        }
      }
      for (const record of unknown) {
        const rows = await db
          .selectFrom('email_recipients')
          .select('status')
          .where('email_id', '=', record.emailId)
          .execute();
        statusOf.set(record.emailId, {
          status: summarizeStatus(rows.map((row) => row.status)),
          now: record.now,
        });
      }
      // One UPDATE per distinct (status, time) rather than one per email.
      const groups = new Map<string, string[]>();
      for (const [emailId, { status, now }] of statusOf) {
        const key = `${status} ${now}`;
        groups.set(key, [...(groups.get(key) ?? []), emailId]);
      }
      for (const [key, ids] of groups) {
        const [status, now] = key.split(' ') as [EmailStatus, string];
        await db.updateTable('emails').set({ status, updated_at: now }).where('id', 'in', ids).execute();
      }
      return held;
    },
  };
}

export type SendQueueRepo = ReturnType<typeof createSendQueueRepo>;
