import { randomUUID } from 'node:crypto';
import { CompiledQuery, type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { createMessagePieces, keptInPieces } from '../../db/message-pieces.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import {
  type Database,
  type EmailStatus,
  type Row,
  RECIPIENT_STATUSES,
  type RecipientStatus,
} from '../../db/schema.ts';
import { type Lease, releaseLeases, storedLease } from '../../queue/lease.ts';
import {
  attachmentsOf,
  EMAIL_COLUMNS,
  type EmailRecord,
  INSERT_CHUNK,
  type NewEmail,
  type NewRecipient,
  toEmailRecord,
} from './email-rows.ts';
import { basePositions, nextPositionText, pruneQuota } from './fair-queue.repo.ts';
import { PENDING, summarizeStatus } from './status.ts';
import { skipLockedRows } from '../../db/engine/sql.ts';
import { inChunks, placeholders, statement, textsByShape, valuesTable } from '../../db/sql-text.ts';

// The email_recipients rows after their email was accepted, written only here: the sending queue (each due
// recipient row is a job, claimed by the sending worker under a lease, its attempts recorded here) and what
// reports received later (DSNs, complaints) do to them. The workers (src/modules/sending, src/modules/inbound)
// hold only the policy, and recipients.ts applies an outcome with its events and suppressions.

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
  /** The capture transport's MIME: in the record when small, else in the pieces `rawPiecesKey` names. */
  raw?: Buffer | undefined;
  rawPiecesKey?: string | undefined;
}

/** A recipient a report may be about, with its email (for the event's data). */
export interface ReportedRecipient {
  id: string;
  address: string;
  status: RecipientStatus;
  delayReportedAt: string | null;
  email: EmailRecord;
}

/** What a report says happened to a recipient after the next hop accepted it. */
export type ReportedOutcome = 'bounced' | 'delivered' | 'complained' | 'delayed';

/**
 * The statuses each outcome may move a recipient from. Reports are about mail already handed on, so only
 * `sent` (accepted by a relay) and `delivered` (accepted by the final server) recipients move: a bounce or a
 * complaint can follow a delivery, a delivery only a hand-off. Anything else is a late or repeated report.
 */
const MOVES_FROM: Record<ReportedOutcome, readonly RecipientStatus[]> = {
  bounced: ['sent', 'delivered'],
  complained: ['sent', 'delivered'],
  delivered: ['sent'],
  // A delay changes no status (the relay is still trying): it is only said once per waiting streak.
  delayed: ['sent'],
};

const REPORTED_COLUMNS = ['id', 'email_id', 'address', 'status', 'delay_reported_at'] as const;

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

/**
 * A recipient's attempt as the row of values its statement reads (`v`), by column; the last two (PostgreSQL
 * only) move its email's status in the same statement.
 */
const RECIPIENT_OUTCOME_COLUMNS = [
  'id',
  'worker',
  'status',
  'retry_at',
  'attempted_at',
  'response',
  'response_code',
  'now',
  'completed_at',
  'email_id',
  'email_status',
] as const;

/** An email as the sending worker needs it: with its attachments, and whether it asked for tracking. */
export type LoadedEmail = EmailRecord & { tracked: boolean };

/** Whether an email (the `emails` row in the query) has attachments, and whether it asked for tracking. */
const EMAIL_FLAGS = `EXISTS (SELECT 1 FROM email_attachments WHERE email_attachments.email_id = emails.id) AS has_attachments,
  EXISTS (SELECT 1 FROM email_tracking WHERE email_tracking.email_id = emails.id) AS tracked`;

/** An email's row with its flags, named (not `emails.*`: see claimWithEmails). */
const LOADED_EMAIL_COLUMNS = `${EMAIL_COLUMNS.map((column) => `emails.${column}`).join(', ')}, ${EMAIL_FLAGS}`;

type LoadedEmailRow = Row<'emails'> & { has_attachments: unknown; tracked: unknown };

