import { type Kysely, sql } from 'kysely';
import { idAt } from '../../lib/ids.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import type { Engine } from '../../db/connection.ts';
import { type Page, type PageRequest, pageByIdDesc } from '../../db/pagination.ts';
import { skipLockedRows } from '../../db/engine/sql.ts';
import { statement, valuesTable } from '../../db/sql-text.ts';
import type { Database, DeliveryStatus, Row } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { newId } from '../../lib/ids.ts';
import { type Lease, releaseLeases, type StoredLease, storedLease } from '../../queue/lease.ts';
import { createWebhookRepo } from '../webhooks/webhooks.repo.ts';

/** A delivery a worker holds the lease on, with what it needs to make the attempt. */
export interface ClaimedDelivery {
  id: string;
  projectId: string;
  eventId: string;
  webhookId: string;
  attempts: number;
  /** Whether the row keeps an earlier attempt, which an attempt now moves to delivery_attempts. */
  holdsAttempt: boolean;
  eventType: string;
  /** The event's data as stored JSON text. */
  eventData: string;
  eventCreatedAt: string;
  url: string;
  webhookEnabled: boolean;
  disabledReason: string | null;
  secretSealed: string | null;
  /** The secret a rotation replaced; it signs too until previousSecretExpiresAt. */
  previousSecretSealed: string | null;
  previousSecretExpiresAt: string | null;
}

export interface AttemptRecord {
  attemptedAt: string;
  statusCode: number | null;
  durationMs: number;
  error: string | null;
  responseExcerpt: string | null;
}

export interface DeliveryOutcome {
  delivery: Pick<ClaimedDelivery, 'id' | 'projectId' | 'eventId' | 'webhookId' | 'holdsAttempt'>;
  workerId: string;
  now: string;
  /** The HTTP attempt; absent when none was made (the webhook was disabled meanwhile). */
  attempt?: AttemptRecord | undefined;
  status: DeliveryStatus;
  /** When status stays 'pending': when the next attempt is due. */
  nextAttemptAt?: string | undefined;
  lastError: string | null;
  /** How the attempt bears on the webhook's health; absent when no attempt was made. */
  health?: { ok: true } | { ok: false; disableNow?: string | undefined; disableAfterMs: number } | undefined;
}

export interface OutcomeResult {
  /** False when this worker no longer held the lease: another worker owns the delivery's state now. */
  held: boolean;
  /** Set when this outcome disabled the webhook. */
  disabledReason?: string | undefined;
}

/** last_success_at is kept to this precision (see recordOutcome). */
const SUCCESS_RECORD_INTERVAL_MS = 60_000;
/** Webhooks whose last recorded success a repo remembers; past it, it forgets them all. */
const SUCCESS_CACHE_SIZE = 10_000;

/** A claimed delivery `d` with its event and webhook. */
const WITH_EVENT_AND_WEBHOOK = 'JOIN events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id';
/** The columns a claim returns, read with the claim (PostgreSQL: in the same statement). */
const CLAIMED_COLUMNS = `d.id, d.project_id, d.event_id, d.webhook_id, d.attempts, d.last_attempt_id, e.type, e.data,
  e.created_at AS event_created_at, w.url, w.enabled, w.disabled_reason, w.secret_sealed,
  w.previous_secret_sealed, w.previous_secret_expires_at`;

/**
 * Claimed deliveries come back in the queue's order (QueueSource.claim): the worker starts them in it. Neither
 * an UPDATE's RETURNING nor a read by id promises any order (PostgreSQL returned a claim's rows backwards).
 */
const IN_QUEUE_ORDER = 'ORDER BY d.next_attempt_at, d.id';

interface ClaimedRow {
  id: string;
  project_id: string;
  event_id: string;
  webhook_id: string;
  attempts: number | string;
  last_attempt_id: string | null;
  type: string;
  data: string;
  event_created_at: string;
  url: string;
  enabled: boolean | number;
  disabled_reason: string | null;
  secret_sealed: string | null;
  previous_secret_sealed: string | null;
  previous_secret_expires_at: string | null;
}

