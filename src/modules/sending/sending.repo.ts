import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import type { Database, EmailStatus, RecipientStatus, Row } from '../../db/schema.ts';
import { newId } from '../../lib/ids.ts';
import { type EmailRecord, toEmailRecord } from '../emails/emails.repo.ts';
import { summarizeStatus } from '../emails/status.ts';
import { promoteDue, pruneQuota } from './fair-queue.ts';

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
  /** Events to emit for this recipient, in order, with their data. */
  events: Array<{ type: string; data: Record<string, unknown> }>;
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

export type StoredEmailEvent = Row<'email_events'>;

const FINAL: ReadonlySet<RecipientStatus> = new Set([
  'sent',
  'delivered',
  'bounced',
  'failed',
  'complained',
  'cancelled',
]);

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

export function createSendingRepo(db: Kysely<Database>, engine: Engine) {
  /** Due rows, not leased (or the lease ran out: its worker died), in queue order. */
  const claimable = (now: string) =>
    db
      .selectFrom('email_recipients')
      .select('id')
      .where('ready_seq', 'is not', null)
      .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', now)]));

  /** Leases the rows `due` selects to this worker and returns them. */
  const lease = async (
    due: ReturnType<typeof claimable>,
    options: { workerId: string; lockedUntil: string },
  ): Promise<ClaimedRecipient[]> => {
    const rows = await db
      .updateTable('email_recipients')
      .set({ locked_until: options.lockedUntil, locked_by: options.workerId })
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
    async claim(options: {
      workerId: string;
      now: string;
      lockedUntil: string;
      limit: number;
      excludeHosts: readonly string[];
    }): Promise<ClaimedRecipient[]> {
      const due = claimable(options.now)
        .$if(options.excludeHosts.length > 0, (query) =>
          query.where('host', 'not in', [...options.excludeHosts]),
        )
        .orderBy('ready_seq')
        .limit(options.limit);
      return (await lease(due, options)).sort((a, b) => a.seq - b.seq);
    },

    /** Also leases the other due recipients of these emails, so one SMTP transaction can carry them all. */
    async claimSiblings(options: {
      workerId: string;
      now: string;
      lockedUntil: string;
      emailIds: readonly string[];
    }): Promise<ClaimedRecipient[]> {
      if (options.emailIds.length === 0) return [];
      return lease(claimable(options.now).where('email_id', 'in', [...options.emailIds]), options);
    },

    async loadEmails(ids: readonly string[]): Promise<Map<string, EmailRecord>> {
      if (ids.length === 0) return new Map();
      const rows = await db
        .selectFrom('emails')
        .selectAll()
        .where('id', 'in', [...ids])
        .execute();
      return new Map(rows.map((row) => [row.id, toEmailRecord(row)]));
    },

    /** Gives leases back without an attempt (more claimed than there are slots, or shutting down). */
    async release(workerId: string, ids?: readonly string[]): Promise<void> {
      if (ids !== undefined && ids.length === 0) return;
      await db
        .updateTable('email_recipients')
        .set({ locked_until: null, locked_by: null })
        .where('ready_seq', 'is not', null)
        .where('locked_by', '=', workerId)
        .$if(ids !== undefined, (query) => query.where('id', 'in', [...ids!]))
        .execute();
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
     * Records attempts' results for each recipient, their events (the outbox the worker then emits from),
     * captured MIME and each email's overall status, all in one transaction (the worker groups attempts
     * that finish together). Only the lease holder moves a recipient on; returns, per attempt, the events
     * written for the recipients it still held.
     */
    async recordAttempts(records: readonly AttemptRecord[]): Promise<StoredEmailEvent[][]> {
      return db.transaction().execute(async (trx) => {
        const written: StoredEmailEvent[][] = [];
        const statusOf = new Map<string, { status: EmailStatus; now: string }>();
        const unknown: AttemptRecord[] = [];
        for (const record of records) {
          const events: StoredEmailEvent[] = [];
          let held = 0;
          for (const update of record.updates) {
            const final = FINAL.has(update.status);
            // First statement a write: see fair-queue.ts on SQLite lock upgrades.
            const result = await trx
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
            if (Number(result.numUpdatedRows) === 0) continue;
            held += 1;
            for (const event of update.events) {
              events.push({
                id: newId('eev'),
                email_id: record.emailId,
                project_id: record.projectId,
                recipient: String(event.data.recipient ?? ''),
                type: event.type,
                data: JSON.stringify(event.data),
                created_at: record.now,
                event_id: null,
              });
            }
          }
          written.push(events);
          if (held === 0) continue;
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
            await trx
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
        const events = written.flat();
        for (let start = 0; start < events.length; start += 500) {
          await trx
            .insertInto('email_events')
            .values(events.slice(start, start + 500))
            .execute();
        }
        for (const record of unknown) {
          const rows = await trx
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
          await trx.updateTable('emails').set({ status, updated_at: now }).where('id', 'in', ids).execute();
        }
        return written;
      });
    },

    /** Notes the event ids of emitted events, in one statement. */
    async markEmitted(pairs: ReadonlyArray<{ id: string; eventId: string }>): Promise<void> {
      if (pairs.length === 0) return;
      const cases = sql.join(
        pairs.map((pair) => sql`WHEN ${pair.id} THEN ${pair.eventId}`),
        sql` `,
      );
      await db
        .updateTable('email_events')
        .set({ event_id: sql<string>`CASE id ${cases} END` })
        .where(
          'id',
          'in',
          pairs.map((pair) => pair.id),
        )
        .where('event_id', 'is', null)
        .execute();
    },

    /** Events written but not emitted for a while: their worker died between the two steps. */
    async unemittedEvents(olderThan: string, limit: number): Promise<StoredEmailEvent[]> {
      return db
        .selectFrom('email_events')
        .selectAll()
        .where('event_id', 'is', null)
        .where('created_at', '<', olderThan)
        .orderBy('created_at')
        .orderBy('id')
        .limit(limit)
        .execute();
    },
  };
}

export type SendingRepo = ReturnType<typeof createSendingRepo>;
