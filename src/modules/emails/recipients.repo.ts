import { CompiledQuery, type Kysely, sql } from 'kysely';
import { type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Engine } from '../../db/connection.ts';
import type { Database, Row, RecipientStatus } from '../../db/schema.ts';
import {
  type EmailRecord,
  INSERT_CHUNK,
  type NewEmail,
  type NewRecipient,
  toEmailRecord,
} from './email-rows.ts';
import { nextPositionText } from './fair-queue.repo.ts';
import { summarizeStatus } from './status.ts';
import { columnArrays, placeholders, textsByShape, unnestedRows } from '../../db/sql-text.ts';

// The email_recipients rows as the API and reports write them: their insert when the email is accepted,
// cancelling and rescheduling a scheduled send, and what reports received later (DSNs, complaints) do to
// them. The sending queue's claims, promotions and attempt outcomes are its adapter's
// (src/modules/sending/sending.queue.ts); recipients.ts applies an outcome with its events and suppressions.

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
/** With direct delivery, last: the host again, for the paced lanes' index (migration 0047). */
const DIRECT_RECIPIENT_COLUMNS = [...RECIPIENT_COLUMNS, 'paced_host'] as const;
type RecipientColumn = (typeof DIRECT_RECIPIENT_COLUMNS)[number];

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
): Record<RecipientColumn, unknown> {
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
    paced_host: recipient.suppressed ? null : recipient.host,
  };
}

/**
 * An UPDATE, in `transaction`, of the email's recipients still waiting for its scheduled time: not yet promoted into
 * the queue (so no worker can hold one), their time still to come. The rows a cancel or a reschedule may
 * change; the caller sets what changes.
 */
function updateStillWaiting(projectId: string, emailId: string, now: string, transaction: Transaction) {
  return transaction.db
    .updateTable('email_recipients')
    .where('email_id', '=', emailId)
    .where('project_id', '=', projectId)
    .where('status', '=', 'queued')
    .where('wait_until', '>', now);
}

/** An email as a contact's activity lists it: sent to the address, with that recipient's status. */
export interface AddressEmail {
  id: string;
  from: string;
  subject: string;
  broadcastId: string | null;
  createdAt: string;
  address: string;
  status: RecipientStatus;
}