// A recipient row's columns, in its INSERT's order (ready_seq an expression for a due row, see
// nextPositionText).
const RECIPIENT_COLUMNS = [
  'id',
  'email_id',
  'project_id',
  'position',
  'type',
  'address',
  'host',
  'created_at',
  'updated_at',
  'status',
  'ready_seq',
  'wait_until',
  'next_attempt_at',
  'completed_at',
] as const;

/**
 * A due row's place in the queue, read in the INSERT itself (nextPositionText): its project, and its place
 * among that project's due rows in the statement, from 1.
 */
interface QueuePosition {
  projectId: string;
  place: number;
}

/**
 * A recipient's row as the INSERT writes it, by column: suppressed (never queued), waiting for its scheduled
 * time, or due at `position` (its ready_seq, then an expression of the position's two parameters).
 */
function recipientRow(
  email: NewEmail,
  recipient: NewRecipient,
  position: QueuePosition | null,
): Record<(typeof RECIPIENT_COLUMNS)[number], unknown> {
  const waiting = !recipient.suppressed && email.scheduledAt !== null;
  return {
    id: recipient.id,
    email_id: email.id,
    project_id: email.projectId,
    position: recipient.position,
    type: recipient.type,
    address: recipient.address,
    host: recipient.host,
    created_at: email.createdAt,
    updated_at: email.createdAt,
    status: recipient.suppressed ? 'suppressed' : 'queued',
    ready_seq: position,
    wait_until: waiting ? email.scheduledAt : null,
    next_attempt_at: recipient.suppressed ? null : (email.scheduledAt ?? email.createdAt),
    completed_at: recipient.suppressed ? email.createdAt : null,
  };
}

/**
 * An UPDATE, in `trx`, of the email's recipients still waiting for its scheduled time: not yet promoted into
 * the queue (so no worker can hold one), their time still to come. The rows a cancel or a reschedule may
 * change; the caller sets what changes.
 */
function updateStillWaiting(trx: Kysely<Database>, projectId: string, emailId: string, now: string) {
  return trx
    .updateTable('email_recipients')
    .where('email_id', '=', emailId)
    .where('project_id', '=', projectId)
    .where('status', '=', 'queued')
    .where('wait_until', '>', now);
}