const toClaimed = (row: ClaimedRow): ClaimedDelivery => ({
  id: row.id,
  projectId: row.project_id,
  eventId: row.event_id,
  webhookId: row.webhook_id,
  attempts: Number(row.attempts),
  holdsAttempt: row.last_attempt_id !== null,
  eventType: row.type,
  eventData: row.data,
  eventCreatedAt: row.event_created_at,
  url: row.url,
  webhookEnabled: Boolean(row.enabled),
  disabledReason: row.disabled_reason,
  secretSealed: row.secret_sealed,
  previousSecretSealed: row.previous_secret_sealed,
  previousSecretExpiresAt: row.previous_secret_expires_at,
});

/** An outcome as the row of values its statement reads (`v`), by column. */
const OUTCOME_COLUMNS = [
  'id',
  'worker',
  'status',
  'attempted',
  'attempted_at',
  'status_code',
  'last_error',
  'next_attempt_at',
  'now',
  'completed_at',
  'attempt_id',
  'duration_ms',
  'attempt_error',
  'excerpt',
] as const;
const OUTCOME_CASTS = { attempted: 'integer', status_code: 'integer', duration_ms: 'integer' } as const;

const ATTEMPT_COLUMNS = [
  'id',
  'delivery_id',
  'project_id',
  'webhook_id',
  'event_id',
  'attempted_at',
  'status_code',
  'duration_ms',
  'error',
  'response_excerpt',
] as const;

/** An attempt's row in delivery_attempts. */
const attemptRow = (outcome: DeliveryOutcome, attempt: AttemptRecord, id: string) => ({
  id,
  delivery_id: outcome.delivery.id,
  project_id: outcome.delivery.projectId,
  webhook_id: outcome.delivery.webhookId,
  event_id: outcome.delivery.eventId,
  attempted_at: attempt.attemptedAt,
  status_code: attempt.statusCode,
  duration_ms: attempt.durationMs,
  error: attempt.error,
  response_excerpt: attempt.responseExcerpt,
});

export interface NewDelivery {
  id: string;
  projectId: string;
  eventId: string;
  webhookId: string;
  dueAt: string;
  createdAt: string;
}

export type DeliveryRecord = Row<'deliveries'>;
export type AttemptRow = Row<'delivery_attempts'>;
/** A delivery with its event's kind, as the delivery log shows it. */
export type DeliveryWithType = DeliveryRecord & { event_type: string };

/** Which failed deliveries go back in the queue: a webhook's, created since `since`. */
export interface RequeueRequest {
  projectId: string;
  webhookId: string;
  since: string;
  now: string;
}