export function createRecipientRepo(
  db: Kysely<Database>,
  engine: Engine,
  /**
   * Recipients are sent in direct mode (MAIL_TRANSPORT=direct): each row is written with its `paced_host`,
   * which the paced lanes' index holds while it is queued (migration 0047). Otherwise the INSERT leaves it
   * out, and no index entry is written that no look of a relay or capture reads.
   */
  options: { directDelivery?: boolean } = {},
) {
  const columns: readonly RecipientColumn[] = options.directDelivery
    ? DIRECT_RECIPIENT_COLUMNS
    : RECIPIENT_COLUMNS;
  // The accepting INSERT, written as SQL text once per shape (which rows are due `q`, due in the bulk band
  // `b` (a broadcast's copies), the others `v`, or `p`: due at a position read before, a parameter): built
  // with the query builder it cost more CPU than running.
  const recipientsInsert = textsByShape((shape) => {
    const slot = placeholders(engine);
    const rows = [...shape].map((kind) => {
      const values = columns.map((column) =>
        column === 'ready_seq' && (kind === 'q' || kind === 'b')
          ? nextPositionText(engine, slot, kind === 'b' ? 'bulk' : 'transactional')
          : slot(),
      );
      return `(${values.join(', ')})`;
    });
    return `INSERT INTO email_recipients (${columns.join(', ')}) VALUES ${rows.join(', ')}`;
  });
  // PostgreSQL: the same INSERT taking its rows as one array per column (unnestedRows), one text per
  // condition whatever the number of rows: a due row's `ready_seq` parameter is its place among its project's
  // due rows, made its queue position in the statement (nextPositionText, reading the project from the row;
  // the statement does not see its own rows, so every row's project last is read as it was before it).
  const acceptedRowsText = textsByShape((condition) => {
    const fromRow = ['v.project_id', 'v.ready_seq'];
    const queuePosition = nextPositionText(engine, () => fromRow.shift()!);
    const values = columns.map((column) =>
      column === 'ready_seq'
        ? `CASE WHEN v.ready_seq IS NULL THEN NULL ELSE ${queuePosition} END`
        : `v.${column}`,
    );
    const rows = unnestedRows(columns, { position: 'integer', ready_seq: 'bigint' });
    return `INSERT INTO email_recipients (${columns.join(', ')}) SELECT ${values.join(', ')} FROM ${rows} WHERE ${condition}`;
  });
  /** A project's last position in the bulk band (the next row's is one after it), with a place of 0. */
  const bulkBaseText = `SELECT ${nextPositionText(engine, placeholders(engine), 'bulk')} AS base`;
  /**
   * The statements inserting the recipients of emails just accepted (insertAccepted's), INSERT_CHUNK rows each,
   * their placeholders numbered from the first, each made when the one before has been taken: for a caller
   * that runs them as part of a statement of its own (emails.repo.ts, on PostgreSQL).
   */
  function* acceptedInserts(
    emails: readonly NewEmail[],
    /** The bulk band's last position of each project, read before (bulkBases): its rows numbered after it. */
    bulkBases?: ReadonlyMap<string, number>,
  ): Generator<CompiledQuery> {
    const rows = emails.flatMap((email) => email.recipients.map((recipient) => ({ email, recipient })));
    // Each statement's due rows take the queue positions after their project's last (read in the INSERT).
    for (let start = 0; start < rows.length; start += INSERT_CHUNK) {
      // Places by project and band (a broadcast's copies are numbered in the bulk band).
      const taken = new Map<string, number>();
      let shape = '';
      const parameters: unknown[] = [];
      for (const { email, recipient } of rows.slice(start, start + INSERT_CHUNK)) {
        let position: QueuePosition | null = null;
        const bulk = Boolean(email.broadcastId);
        if (!recipient.suppressed && email.scheduledAt === null) {
          const key = `${bulk ? 'b' : 'q'} ${email.projectId}`;
          const place = (taken.get(key) ?? 0) + 1;
          taken.set(key, place);
          position = { projectId: email.projectId, place };
        }
        const base = bulk && position ? bulkBases?.get(email.projectId) : undefined;
        shape += position ? (base !== undefined ? 'p' : bulk ? 'b' : 'q') : 'v';
        const row = recipientRow(email, recipient, position);
        for (const column of columns) {
          if (column !== 'ready_seq' || !position) parameters.push(row[column]);
          else if (base !== undefined) parameters.push(base + position.place);
          else parameters.push(position.projectId, position.place);
        }
      }
      yield CompiledQuery.raw(recipientsInsert(shape), parameters);
    }
  }
  /**
   * PostgreSQL: the recipients of emails just accepted, of the transactional band (no broadcast's copies), as
   * one statement whose text depends on `condition` only (acceptedRowsText), inserting its rows only when
   * `condition` holds: for a caller that runs it as part of a statement of its own (emails.repo.ts).
   */
  function acceptedInsert(emails: readonly NewEmail[], condition: string): CompiledQuery {
    const taken = new Map<string, number>();
    const rows = emails.flatMap((email) => {
      if (email.broadcastId) throw new Error("A broadcast's copies are numbered in the bulk band.");
      return email.recipients.map((recipient) => {
        let place: number | null = null;
        if (!recipient.suppressed && email.scheduledAt === null) {
          place = (taken.get(email.projectId) ?? 0) + 1;
          taken.set(email.projectId, place);
        }
        return { ...recipientRow(email, recipient, null), ready_seq: place };
      });
    });
    return CompiledQuery.raw(acceptedRowsText(condition), columnArrays(columns, rows));
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
     * The emails sent to `address` (lowercased) in the project, newest first, with that recipient's status:
     * a contact's activity (contact-activity.ts), on email_recipients_address_project (migration 0049).
     */
    async ofAddress(projectId: string, address: string, page: PageRequest): Promise<Page<AddressEmail>> {
      const query = db
        .selectFrom('email_recipients')
        .innerJoin('emails', 'emails.id', 'email_recipients.email_id')
        .select([
          'emails.id as id',
          'emails.from_address as from',
          'emails.subject as subject',
          'emails.broadcast_id as broadcastId',
          'emails.created_at as createdAt',
          'email_recipients.address as address',
          'email_recipients.status as status',
        ])
        .where('email_recipients.project_id', '=', projectId)
        .where(sql`lower(email_recipients.address)`, '=', address);
      return pageOfQuery(query, page, 'emails.id');
    },

    /**
     * The recipients of emails just accepted, in `transaction` (the accepting one, with their emails): due ones
     * take the queue positions after their project's last, read in the INSERT itself (fair-queue.repo.ts);
     * scheduled ones wait; suppressed ones are stored as such, never queued.
     */
    async insertAccepted(emails: readonly NewEmail[], transaction: Transaction): Promise<void> {
      // A broadcast's copies: each project's place in the bulk band read once for the whole insert, not in
      // each row (a subquery per row made the INSERT of a fan-out's batch six times the CPU of its plain
      // rows). Ties with a send accepted at the same moment elsewhere are harmless (fair-queue.repo.ts).
      const bulkProjects = new Set(
        emails.filter((email) => email.broadcastId && email.scheduledAt === null).map((e) => e.projectId),
      );
      const bulkBases = new Map<string, number>();
      for (const projectId of bulkProjects) {
        const { rows } = await transaction.db.executeQuery<{ base: number | string }>(
          CompiledQuery.raw(bulkBaseText, [projectId, 0]),
        );
        bulkBases.set(projectId, Number(rows[0]!.base));
      }
      for (const insert of acceptedInserts(emails, bulkBases)) await transaction.db.executeQuery(insert);
    },

    acceptedInserts,
    acceptedInsert,

    /**
     * Cancels, in `transaction`, the recipients of a scheduled email that are still waiting for its time (none of them
     * in the queue yet, so no worker can hold one); how many it cancelled.
     */
    async cancelWaiting(
      projectId: string,
      emailId: string,
      now: string,
      transaction: Transaction,
    ): Promise<number> {
      const cancelled = await updateStillWaiting(projectId, emailId, now, transaction)
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
     * so no worker can hold them) to `at`, in `transaction`; returns how many moved.
     */
    async rescheduleWaiting(
      projectId: string,
      emailId: string,
      at: string,
      now: string,
      transaction: Transaction,
    ): Promise<number> {
      const moved = await updateStillWaiting(projectId, emailId, now, transaction)
        .set({ wait_until: at, next_attempt_at: at, updated_at: now })
        .executeTakeFirst();
      return Number(moved.numUpdatedRows);
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
     * the statement itself, so two reports racing move it once), and refreshes its email's status. In
     * `transaction`, which also emits the event. True when something changed.
     */
    async applyReported(
      recipient: ReportedRecipient,
      outcome: ReportedOutcome,
      details: { response: string | null; now: string },
      transaction: Transaction,
    ): Promise<boolean> {
      const trx = transaction.db;
      const from = [...MOVES_FROM[outcome]];
      if (outcome === 'delayed') {
        const result = await trx
          .updateTable('email_recipients')
          .set({ delay_reported_at: details.now, updated_at: details.now })
          .where('id', '=', recipient.id)
          .where('status', 'in', from)
          .where('delay_reported_at', 'is', null)
          .executeTakeFirst();
        return Number(result.numUpdatedRows) > 0;
      }
      const result = await trx
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
      const statuses = await trx
        .selectFrom('email_recipients')
        .select('status')
        .where('email_id', '=', recipient.email.id)
        .execute();
      await trx
        .updateTable('emails')
        .set({ status: summarizeStatus(statuses.map((row) => row.status)), updated_at: details.now })
        .where('id', '=', recipient.email.id)
        .execute();
      return true;
    },
  };
}

export type RecipientRepo = ReturnType<typeof createRecipientRepo>;