export function createRecipientRepo(db: Kysely<Database>, engine: Engine) {
  const pieces = createMessagePieces(db);
  // The accepting INSERT, written as SQL text once per shape (which rows are due `q`, the others `v`): built
  // with the query builder it cost more CPU than running.
  const recipientsInsert = textsByShape((shape) => {
    const slot = placeholders(engine);
    const rows = [...shape].map((kind) => {
      const values = RECIPIENT_COLUMNS.map((column) =>
        column === 'ready_seq' && kind === 'q' ? nextPositionText(engine, slot) : slot(),
      );
      return `(${values.join(', ')})`;
    });
    return `INSERT INTO email_recipients (${RECIPIENT_COLUMNS.join(', ')}) VALUES ${rows.join(', ')}`;
  });
  // The claims as SQL text (sql-text.ts), one spelling for both engines: building them was most of the query
  // builder's time in a sending worker. Each leases the due rows its WHERE picks (not leased, or the lease ran
  // out: its worker died) and returns them; its parameters: the lease's end and worker, now, then the WHERE's.
  const claimText = (which: (slot: () => string) => string) => {
    const slot = placeholders(engine);
    const lease = `locked_until = ${slot()}, locked_by = ${slot()}`;
    const due = `ready_seq IS NOT NULL AND (locked_until IS NULL OR locked_until < ${slot()})${which(slot)}`;
    const rows = `SELECT id FROM email_recipients WHERE ${due}${skipLockedRows(engine)}`;
    return `UPDATE email_recipients SET ${lease} WHERE id IN (${rows}) RETURNING ${CLAIMED_COLUMNS.join(', ')}`;
  };
  // Shape: how many hosts are excluded. Then the limit: the lowest queue positions first.
  const nextDueText = textsByShape((excluded) =>
    claimText((slot) => {
      const hosts = Array.from({ length: Number(excluded) }, slot).join(', ');
      return `${hosts ? ` AND host NOT IN (${hosts})` : ''} ORDER BY ready_seq LIMIT ${slot()}`;
    }),
  );
  // Shape: how many emails' recipients.
  const siblingsText = textsByShape((emails) =>
    claimText((slot) => ` AND email_id IN (${Array.from({ length: Number(emails) }, slot).join(', ')})`),
  );
  // PostgreSQL: the claimed rows' emails come back from the claiming statement. Named columns, not `emails.*`:
  // the statement is prepared (src/db/engine/postgres.ts), and a prepared statement whose result columns
  // change under a migration fails instead of being planned again.
  const nextDueWithEmailsText = textsByShape(
    (excluded) => `WITH claimed AS (${nextDueText(excluded)})
      SELECT ${LOADED_EMAIL_COLUMNS}, ${CLAIMED_COLUMNS.map((column) => `claimed.${column} AS claimed_${column}`).join(', ')}
      FROM claimed JOIN emails ON emails.id = claimed.email_id`,
  );
  const loadText = textsByShape((count) => {
    const slot = placeholders(engine);
    const ids = Array.from({ length: Number(count) }, slot).join(', ');
    return `SELECT ${LOADED_EMAIL_COLUMNS} FROM emails WHERE id IN (${ids})`;
  });
  const claimParameters = (lease: Lease, ...where: unknown[]) => {
    const { workerId, now, lockedUntil } = storedLease(lease);
    return [lockedUntil, workerId, now, ...where];
  };

  /**
   * Emails' rows made into loaded emails: the attachments read only for emails that have some, and the
   * submitted message only for SMTP submissions.
   */
  async function withAttachments(rows: readonly LoadedEmailRow[]): Promise<Map<string, LoadedEmail>> {
    const withFiles = [...new Set(rows.filter((row) => Boolean(row.has_attachments)).map((row) => row.id))];
    const attachments = await attachmentsOf(db, withFiles, { content: true });
    const submittedIds = [...new Set(rows.filter((row) => row.source === 'smtp').map((row) => row.id))];
    const submitted = new Map<string, ByteChunks>();
    if (submittedIds.length > 0) {
      const found = await db
        .selectFrom('email_submissions')
        .select(['email_id', 'raw', 'pieces_key'])
        .where('email_id', 'in', submittedIds)
        .execute();
      for (const row of found) {
        submitted.set(
          row.email_id,
          row.pieces_key === null ? [Buffer.from(row.raw)] : await pieces.read(row.pieces_key),
        );
      }
    }
    return new Map(
      rows.map((row) => [
        row.id,
        {
          ...toEmailRecord(row),
          attachments: attachments.get(row.id) ?? [],
          tracked: Boolean(row.tracked),
          submitted: submitted.get(row.id),
        },
      ]),
    );
  }

  /** Recipient rows with their emails (a report's event carries the email's fields). */
  async function withEmails(
    rows: ReadonlyArray<Pick<Row<'email_recipients'>, (typeof REPORTED_COLUMNS)[number]>>,
  ): Promise<ReportedRecipient[]> {
    if (rows.length === 0) return [];
    const emails = await db
      .selectFrom('emails')
      .selectAll()
      .where('id', 'in', [...new Set(rows.map((row) => row.email_id))])
      .execute();
    const byId = new Map(emails.map((row) => [row.id, toEmailRecord(row)]));
    return rows.flatMap((row) => {
      const email = byId.get(row.email_id);
      return email
        ? [
            {
              id: row.id,
              address: row.address,
              status: row.status,
              delayReportedAt: row.delay_reported_at,
              email,
            },
          ]
        : [];
    });
  }

  return {
    /**
     * The recipients of emails just accepted, in `trx` (the accepting transaction, with their emails): due ones
     * take the queue positions after their project's last, read in the INSERT itself (fair-queue.repo.ts);
     * scheduled ones wait; suppressed ones are stored as such, never queued.
     */
    async insertAccepted(trx: Kysely<Database>, emails: readonly NewEmail[]): Promise<void> {
      const rows = emails.flatMap((email) => email.recipients.map((recipient) => ({ email, recipient })));
      // Each statement's due rows take the queue positions after their project's last (read in the INSERT).
      await inChunks(rows, INSERT_CHUNK, (chunk) => {
        const taken = new Map<string, number>();
        let shape = '';
        const parameters: unknown[] = [];
        for (const { email, recipient } of chunk) {
          let position: QueuePosition | null = null;
          if (!recipient.suppressed && email.scheduledAt === null) {
            const place = (taken.get(email.projectId) ?? 0) + 1;
            taken.set(email.projectId, place);
            position = { projectId: email.projectId, place };
          }
          shape += position ? 'q' : 'v';
          const row = recipientRow(email, recipient, position);
          for (const column of RECIPIENT_COLUMNS) {
            if (column === 'ready_seq' && position) parameters.push(position.projectId, position.place);
            else parameters.push(row[column]);
          }
        }
        return trx.executeQuery(CompiledQuery.raw(recipientsInsert(shape), parameters));
      });
    },

    /**
     * Cancels, in `trx`, the recipients of a scheduled email that are still waiting for its time (none of them
     * in the queue yet, so no worker can hold one); how many it cancelled.
     */
    async cancelWaiting(
      trx: Kysely<Database>,
      projectId: string,
      emailId: string,
      now: string,
    ): Promise<number> {
      const cancelled = await updateStillWaiting(trx, projectId, emailId, now)
        .set({
          status: 'cancelled',
          wait_until: null,
          next_attempt_at: null,
          updated_at: now,
          completed_at: now,
        })
        .executeTakeFirst();
      return Number(cancelled.numUpdatedRows);
    },

    /**
     * Moves the email's recipients still waiting for their scheduled time (not yet promoted into the queue,
     * so no worker can hold them) to `at`; returns how many moved.
     */
    async rescheduleWaiting(
      trx: Kysely<Database>,
      projectId: string,
      emailId: string,
      at: string,
      now: string,
    ): Promise<number> {
      const moved = await updateStillWaiting(trx, projectId, emailId, now)
        .set({ wait_until: at, next_attempt_at: at, updated_at: now })
        .executeTakeFirst();
      return Number(moved.numUpdatedRows);
    },

    /**
     * Leases up to `limit` due recipients, lowest queue position first (fair across projects), skipping
     * `excludeHosts` (domains at this worker's per-host limit). One statement; PostgreSQL skips rows another
     * worker is claiming at the same moment, SQLite serializes writers.
     */
    async claim(
      lease: Lease,
      options: { limit: number; excludeHosts: readonly string[] },
    ): Promise<ClaimedRecipient[]> {
      const { rows } = await db.executeQuery<Parameters<typeof toClaimed>[0]>(
        CompiledQuery.raw(
          nextDueText(String(options.excludeHosts.length)),
          claimParameters(lease, ...options.excludeHosts, options.limit),
        ),
      );
      return rows.map(toClaimed).sort((a, b) => a.seq - b.seq);
    },

    /**
     * Writes a large captured MIME's pieces, before the transaction that records the attempt (see
     * db/message-pieces.ts); the key for its AttemptRecord, or undefined for a small one (kept in the record).
     */
    async keepLargeCaptureInPieces(emailId: string, raw: Buffer): Promise<string | undefined> {
      if (!keptInPieces(raw.length)) return undefined;
      // Each attempt's own: two attempts of one email may both capture, and the first recorded is kept.
      const key = `capture:${emailId}:${randomUUID()}`;
      await pieces.write(key, [raw]);
      return key;
    },

    /** Also leases the other due recipients of these emails, so one SMTP transaction can carry them all. */
    async claimSiblings(lease: Lease, emailIds: readonly string[]): Promise<ClaimedRecipient[]> {
      if (emailIds.length === 0) return [];
      const { rows } = await db.executeQuery<Parameters<typeof toClaimed>[0]>(
        CompiledQuery.raw(siblingsText(String(emailIds.length)), claimParameters(lease, ...emailIds)),
      );
      return rows.map(toClaimed);
    },

    /**
     * Leases up to `limit` due recipients, as claim() does, and loads their emails, as loadEmails() does. On
     * PostgreSQL the emails come back from the claiming statement: one round trip instead of two. (SQLite
     * cannot write in a WITH; in process, it has no round trips to save.)
     */
    async claimWithEmails(
      lease: Lease,
      options: { limit: number; excludeHosts: readonly string[] },
    ): Promise<{ recipients: ClaimedRecipient[]; emails: Map<string, LoadedEmail> }> {
      if (engine !== 'postgres') {
        const recipients = await this.claim(lease, options);
        return {
          recipients,
          emails: await this.loadEmails([...new Set(recipients.map((row) => row.emailId))]),
        };
      }
      type ClaimedColumn = (typeof CLAIMED_COLUMNS)[number];
      const { rows } = await db.executeQuery<
        LoadedEmailRow & { [C in ClaimedColumn as `claimed_${C}`]: Parameters<typeof toClaimed>[0][C] }
      >(
        CompiledQuery.raw(
          nextDueWithEmailsText(String(options.excludeHosts.length)),
          claimParameters(lease, ...options.excludeHosts, options.limit),
        ),
      );
      const recipients = rows
        .map((row) =>
          toClaimed({
            id: row.claimed_id,
            email_id: row.claimed_email_id,
            project_id: row.claimed_project_id,
            address: row.claimed_address,
            host: row.claimed_host,
            status: row.claimed_status,
            attempts: row.claimed_attempts,
            ready_seq: row.claimed_ready_seq,
          }),
        )
        .sort((a, b) => a.seq - b.seq);
      return { recipients, emails: await withAttachments(rows) };
    },

    /**
     * The claimed emails, each with its attachments and whether it asked for tracking (`tracked`): one
     * statement in the common case, since the attachments are read only for emails that have some.
     */
    async loadEmails(ids: readonly string[]): Promise<Map<string, LoadedEmail>> {
      if (ids.length === 0) return new Map();
      const { rows } = await db.executeQuery<LoadedEmailRow>(
        CompiledQuery.raw(loadText(String(ids.length)), [...ids]),
      );
      return withAttachments(rows);
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

    /**
     * Moves waiting rows that are now due (scheduled sends, retries) into the queue, at most `limit` at a
     * time, each project's after its own queued rows (fair-queue.repo.ts): a burst of scheduled sends queues
     * behind other projects' fresh sends rather than ahead of them. Without a transaction: a row another
     * worker promoted first is skipped (the update only takes rows still waiting).
     */
    async promoteDue(now: string, limit: number): Promise<number> {
      const due = await db
        .selectFrom('email_recipients')
        .select(['id', 'project_id'])
        .where('wait_until', 'is not', null)
        .where('wait_until', '<=', now)
        .orderBy('wait_until')
        .limit(limit)
        .execute();
      if (due.length === 0) return 0;
      const next = await basePositions(db, [...new Set(due.map((row) => row.project_id))]);
      const cases = due.map((row) => {
        const position = next.get(row.project_id)! + 1;
        next.set(row.project_id, position);
        // Typed, or PostgreSQL reads the parameters of a CASE as text.
        return sql`WHEN ${row.id} THEN CAST(${position} AS BIGINT)`;
      });
      const result = await db
        .updateTable('email_recipients')
        .set({ wait_until: null, ready_seq: sql<number>`CASE id ${sql.join(cases, sql` `)} END` })
        .where(
          'id',
          'in',
          due.map((row) => row.id),
        )
        .where('wait_until', 'is not', null)
        .executeTakeFirst();
      return Number(result.numUpdatedRows);
    },

    pruneQuota: (beforeDay: string) => pruneQuota(db, beforeDay),

    /**
     * Records attempts' results for each recipient, captured MIME and each email's overall status, on the
     * caller's transaction (which also emits the events: the worker groups attempts that finish together).
     * Only the lease holder moves a recipient on; returns, per attempt and update, whether it still held it.
     */
    async recordAttempts(records: readonly AttemptRecord[]): Promise<boolean[][]> {
      /** An email with one recipient has that recipient's status: known before the write. */
      const statusKnown = (record: AttemptRecord) =>
        record.recipientCount === 1 && record.updates.length === 1;
      // On PostgreSQL those emails' statuses move in the recipients' statement (each only if its recipient's
      // lease still held): one round trip fewer per batch.
      const emailsWithRecipients = engine === 'postgres';
      // Every recipient's new state in one statement, however many attempts finished together; first a write
      // (see fair-queue.repo.ts on SQLite lock upgrades). RETURNING names the rows whose lease still held.
      const update = statement(engine);
      const values = records.flatMap((record) =>
        record.updates.map((change) => {
          const final = FINAL.has(change.status);
          return {
            id: change.id,
            worker: record.workerId,
            status: change.status,
            retry_at: final ? null : (change.retryAt ?? null),
            attempted_at: record.attemptedAt,
            response: change.response,
            response_code: change.responseCode,
            now: record.now,
            completed_at: final ? record.now : null,
            email_id: record.emailId,
            email_status: statusKnown(record) ? summarizeStatus([change.status]) : null,
          };
        }),
      );
      const recipients = `UPDATE email_recipients SET status = v.status, attempts = email_recipients.attempts + 1,
          ready_seq = NULL, wait_until = v.retry_at, next_attempt_at = v.retry_at, locked_until = NULL,
          locked_by = NULL, last_attempt_at = v.attempted_at, last_response = v.response,
          last_response_code = v.response_code, updated_at = v.now, completed_at = v.completed_at
        FROM v WHERE email_recipients.id = v.id AND email_recipients.locked_by = v.worker
          AND email_recipients.ready_seq IS NOT NULL
        RETURNING email_recipients.id`;
      const columns = emailsWithRecipients
        ? RECIPIENT_OUTCOME_COLUMNS
        : RECIPIENT_OUTCOME_COLUMNS.slice(0, -2);
      const withValues = `WITH ${valuesTable('v', columns, values, update.param, { response_code: 'integer' })}`;
      const { rows: updated } =
        values.length === 0
          ? { rows: [] }
          : await db.executeQuery<{ id: string }>(
              update.compile(
                emailsWithRecipients
                  ? `${withValues}, updated AS (${recipients}),
                      emails_updated AS (UPDATE emails SET status = v.email_status, updated_at = v.now
                        FROM v JOIN updated ON updated.id = v.id
                        WHERE emails.id = v.email_id AND v.email_status IS NOT NULL)
                    SELECT id FROM updated`
                  : `${withValues} ${recipients}`,
              ),
            );
      const stillHeld = new Set(updated.map((row) => row.id));
      const held = records.map((record) => record.updates.map((change) => stillHeld.has(change.id)));

      const statusOf = new Map<string, { status: EmailStatus; now: string }>();
      for (const [index, record] of records.entries()) {
        if (!held[index]!.includes(true)) continue;
        if (!statusKnown(record)) {
          // Summed up from every recipient's row, this write's included.
          const rows = await db
            .selectFrom('email_recipients')
            .select('status')
            .where('email_id', '=', record.emailId)
            .execute();
          statusOf.set(record.emailId, {
            status: summarizeStatus(rows.map((row) => row.status)),
            now: record.now,
          });
        } else if (!emailsWithRecipients) {
          statusOf.set(record.emailId, {
            status: summarizeStatus([record.updates[0]!.status]),
            now: record.now,
          });
        }
        if (record.raw !== undefined) {
          await db
            .insertInto('email_raw')
            .values({
              email_id: record.emailId,
              project_id: record.projectId,
              raw: record.rawPiecesKey === undefined ? record.raw.toString('utf8') : '',
              pieces_key: record.rawPiecesKey ?? null,
              created_at: record.now,
            })
            .onConflict((conflict) => conflict.column('email_id').doNothing())
            .execute();
        }
      }
      // The other emails' overall status in one statement.
      if (statusOf.size > 0) {
        const emails = statement(engine);
        const rows = [...statusOf].map(([id, { status, now }]) => ({ id, status, now }));
        await db.executeQuery(
          emails.compile(`WITH ${valuesTable('v', ['id', 'status', 'now'], rows, emails.param)}
            UPDATE emails SET status = v.status, updated_at = v.now FROM v WHERE emails.id = v.id`),
        );
      }
      return held;
    },

    async findById(recipientId: string): Promise<ReportedRecipient | undefined> {
      const rows = await db
        .selectFrom('email_recipients')
        .select([...REPORTED_COLUMNS])
        .where('id', '=', recipientId)
        .execute();
      return (await withEmails(rows))[0];
    },

    /** The email with this Message-ID (`<…>`), or with this id (a DSN's ENVID), if any. */
    async findEmail(reference: { messageId?: string | null; emailId?: string | null }) {
      if (!reference.messageId && !reference.emailId) return undefined;
      const row = await db
        .selectFrom('emails')
        .selectAll()
        .$if(Boolean(reference.messageId), (query) => query.where('message_id', '=', reference.messageId!))
        .$if(!reference.messageId, (query) => query.where('id', '=', reference.emailId!))
        .executeTakeFirst();
      return row ? toEmailRecord(row) : undefined;
    },

    /**
     * The conversation a received reply belongs to: the newest of this project's emails whose Message-ID is
     * among `messageIds` (In-Reply-To first, then References), and the recipient it went to: the one at the
     * reply's From address, else its only recipient. Undefined when none of them is one of ours.
     */
    async findThread(
      projectId: string,
      messageIds: readonly string[],
      replyFrom: string | null,
    ): Promise<{ emailId: string; recipient: string | null } | undefined> {
      if (messageIds.length === 0) return undefined;
      const emails = await db
        .selectFrom('emails')
        .select(['id', 'message_id'])
        .where('project_id', '=', projectId)
        .where('message_id', 'in', messageIds.slice(0, 100))
        .execute();
      if (emails.length === 0) return undefined;
      const rank = (messageId: string) => messageIds.indexOf(messageId);
      const email = emails.sort((a, b) => rank(a.message_id) - rank(b.message_id))[0]!;
      const recipients = await db
        .selectFrom('email_recipients')
        .select('address')
        .where('email_id', '=', email.id)
        .orderBy('position')
        .limit(1000)
        .execute();
      const from = replyFrom?.toLowerCase();
      const match = recipients.find((recipient) => recipient.address.toLowerCase() === from);
      const recipient = match ?? (recipients.length === 1 ? recipients[0] : undefined);
      return { emailId: email.id, recipient: recipient?.address ?? null };
    },

    /** The recipients of an email, to find the one a report names by its address. */
    async recipientsOf(emailId: string): Promise<ReportedRecipient[]> {
      const rows = await db
        .selectFrom('email_recipients')
        .select([...REPORTED_COLUMNS])
        .where('email_id', '=', emailId)
        .orderBy('position')
        .execute();
      return withEmails(rows);
    },

    /**
     * Applies a report's outcome if the recipient is still where the outcome may move it from (checked in
     * the statement itself, so two reports racing move it once), and refreshes its email's status. Run on
     * the caller's transaction, which also emits the event. True when something changed.
     */
    async applyReported(
      recipient: ReportedRecipient,
      outcome: ReportedOutcome,
      details: { response: string | null; now: string },
    ): Promise<boolean> {
      const from = [...MOVES_FROM[outcome]];
      if (outcome === 'delayed') {
        const result = await db
          .updateTable('email_recipients')
          .set({ delay_reported_at: details.now, updated_at: details.now })
          .where('id', '=', recipient.id)
          .where('status', 'in', from)
          .where('delay_reported_at', 'is', null)
          .executeTakeFirst();
        return Number(result.numUpdatedRows) > 0;
      }
      const result = await db
        .updateTable('email_recipients')
        .set({
          status: outcome,
          delay_reported_at: null,
          updated_at: details.now,
          ...(details.response !== null ? { last_response: details.response } : {}),
        })
        .where('id', '=', recipient.id)
        .where('status', 'in', from)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) return false;
      const statuses = await db
        .selectFrom('email_recipients')
        .select('status')
        .where('email_id', '=', recipient.email.id)
        .execute();
      await db
        .updateTable('emails')
        .set({ status: summarizeStatus(statuses.map((row) => row.status)), updated_at: details.now })
        .where('id', '=', recipient.email.id)
        .execute();
      return true;
    },
  };
}

export type RecipientRepo = ReturnType<typeof createRecipientRepo>;