export function createDeliveryRepo(db: Kysely<Database>, engine: Engine) {
  /**
   * When this repo last recorded a success per webhook, and no failure since: within the interval, the
   * success write would only be needed to clear a failure streak another worker started, and waiting up to a
   * minute for that changes nothing (a streak disables a webhook after days). Spares a statement per batch.
   */
  const successRecorded = new Map<string, number>();
  const lockRows = skipLockedRows(engine);

  /**
   * Leases the rows `due` selects and returns them with their event and webhook. PostgreSQL does both in
   * one statement; SQLite (in process, no round trip) reads them back after the update.
   */
  async function claimRows(
    options: StoredLease,
    due: (param: (value: unknown) => string) => string,
  ): Promise<ClaimedDelivery[]> {
    const query = statement(engine);
    const update = `UPDATE deliveries SET locked_until = ${query.param(options.lockedUntil)},
      locked_by = ${query.param(options.workerId)} WHERE id IN (${due(query.param)})`;
    if (engine === 'postgres') {
      const { rows } = await db.executeQuery<ClaimedRow>(
        query.compile(`WITH d AS (${update} RETURNING id, project_id, event_id, webhook_id, attempts, last_attempt_id,
            next_attempt_at)
          SELECT ${CLAIMED_COLUMNS} FROM d ${WITH_EVENT_AND_WEBHOOK} ${IN_QUEUE_ORDER}`),
      );
      return rows.map(toClaimed);
    }
    const { rows: claimed } = await db.executeQuery<{ id: string }>(query.compile(`${update} RETURNING id`));
    if (claimed.length === 0) return [];
    const read = statement(engine);
    const ids = claimed.map((row) => read.param(row.id)).join(', ');
    const { rows } = await db.executeQuery<ClaimedRow>(
      read.compile(`SELECT ${CLAIMED_COLUMNS} FROM deliveries d ${WITH_EVENT_AND_WEBHOOK}
        WHERE d.id IN (${ids}) AND d.locked_by = ${read.param(options.workerId)} ${IN_QUEUE_ORDER}`),
    );
    return rows.map(toClaimed);
  }

  /** Whether a success of this outcome's webhook was recorded within the interval: its write is skipped. */
  const successRecordedRecently = (webhookId: string, outcome: DeliveryOutcome): boolean =>
    outcome.health!.ok &&
    Date.parse(outcome.now) - (successRecorded.get(webhookId) ?? -Infinity) < SUCCESS_RECORD_INTERVAL_MS;

  /**
   * Moves the deliveries this worker still holds to their outcome's state, each attempt (id in `attemptIds`,
   * by outcome) kept in its delivery's row; the attempt a row held before goes to delivery_attempts. Returns
   * the ids of the deliveries it held. One statement on PostgreSQL (its parts read the rows as they were
   * before it); on SQLite the move, when a row holds an attempt, and then the update (in the caller's
   * transaction).
   */
  async function writeStatesAndAttempts(
    trx: Kysely<Database>,
    outcomes: readonly DeliveryOutcome[],
    attemptIds: ReadonlyArray<string | undefined>,
  ): Promise<Set<string>> {
    const query = statement(engine);
    const values = outcomes.map((outcome, index) => {
      const attempt = outcome.attempt;
      return {
        id: outcome.delivery.id,
        worker: outcome.workerId,
        status: outcome.status,
        attempted: attempt ? 1 : 0,
        attempted_at: attempt?.attemptedAt ?? null,
        status_code: attempt?.statusCode ?? null,
        last_error: outcome.lastError,
        next_attempt_at: outcome.nextAttemptAt ?? null,
        now: outcome.now,
        completed_at: outcome.status === 'pending' ? null : outcome.now,
        attempt_id: attemptIds[index] ?? null,
        duration_ms: attempt?.durationMs ?? null,
        attempt_error: attempt?.error ?? null,
        excerpt: attempt?.responseExcerpt ?? null,
      };
    });
    const withValues = `WITH ${valuesTable('v', OUTCOME_COLUMNS, values, query.param, OUTCOME_CASTS)}`;
    const held = `deliveries.locked_by = v.worker AND deliveries.status = 'pending'`;
    const ifAttempted = (column: string, value: string) =>
      `${column} = CASE WHEN v.attempted = 1 THEN ${value} ELSE deliveries.${column} END`;
    const update = `UPDATE deliveries SET status = v.status, attempts = deliveries.attempts + v.attempted,
        ${ifAttempted('last_attempt_at', 'v.attempted_at')}, ${ifAttempted('last_status_code', 'v.status_code')},
        ${ifAttempted('last_attempt_id', 'v.attempt_id')}, ${ifAttempted('last_duration_ms', 'v.duration_ms')},
        ${ifAttempted('last_attempt_error', 'v.attempt_error')}, ${ifAttempted('last_response_excerpt', 'v.excerpt')},
        last_error = v.last_error, next_attempt_at = COALESCE(v.next_attempt_at, deliveries.next_attempt_at),
        locked_until = NULL, locked_by = NULL, updated_at = v.now, completed_at = v.completed_at
      FROM v WHERE deliveries.id = v.id AND ${held}
      RETURNING deliveries.id`;
    // The attempt a held row keeps goes to the log before a new one takes its place. Should the lease have
    // been lost meanwhile (PostgreSQL reads the rows as they were), the holder moves the same attempt itself
    // later, and the id keeps the log from having it twice.
    const move = `INSERT INTO delivery_attempts (${ATTEMPT_COLUMNS.join(', ')})
      SELECT deliveries.last_attempt_id, deliveries.id, deliveries.project_id, deliveries.webhook_id,
        deliveries.event_id, deliveries.last_attempt_at, deliveries.last_status_code, deliveries.last_duration_ms,
        deliveries.last_attempt_error, deliveries.last_response_excerpt
      FROM deliveries JOIN v ON deliveries.id = v.id
      WHERE v.attempted = 1 AND deliveries.last_attempt_id IS NOT NULL AND ${held}
      ON CONFLICT (id) DO NOTHING`;
    if (engine === 'postgres') {
      const { rows } = await trx.executeQuery<{ id: string }>(
        query.compile(`${withValues}, moved AS (${move}), updated AS (${update}) SELECT id FROM updated`),
      );
      return new Set(rows.map((row) => row.id));
    }
    // Only a delivery attempted before holds an attempt to move (as claimed: another worker's attempt since
    // then would mean the lease, and with it this outcome, was lost).
    if (outcomes.some((outcome) => outcome.attempt && outcome.delivery.holdsAttempt)) {
      await trx.executeQuery(query.compile(`${withValues} ${move}`));
    }
    const { rows } = await trx.executeQuery<{ id: string }>(query.compile(`${withValues} ${update}`));
    return new Set(rows.map((row) => row.id));
  }

  /**
   * How the held outcomes bear on their webhooks' health; an outcome that disabled its webhook says so in
   * its result. Each webhook's outcomes in order, lock order fixed by webhook id so that workers writing
   * outcomes for the same webhooks at once do not deadlock.
   */
  async function writeHealth(
    trx: Kysely<Database>,
    outcomes: readonly DeliveryOutcome[],
    results: OutcomeResult[],
  ): Promise<void> {
    const byWebhook = new Map<string, number[]>();
    outcomes.forEach((outcome, index) => {
      if (!results[index]!.held || !outcome.health) return;
      const list = byWebhook.get(outcome.delivery.webhookId);
      if (list) list.push(index);
      else byWebhook.set(outcome.delivery.webhookId, [index]);
    });
    for (const webhookId of [...byWebhook.keys()].sort()) {
      const indexes = byWebhook.get(webhookId)!;
      // A run of successes (or of failures) in a row has the effect of its last (or first) one.
      let start = 0;
      while (start < indexes.length) {
        const ok = outcomes[indexes[start]!]!.health!.ok;
        let end = start;
        while (end + 1 < indexes.length && outcomes[indexes[end + 1]!]!.health!.ok === ok) end += 1;
        const run = indexes.slice(start, end + 1);
        const disabledReason = await recordHealth(
          trx,
          webhookId,
          run.map((index) => outcomes[index]!),
          successRecorded,
        );
        if (disabledReason) results[run.at(-1)!] = { held: true, disabledReason };
        start = end + 1;
      }
    }
  }

  /** Due, pending and not leased (or the lease ran out), as SQL conditions on `deliveries`. */
  const claimable = (param: (value: unknown) => string, now: string) => {
    const at = param(now);
    return `status = 'pending' AND next_attempt_at <= ${at} AND (locked_until IS NULL OR locked_until < ${param(now)})`;
  };

  return {
    /** Retention: attempts made before `cutoff` (their deliveries go with their events). */
    pruneTargets: (cutoff: Date): PruneTarget[] => [
      pruneTarget(db, 'delivery_attempts', 'id', sql<boolean>`id < ${idAt('att', cutoff)}`),
    ],

    /**
     * Leases up to `limit` due deliveries of any webhook but `excludeWebhookIds` to `workerId` until
     * `lockedUntil`, oldest due first: how a worker finds webhooks with work. PostgreSQL skips rows another
     * worker is claiming at the same moment; SQLite serializes writers.
     */
    async claim(
      lease: Lease,
      options: { limit: number; excludeWebhookIds?: readonly string[] | undefined },
    ): Promise<ClaimedDelivery[]> {
      const excluded = options.excludeWebhookIds ?? [];
      const stored = storedLease(lease);
      return claimRows(stored, (param) => {
        const where = claimable(param, stored.now);
        const notIn = excluded.length > 0 ? ` AND webhook_id NOT IN (${excluded.map(param).join(', ')})` : '';
        return `SELECT id FROM deliveries WHERE ${where}${notIn} ORDER BY next_attempt_at LIMIT ${param(options.limit)}${lockRows}`;
      });
    },

    /**
     * Leases, per webhook, up to its `limit` of its due deliveries, oldest due first, in one statement: how a
     * worker tops up the webhooks it knows have work. The pending rows' (webhook_id, next_attempt_at) index finds
     * each webhook's rows directly, however long other webhooks' backlogs are.
     */
    async claimForWebhooks(
      lease: Lease,
      webhooks: ReadonlyArray<{ webhookId: string; limit: number }>,
    ): Promise<ClaimedDelivery[]> {
      if (webhooks.length === 0) return [];
      const stored = storedLease(lease);
      return claimRows(stored, (param) =>
        webhooks
          .map(
            ({ webhookId, limit }, index) =>
              `SELECT id FROM (SELECT id FROM deliveries WHERE ${claimable(param, stored.now)}
                AND webhook_id = ${param(webhookId)} ORDER BY next_attempt_at LIMIT ${param(limit)}${lockRows}) AS w${index}`,
          )
          .join(' UNION ALL '),
      );
    },

    /** Queues deliveries, due at `dueAt` (in the caller's transaction: the outbox writes them with their event). */
    async insertPending(deliveries: readonly NewDelivery[]): Promise<void> {
      if (deliveries.length === 0) return;
      await db
        .insertInto('deliveries')
        .values(
          deliveries.map((delivery) => ({
            id: delivery.id,
            project_id: delivery.projectId,
            event_id: delivery.eventId,
            webhook_id: delivery.webhookId,
            status: 'pending' as const,
            attempts: 0,
            next_attempt_at: delivery.dueAt,
            created_at: delivery.createdAt,
            updated_at: delivery.createdAt,
          })),
        )
        .execute();
    },

    /** Gives leases back without an attempt (more claimed than a webhook's free slots, or shutting down). */
    release(workerId: string, rows?: readonly string[]): Promise<void> {
      return releaseLeases(db, 'deliveries', { workerId, rows, waiting: sql<boolean>`status = 'pending'` });
    },

    /** The earliest due time among pending deliveries, to sleep until then rather than poll. */
    async nextDueAt(): Promise<string | undefined> {
      const row = await db
        .selectFrom('deliveries')
        .select((eb) => eb.fn.min('next_attempt_at').as('next'))
        // A literal, so the partial index of pending rows serves it (migration 0019).
        .where('status', '=', sql.lit('pending'))
        .executeTakeFirst();
      return row?.next ?? undefined;
    },

    /** recordOutcomes for one outcome. */
    async recordOutcome(outcome: DeliveryOutcome): Promise<OutcomeResult> {
      const [result] = await this.recordOutcomes([outcome]);
      return result!;
    },

    /**
     * Records attempts and the deliveries' new states atomically (one commit, one fsync on PostgreSQL, however
     * many outcomes). Only the lease holder moves a delivery on, so a worker whose lease expired (and whose
     * delivery another worker has claimed since) cannot overwrite that worker's result; its attempt is still
     * recorded, since it did happen. Returns one result per outcome, in order.
     *
     * Each attempt is kept in its delivery's row until a later attempt moves it to delivery_attempts, so a
     * first attempt writes no row of its own. On PostgreSQL the states and the attempts are one statement;
     * when no webhook's health needs a write (the common case: successes already recorded this minute) it
     * runs without BEGIN and COMMIT, as its own transaction: one round trip per batch instead of four. SQLite
     * cannot write two tables in one statement; there a batch with retries moves their earlier attempts in a
     * second one (in process, so no round trips to save).
     */
    async recordOutcomes(outcomes: readonly DeliveryOutcome[]): Promise<OutcomeResult[]> {
      if (outcomes.length === 0) return [];
      const attemptIds = outcomes.map((outcome) => outcome.attempt && newId('att'));
      const healthWrites = outcomes.some(
        (outcome) => outcome.health && !successRecordedRecently(outcome.delivery.webhookId, outcome),
      );

      const write = async (trx: Kysely<Database>): Promise<OutcomeResult[]> => {
        const held = await writeStatesAndAttempts(trx, outcomes, attemptIds);
        const results: OutcomeResult[] = outcomes.map((outcome) => ({ held: held.has(outcome.delivery.id) }));
        if (healthWrites) await writeHealth(trx, outcomes, results);
        return results;
      };
      const results =
        engine === 'postgres' && !healthWrites
          ? await write(db)
          : await inTransaction(db, (transaction) => write(transaction.db));

      for (const [index, result] of results.entries()) {
        const attempt = outcomes[index]!.attempt;
        if (result.held || !attempt) continue;
        // Not ours any more; still keep the attempt in the log unless the delivery itself is gone.
        const row = attemptRow(outcomes[index]!, attempt, attemptIds[index]!);
        try {
          const exists = await db
            .selectFrom('deliveries')
            .select('id')
            .where('id', '=', row.delivery_id)
            .executeTakeFirst();
          if (exists) await db.insertInto('delivery_attempts').values(row).execute();
        } catch {
          // Deleted in between (its webhook was deleted): there is nothing left to attach the attempt to.
        }
      }
      return results;
    },

    async listForEvent(projectId: string, eventId: string): Promise<DeliveryRecord[]> {
      return db
        .selectFrom('deliveries')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('event_id', '=', eventId)
        .orderBy('id')
        .execute();
    },

    /** A webhook's deliveries, newest first, optionally of one status, with their event's kind. */
    async listForWebhook(
      projectId: string,
      webhookId: string,
      page: PageRequest,
      status?: DeliveryStatus,
    ): Promise<Page<DeliveryWithType>> {
      return pageByIdDesc(page, (cursor, order, limit) => {
        let query = db
          .selectFrom('deliveries as d')
          .innerJoin('events as e', 'e.id', 'd.event_id')
          .selectAll('d')
          .select('e.type as event_type')
          .where('d.project_id', '=', projectId)
          .where('d.webhook_id', '=', webhookId);
        // A literal rather than a parameter: SQLite uses the partial index on failed deliveries only when
        // the query names the same value.
        if (status !== undefined) query = query.where('d.status', '=', sql.lit(status));
        if (cursor) query = query.where('d.id', cursor.op, cursor.id);
        return query.orderBy('d.id', order).limit(limit).execute();
      });
    },

    async find(projectId: string, id: string): Promise<DeliveryRecord | undefined> {
      return db
        .selectFrom('deliveries')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /** The attempts of these deliveries, oldest first, by delivery id: their logged ones and the one each row keeps. */
    async listAttempts(
      projectId: string,
      deliveries: readonly DeliveryRecord[],
    ): Promise<Map<string, AttemptRow[]>> {
      const byDelivery = new Map<string, AttemptRow[]>();
      if (deliveries.length === 0) return byDelivery;
      const rows = await db
        .selectFrom('delivery_attempts')
        .selectAll()
        .where('project_id', '=', projectId)
        .where(
          'delivery_id',
          'in',
          deliveries.map((delivery) => delivery.id),
        )
        .orderBy('attempted_at')
        .orderBy('id')
        .execute();
      const kept = deliveries.flatMap((delivery) => keptAttempt(delivery) ?? []);
      for (const row of [...rows, ...kept]) {
        const list = byDelivery.get(row.delivery_id);
        if (list) list.push(row);
        else byDelivery.set(row.delivery_id, [row]);
      }
      // The kept attempt is usually the latest, but one a worker logged after losing its lease (recordOutcomes)
      // can be later still: in time order, as the log alone was.
      const inTimeOrder = (a: AttemptRow, b: AttemptRow) =>
        a.attempted_at.localeCompare(b.attempted_at) || a.id.localeCompare(b.id);
      for (const list of byDelivery.values()) list.sort(inTimeOrder);
      return byDelivery;
    },

    /**
     * Puts a webhook's failed deliveries created since `since` back in the queue, due now, with the retry
     * schedule starting over (`attempts` counts the current run; the attempt log keeps the earlier ones).
     * Returns how many were re-queued.
     */
    async requeueFailed(options: RequeueRequest): Promise<number> {
      const result = await db
        .updateTable('deliveries')
        .set({
          status: 'pending',
          attempts: 0,
          next_attempt_at: options.now,
          locked_until: null,
          locked_by: null,
          completed_at: null,
          updated_at: options.now,
        })
        .where('project_id', '=', options.projectId)
        .where('webhook_id', '=', options.webhookId)
        .where('status', '=', sql.lit('failed'))
        .where('created_at', '>=', options.since)
        .executeTakeFirst();
      return Number(result.numUpdatedRows);
    },
  };
}

export type DeliveryRepo = ReturnType<typeof createDeliveryRepo>;

/** The latest attempt as its delivery's row keeps it (migration 0020), in the shape of its log row. */
function keptAttempt(delivery: DeliveryRecord): AttemptRow | undefined {
  if (delivery.last_attempt_id === null || delivery.last_attempt_at === null) return undefined;
  return {
    id: delivery.last_attempt_id,
    delivery_id: delivery.id,
    project_id: delivery.project_id,
    webhook_id: delivery.webhook_id,
    event_id: delivery.event_id,
    attempted_at: delivery.last_attempt_at,
    status_code: delivery.last_status_code,
    duration_ms: Number(delivery.last_duration_ms),
    error: delivery.last_attempt_error,
    response_excerpt: delivery.last_response_excerpt,
  };
}

/**
 * How a run of consecutive outcomes of one kind (all successes or all failures) bears on their webhook;
 * returns the reason when it disabled the webhook. Every attempt to a busy webhook would otherwise write its
 * row: the writes are skipped when they change nothing that matters (a failure streak already started; a
 * success recorded in the last minute), so concurrent outcomes for one webhook do not queue on its row lock.
 */
async function recordHealth(
  trx: Kysely<Database>,
  webhookId: string,
  run: readonly DeliveryOutcome[],
  successRecorded: Map<string, number>,
): Promise<string | undefined> {
  const webhooks = createWebhookRepo(trx);
  const last = run.at(-1)!;
  const now = last.now;
  if (last.health!.ok) {
    const at = Date.parse(now);
    if (at - (successRecorded.get(webhookId) ?? -Infinity) < SUCCESS_RECORD_INTERVAL_MS) return undefined;
    if (successRecorded.size >= SUCCESS_CACHE_SIZE) successRecorded.clear();
    successRecorded.set(webhookId, at);
    await webhooks.recordSuccess(webhookId, now, new Date(at - SUCCESS_RECORD_INTERVAL_MS).toISOString());
    return undefined;
  }

  successRecorded.delete(webhookId);
  const health = last.health as { ok: false; disableAfterMs: number };
  return webhooks.recordFailures(webhookId, {
    firstAt: run[0]!.now,
    now,
    disableNow: run.map((outcome) => (outcome.health as { disableNow?: string }).disableNow).find(Boolean),
    disableAfterMs: health.disableAfterMs,
  });
}
