import { randomUUID } from 'node:crypto';
import { CompiledQuery, type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { writesInWith } from '../../db/engine/sql.ts';
import { createMessagePieces, keptInPieces } from '../../db/message-pieces.ts';
import type { Database, EmailStatus } from '../../db/schema.ts';
import { placeholders, statement, textsByShape, valuesTable } from '../../db/sql-text.ts';
import { type Lease, releaseLeases } from '../../queue/lease.ts';
import type { QueueJob } from '../../queue/runtime.ts';
import {
  type EmailRecord,
  type LoadedEmail,
  LOADED_EMAIL_COLUMNS,
  loadedEmails,
} from '../emails/email-rows.ts';
import type { LoadedEmailRow } from '../emails/email-rows.ts';
import {
  CLAIMED_WITH_EMAILS,
  type ClaimedRecipient,
  type ClaimedRow,
  type ClaimedWithEmailRow,
  claimedOf,
  claimParameters,
  type LookShape,
  lookShapeKey,
  lookShapeOf,
  nextDueClaim,
  pacedHostsText,
  siblingsClaim,
  toClaimed,
} from './sending.claims.ts';
import { BULK_BAND, type QueueBand, queueHeadText } from '../emails/fair-queue.repo.ts';
import type { AttemptOutcome, AttemptRecord } from '../emails/recipients.ts';
import { summarizeStatus } from '../emails/status.ts';
import {
  COUNTS,
  outcomeValues,
  RECIPIENT_OUTCOME_COLUMNS,
  RECORD_KNOWN_EMAILS,
  RECORD_RECIPIENT_STATES,
  recordRecipients,
  statusKnown,
} from './sending.outcome-rows.ts';
import type { TrackingSettings } from '../emails/tracking.ts';
import type { EmitWith } from '../events/events.service.ts';

// The sending queue: email_recipients rows with a queue position (`ready_seq`), claimed by the sending worker
// under a lease, promoted into the queue when their time comes, and moved on by each attempt's outcome (with
// the captured MIME in email_raw and the emails' overall status). All of the queue's SQL is here, one named
// function per statement, the engines' texts side by side where they differ; the worker holds the policy.

/**
 * One SMTP transaction: recipients of one email (of one domain, when each domain is its own destination),
 * in the lane of that domain (or the one lane of a relay).
 */
export interface SendJob extends QueueJob {
  email: EmailRecord;
  host: string;
  recipients: ClaimedRecipient[];
  /** What the email asked for (tracking, unsubscribe): the job then has one recipient, with its own copy. */
  tracking?: TrackingSettings | undefined;
}

/** What an attempt wrote down: each recipient's new state, and what it says (emails/recipients.ts). */
export type SendOutcome = AttemptOutcome;

/**
 * A look over the queue: up to `limit` recipients of any host but `excludeHosts`, and of each of `lanes` (a
 * paced destination's hosts) up to its own limit.
 */
export interface LookOptions {
  limit: number;
  excludeHosts: readonly string[];
  lanes?: ReadonlyArray<{ hosts: readonly string[]; limit: number }> | undefined;
}

/** A look over the queue made by the statement that records outcomes (PostgreSQL: recordAllText). */
export interface ClaimAlong extends LookOptions {
  lease: Lease;
}

const shapeOf = (options: LookOptions): LookShape => ({
  excluded: options.excludeHosts.length,
  lanes: (options.lanes ?? []).map((lane) => lane.hosts.length),
});

/**
 * PostgreSQL: attempts whose emails' statuses are known before the write, recorded with `alongside`'s writes
 * (their events and counts) in one statement, and with `claim`, the next look over the queue made in it: with
 * its BEGIN and COMMIT, three round trips and one commit per batch where there were five and two. All or
 * nothing: the rows are locked (`held`) and written only if this worker still holds every lease, and the
 * other writes only if they all were. The claim is made either way, and never takes a row being recorded
 * (one statement updates a row once); the outcomes are recorded, in its transaction, before the next claim
 * of their recipients.
 */
function recordAllText(
  values: ReturnType<typeof outcomeValues>,
  alongside: EmitWith['writes'],
  claim: ClaimAlong | undefined,
  destinations: DestinationsFilter | undefined,
) {
  const update = statement('postgres');
  const v = valuesTable('v', RECIPIENT_OUTCOME_COLUMNS, values, update.param, COUNTS);
  const count = values.length;
  const written = alongside(update.param, `(SELECT count(*) FROM updated) = ${count}`);
  let claimed = '';
  let result = 'SELECT count(*) AS written FROM updated';
  if (claim) {
    const parameters = nextDueParameters(claim.lease, claim, destinations).values();
    const slot = () => update.param(parameters.next().value);
    const next = nextDueClaim(
      'postgres',
      slot,
      shapeOf(claim),
      ' AND id NOT IN (SELECT id FROM v)',
      destinations?.sources.length ?? 0,
    );
    claimed = `,\n      claimed AS (${next})`;
    result = `SELECT w.written, ${CLAIMED_WITH_EMAILS} FROM (SELECT count(*) AS written FROM updated) AS w
      LEFT JOIN (claimed JOIN emails ON emails.id = claimed.email_id) ON true`;
  }
  return update.compile(`WITH ${v}, held AS (SELECT email_recipients.id FROM email_recipients JOIN v
        ON email_recipients.id = v.id AND email_recipients.locked_by = v.worker
        WHERE email_recipients.ready_seq IS NOT NULL FOR UPDATE OF email_recipients),
      updated AS (${recordRecipients(` AND (SELECT count(*) FROM held) = ${count}`)}),
      ${[RECORD_KNOWN_EMAILS, ...written].join(',\n')}${claimed}
    ${result}`);
}

/**
 * Direct delivery (issue 38): the claims leave out the recipients of destinations suspended for every one of
 * the worker's sending sources.
 */
export interface DestinationsFilter {
  sources: readonly string[];
}

/**
 * A look's parameters (nextDueClaim): the lease's, the hosts left out (the limited lanes' too), the
 * destinations' (NOT_SUSPENDED's: the sources, now, and their count when several), the limit; then each limited lane's: per host now, the host, the
 * destinations', its limit; and its limit again when it has several hosts.
 */
function nextDueParameters(
  lease: Lease,
  options: LookOptions,
  destinations: DestinationsFilter | undefined,
): unknown[] {
  const now = lease.now.toISOString();
  const sources = destinations?.sources ?? [];
  const held = sources.length === 0 ? [] : [...sources, now, ...(sources.length > 1 ? [sources.length] : [])];
  const lanes = options.lanes ?? [];
  const leftOut = [...options.excludeHosts, ...lanes.flatMap((lane) => lane.hosts)];
  return [
    ...claimParameters(lease, ...leftOut, ...held, options.limit),
    ...lanes.flatMap((lane) => [
      ...lane.hosts.flatMap((host) => [now, host, ...held, lane.limit]),
      ...(lane.hosts.length > 1 ? [lane.limit] : []),
    ]),
  ];
}

/** The sending queue's statements on `db` (the database, or a transaction's for the outcome writes). */
export function createSendingQueue(db: Kysely<Database>, engine: Engine, destinations?: DestinationsFilter) {
  const pieces = createMessagePieces(db);
  // The claims' texts (sending.claims.ts), written once per shape (lookShapeKey).
  const nextDueText = textsByShape((shape) =>
    nextDueClaim(engine, placeholders(engine), lookShapeOf(shape), '', destinations?.sources.length ?? 0),
  );
  // Shape: how many emails' recipients.
  const siblingsText = textsByShape((emails) =>
    siblingsClaim(engine, placeholders(engine), Number(emails), destinations !== undefined),
  );
  // PostgreSQL: the claimed rows' emails come back from the claiming statement.
  const nextDueWithEmailsText = textsByShape(
    (excluded) => `WITH claimed AS (${nextDueText(excluded)})
      SELECT ${CLAIMED_WITH_EMAILS} FROM claimed JOIN emails ON emails.id = claimed.email_id`,
  );
  const loadText = textsByShape((count) => {
    const slot = placeholders(engine);
    const ids = Array.from({ length: Number(count) }, slot).join(', ');
    return `SELECT ${LOADED_EMAIL_COLUMNS} FROM emails WHERE id IN (${ids})`;
  });
  /**
   * The position after which a project's promoted rows of a band go: its last queued row's in the band, or
   * the band's head if later (fair-queue.repo.ts).
   */
  async function basePositions(projectIds: readonly string[], band: QueueBand): Promise<Map<string, number>> {
    const base = band === 'bulk' ? BULK_BAND : 0;
    const head = await db
      .selectNoFrom(sql<number | string | null>`${sql.raw(queueHeadText(band))}`.as('head'))
      .executeTakeFirstOrThrow()
      .then((row) => Number(row.head ?? base));
    let rows = db
      .selectFrom('email_recipients')
      .select((eb) => ['project_id', eb.fn.max('ready_seq').as('last')])
      .where('project_id', 'in', [...projectIds]);
    rows =
      band === 'bulk'
        ? rows.where('ready_seq', '>=', BULK_BAND)
        : rows.where('ready_seq', 'is not', null).where('ready_seq', '<', BULK_BAND);
    const found = await rows.groupBy('project_id').execute();
    const last = new Map(found.map((row) => [row.project_id, Number(row.last ?? base)]));
    return new Map(projectIds.map((id) => [id, Math.max(head, last.get(id) ?? base)]));
  }

  const queue = {
    /**
     * Leases up to `limit` due recipients, lowest queue position first (fair across projects), skipping
     * `excludeHosts` (domains at this worker's per-host limit). One statement; PostgreSQL skips rows another
     * worker is claiming at the same moment, SQLite serializes writers.
     */
    async claim(lease: Lease, options: LookOptions): Promise<ClaimedRecipient[]> {
      const { rows } = await db.executeQuery<ClaimedRow>(
        CompiledQuery.raw(
          nextDueText(lookShapeKey(shapeOf(options))),
          nextDueParameters(lease, options, destinations),
        ),
      );
      return rows.map(toClaimed).sort((a, b) => a.seq - b.seq);
    },

    /** Also leases the other due recipients of these emails, so one SMTP transaction can carry them all. */
    async claimSiblings(lease: Lease, emailIds: readonly string[]): Promise<ClaimedRecipient[]> {
      if (emailIds.length === 0) return [];
      const { rows } = await db.executeQuery<ClaimedRow>(
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
      options: LookOptions,
    ): Promise<{ recipients: ClaimedRecipient[]; emails: Map<string, LoadedEmail> }> {
      if (!writesInWith(engine)) {
        const recipients = await queue.claim(lease, options);
        return {
          recipients,
          emails: await queue.loadEmails([...new Set(recipients.map((row) => row.emailId))]),
        };
      }
      const { rows } = await db.executeQuery<ClaimedWithEmailRow>(
        CompiledQuery.raw(
          nextDueWithEmailsText(lookShapeKey(shapeOf(options))),
          nextDueParameters(lease, options, destinations),
        ),
      );
      return { recipients: claimedOf(rows), emails: await loadedEmails(db, rows) };
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
      return loadedEmails(db, rows);
    },

    /** Direct delivery, at a worker's start: the queued and waiting rows without a `paced_host` given one. */
    async markPaced(): Promise<void> {
      for (const column of ['ready_seq', 'wait_until'] as const)
        await db.executeQuery(CompiledQuery.raw(pacedHostsText(engine, column), []));
    },

    /** Gives leases back without an attempt (more claimed than there are slots, or shutting down). */
    release(workerId: string, rows?: readonly string[]): Promise<string[]> {
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
        .innerJoin('emails', 'emails.id', 'email_recipients.email_id')
        .select(['email_recipients.id', 'email_recipients.project_id', 'emails.broadcast_id'])
        .where('email_recipients.wait_until', 'is not', null)
        .where('email_recipients.wait_until', '<=', now)
        .orderBy('email_recipients.wait_until')
        .limit(limit)
        .execute();
      if (due.length === 0) return 0;
      // A broadcast's copy goes back into the bulk band, any other email's into the transactional one.
      const bandOf = (row: (typeof due)[number]): QueueBand => (row.broadcast_id ? 'bulk' : 'transactional');
      const next = new Map<string, number>();
      for (const band of ['transactional', 'bulk'] as const) {
        const projects = [...new Set(due.filter((row) => bandOf(row) === band).map((row) => row.project_id))];
        if (projects.length === 0) continue;
        for (const [project, base] of await basePositions(projects, band))
          next.set(`${band} ${project}`, base);
      }
      const cases = due.map((row) => {
        const key = `${bandOf(row)} ${row.project_id}`;
        const position = next.get(key)! + 1;
        next.set(key, position);
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

    /** Forgets daily counts older than `beforeDay` (YYYY-MM-DD). */
    async pruneQuota(beforeDay: string): Promise<void> {
      await db.deleteFrom('send_quota').where('day', '<', beforeDay).execute();
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

    /** See recordAllText; on PostgreSQL only, for attempts with a known status and no captured MIME. */
    recordAllWith: writesInWith(engine)
      ? async (records: readonly AttemptRecord[], alongside: EmitWith['writes']): Promise<boolean> =>
          Boolean((await recordAll(records, alongside, undefined))?.written)
      : undefined,

    /**
     * The queue on the same transaction, its recordAllWith also making `claim` (recordAllText); `claimed()`
     * gives the rows it claimed (for claimedIn), undefined if the statement did not run.
     */
    recordingWithClaim(claim: ClaimAlong) {
      let claimed: ClaimedWithEmailRow[] | undefined;
      const recordAllWith = async (records: readonly AttemptRecord[], alongside: EmitWith['writes']) => {
        const done = await recordAll(records, alongside, claim);
        claimed = done?.claimed;
        return Boolean(done?.written);
      };
      return { writer: { ...queue, recordAllWith }, claimed: () => claimed };
    },

    /** The recipients and emails of a claim's rows (CLAIMED_WITH_EMAILS). */
    claimedIn: async (rows: readonly ClaimedWithEmailRow[]) => ({
      recipients: claimedOf(rows),
      emails: await loadedEmails(db, rows),
    }),

    /**
     * Records attempts' results for each recipient, captured MIME and each email's overall status, on the
     * caller's transaction (which also emits the events: the worker groups attempts that finish together).
     * Only the lease holder moves a recipient on; returns, per attempt and update, whether it still held it.
     */
    async recordAttempts(records: readonly AttemptRecord[]): Promise<boolean[][]> {
      const values = outcomeValues(records);
      const { rows: updated } =
        values.length === 0
          ? { rows: [] }
          : await db.executeQuery<{ id: string }>(RECORD_RECIPIENT_STATES[engine](values));
      const stillHeld = new Set(updated.map((row) => row.id));
      const held = records.map((record) => record.updates.map((change) => stillHeld.has(change.id)));

      const statusOf = new Map<string, { status: EmailStatus; now: string }>();
      for (const [index, record] of records.entries()) {
        if (!held[index]!.includes(true)) continue;
        if (!statusKnown(record)) {
          statusOf.set(record.emailId, { status: await summedStatus(record.emailId), now: record.now });
        } else if (!writesInWith(engine)) {
          statusOf.set(record.emailId, {
            status: summarizeStatus([record.updates[0]!.status]),
            now: record.now,
          });
        }
        if (record.raw !== undefined) await keepCapture(record, record.raw);
      }
      await recordEmails(statusOf);
      return held;
    },
  };

  /** Runs recordAllText; undefined (nothing run) for attempts it cannot record. */
  async function recordAll(
    records: readonly AttemptRecord[],
    alongside: EmitWith['writes'],
    claim: ClaimAlong | undefined,
  ): Promise<{ written: boolean; claimed: ClaimedWithEmailRow[] } | undefined> {
    if (!writesInWith(engine)) return undefined;
    if (records.some((record) => !statusKnown(record) || record.raw !== undefined)) return undefined;
    const values = outcomeValues(records);
    // With a claim, one row per claimed recipient, or one with nulls when none was.
    const { rows } = await db.executeQuery<ClaimedWithEmailRow & { written: number | string }>(
      recordAllText(values, alongside, claim, destinations),
    );
    return {
      written: Number(rows[0]?.written) === values.length,
      claimed: rows.filter((row) => row.claimed_id != null),
    };
  }

  /** An email's overall status summed up from every recipient's row, this write's included. */
  async function summedStatus(emailId: string): Promise<EmailStatus> {
    const rows = await db
      .selectFrom('email_recipients')
      .select('status')
      .where('email_id', '=', emailId)
      .execute();
    return summarizeStatus(rows.map((row) => row.status));
  }

  /** The capture transport's MIME of an attempt, the first one recorded for its email. */
  async function keepCapture(record: AttemptRecord, raw: Buffer): Promise<void> {
    await db
      .insertInto('email_raw')
      .values({
        email_id: record.emailId,
        project_id: record.projectId,
        raw: record.rawPiecesKey === undefined ? raw.toString('utf8') : '',
        pieces_key: record.rawPiecesKey ?? null,
        created_at: record.now,
      })
      .onConflict((conflict) => conflict.column('email_id').doNothing())
      .execute();
  }

  /** The other emails' overall status, in one statement. */
  async function recordEmails(statusOf: ReadonlyMap<string, { status: EmailStatus; now: string }>) {
    if (statusOf.size === 0) return;
    const emails = statement(engine);
    const rows = [...statusOf].map(([id, { status, now }]) => ({ id, status, now }));
    await db.executeQuery(
      emails.compile(`WITH ${valuesTable('v', ['id', 'status', 'now'], rows, emails.param)}
        UPDATE emails SET status = v.status, updated_at = v.now FROM v WHERE emails.id = v.id`),
    );
  }

  return queue;
}

export type SendingQueue = ReturnType<typeof createSendingQueue>;
