import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { locksRows, skipLockedRows, writesInWith } from '../../db/engine/sql.ts';
import type { Database, DeliveryStatus } from '../../db/schema.ts';
import { statement, valuesTable } from '../../db/sql-text.ts';
import { inTransaction } from '../../db/transaction.ts';
import { newId } from '../../lib/ids.ts';
import { type Lease, releaseLeases, type StoredLease, storedLease } from '../../queue/lease.ts';
import { type AttemptHealth, createWebhookHealth, type HealthWrites } from './webhook-health.ts';

// The webhook deliveries queue: pending deliveries rows, claimed by the delivery worker under a lease with
// their event and webhook, given back, and moved on by each attempt's outcome (the attempt kept in the row,
// the one it replaces moved to delivery_attempts, and the webhook's health). All of the queue's SQL is here,
// the engines' statements side by side where they differ; the worker holds the policy (signing, POSTing,
// what a response means). deliveries.repo.ts keeps the API's reads and the outbox's insert.

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
  /** The webhook's payload format (`postwire` or `resend`). */
  webhookFormat: string;
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
  health?: AttemptHealth | undefined;
}

export interface OutcomeResult {
  /** False when this worker no longer held the lease: another worker owns the delivery's state now. */
  held: boolean;
  /** Set when this outcome disabled the webhook. */
  disabledReason?: string | undefined;
}

/** A claimed delivery `d` with its event and webhook. */
const WITH_EVENT_AND_WEBHOOK = 'JOIN events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id';
/** The columns a claim returns, read with the claim (PostgreSQL: in the same statement). */
const CLAIMED_COLUMNS = `d.id, d.project_id, d.event_id, d.webhook_id, d.attempts, d.last_attempt_id, e.type, e.data,
  e.created_at AS event_created_at, w.url, w.format, w.enabled, w.disabled_reason, w.secret_sealed,
  w.previous_secret_sealed, w.previous_secret_expires_at`;

/**
 * Claimed deliveries come back in the queue's order (QueueSource.claim): the worker starts them in it. Neither
 * an UPDATE's RETURNING nor a read by id promises any order (PostgreSQL returned a claim's rows backwards).
 */
const IN_QUEUE_ORDER = 'ORDER BY d.next_attempt_at, d.id';

/** The columns a claim's UPDATE returns, for CLAIMED_COLUMNS to read beside its event and webhook. */
const LEASED_COLUMNS = 'id, project_id, event_id, webhook_id, attempts, last_attempt_id, next_attempt_at';

/**
 * The UPDATE that leases the deliveries `due` selects to the lease's worker; `due` takes its placeholders
 * after the lease's (SQLite's `?` are positional).
 */
const leaseText = (
  param: (value: unknown) => string,
  lease: StoredLease,
  due: (param: (value: unknown) => string) => string,
) => {
  const set = `UPDATE deliveries SET locked_until = ${param(lease.lockedUntil)}, locked_by = ${param(lease.workerId)}`;
  return `${set} WHERE id IN (${due(param)})`;
};

/** Webhooks' lanes to top up: up to `limit` of each one's due deliveries (claimForWebhooks). */
export type WebhookTopUps = ReadonlyArray<{ webhookId: string; limit: number }>;

/** Top-ups made with an outcomes' write, under `lease`. */
interface TopUpAlong {
  lease: StoredLease;
  webhooks: WebhookTopUps;
}

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
  format: string;
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
  webhookFormat: row.format,
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

/**
 * The deliveries queue's statements; one per worker (its webhook health, written through `webhooks`,
 * remembers recent successes).
 */
export function createDeliveryQueue(db: Kysely<Database>, engine: Engine, webhooks: HealthWrites) {
  const lockRows = skipLockedRows(engine);
  const health = createWebhookHealth(webhooks);

  /** Due, pending and not leased (or the lease ran out), as SQL conditions on `deliveries`. */
  const claimable = (param: (value: unknown) => string, now: string) => {
    const at = param(now);
    return `status = 'pending' AND next_attempt_at <= ${at} AND (locked_until IS NULL OR locked_until < ${param(now)})`;
  };

  /**
   * The ids of up to each webhook's `limit` of its due deliveries, oldest due first (`also`: a further
   * condition). One index scan per webhook: the pending rows' (webhook_id, next_attempt_at) index finds each
   * webhook's rows directly, however long other webhooks' backlogs are.
   */
  const webhooksDue = (param: (value: unknown) => string, now: string, webhooks: WebhookTopUps, also = '') =>
    webhooks
      .map(
        ({ webhookId, limit }, index) =>
          `SELECT id FROM (SELECT id FROM deliveries WHERE ${claimable(param, now)}${also}
            AND webhook_id = ${param(webhookId)} ORDER BY next_attempt_at LIMIT ${param(limit)}${lockRows}) AS w${index}`,
      )
      .join(' UNION ALL ');

  /**
   * Leases the rows `due` selects and returns them with their event and webhook. PostgreSQL does both in
   * one statement; SQLite (in process, no round trip) reads them back after the update.
   */
  async function claimRows(
    options: StoredLease,
    due: (param: (value: unknown) => string) => string,
    via: Kysely<Database> = db,
  ): Promise<ClaimedDelivery[]> {
    const query = statement(engine);
    const update = leaseText(query.param, options, due);
    if (writesInWith(engine)) {
      const { rows } = await via.executeQuery<ClaimedRow>(
        query.compile(`WITH d AS (${update} RETURNING ${LEASED_COLUMNS})
          SELECT ${CLAIMED_COLUMNS} FROM d ${WITH_EVENT_AND_WEBHOOK} ${IN_QUEUE_ORDER}`),
      );
      return rows.map(toClaimed);
    }
    const { rows: claimed } = await via.executeQuery<{ id: string }>(query.compile(`${update} RETURNING id`));
    if (claimed.length === 0) return [];
    const read = statement(engine);
    const ids = claimed.map((row) => read.param(row.id)).join(', ');
    const { rows } = await via.executeQuery<ClaimedRow>(
      read.compile(`SELECT ${CLAIMED_COLUMNS} FROM deliveries d ${WITH_EVENT_AND_WEBHOOK}
        WHERE d.id IN (${ids}) AND d.locked_by = ${read.param(options.workerId)} ${IN_QUEUE_ORDER}`),
    );
    return rows.map(toClaimed);
  }

  /**
   * Moves the deliveries this worker still holds to their outcome's state, each attempt (id in `attemptIds`,
   * by outcome) kept in its delivery's row; the attempt a row held before goes to delivery_attempts. Returns
   * the ids of the deliveries it held. One statement on PostgreSQL (its parts read the rows as they were
   * before it); on SQLite the move, when a row holds an attempt, and then the update (in the caller's
   * transaction). With `topUp` (PostgreSQL), the statement also tops up those webhooks' lanes and returns
   * what it claimed.
   */
  async function writeStatesAndAttempts(
    trx: Kysely<Database>,
    outcomes: readonly DeliveryOutcome[],
    attemptIds: ReadonlyArray<string | undefined>,
    topUp?: TopUpAlong,
  ): Promise<{ held: Set<string>; claimed?: ClaimedDelivery[] }> {
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
    if (writesInWith(engine) && topUp) {
      // The lanes' top-ups in the same statement: one round trip and one commit where there were two. They never
      // take a row being recorded (one statement updates a row once; a retry is recorded, and due later, before
      // any claim can see it). One row per claimed delivery, or one of nulls when none was.
      const due = (param: (value: unknown) => string) =>
        webhooksDue(param, topUp.lease.now, topUp.webhooks, ' AND id NOT IN (SELECT id FROM v)');
      const { rows } = await trx.executeQuery<
        ClaimedRow & { held: string[] | null; claimed_id: string | null }
      >(
        query.compile(`${withValues}, moved AS (${move}), updated AS (${update}),
          claimed AS (${leaseText(query.param, topUp.lease, due)} RETURNING ${LEASED_COLUMNS})
          SELECT h.held, c.* FROM (SELECT array_agg(id) AS held FROM updated) AS h
          LEFT JOIN (SELECT d.id AS claimed_id, d.next_attempt_at AS claimed_due, ${CLAIMED_COLUMNS}
            FROM claimed d ${WITH_EVENT_AND_WEBHOOK}) AS c ON true
          ORDER BY c.claimed_due, c.claimed_id`),
      );
      return {
        held: new Set(rows[0]?.held ?? []),
        claimed: rows.filter((row) => row.claimed_id !== null).map(toClaimed),
      };
    }
    if (writesInWith(engine)) {
      const { rows } = await trx.executeQuery<{ id: string }>(
        query.compile(`${withValues}, moved AS (${move}), updated AS (${update}) SELECT id FROM updated`),
      );
      return { held: new Set(rows.map((row) => row.id)) };
    }
    // Only a delivery attempted before holds an attempt to move (as claimed: another worker's attempt since
    // then would mean the lease, and with it this outcome, was lost).
    if (outcomes.some((outcome) => outcome.attempt && outcome.delivery.holdsAttempt)) {
      await trx.executeQuery(query.compile(`${withValues} ${move}`));
    }
    const { rows } = await trx.executeQuery<{ id: string }>(query.compile(`${withValues} ${update}`));
    return { held: new Set(rows.map((row) => row.id)) };
  }

  /**
   * recordOutcomes, with the lanes' top-ups `topUp` when given: in the outcomes' statement on PostgreSQL
   * when it runs on its own, else in their transaction after them (one commit for both). Returns what the
   * top-ups claimed (none asked: undefined).
   */
  async function record(
    outcomes: readonly DeliveryOutcome[],
    topUp?: TopUpAlong,
  ): Promise<{ results: OutcomeResult[]; claimed?: ClaimedDelivery[] | undefined }> {
    if (outcomes.length === 0) return { results: [] };
    const attemptIds = outcomes.map((outcome) => outcome.attempt && newId('att'));
    const healthWrites = outcomes.some((outcome) => health.needsWrite(outcome));

    const write = async (trx: Kysely<Database>, along?: TopUpAlong) => {
      if (healthWrites && locksRows(engine)) await lockWebhooksFirst(trx, outcomes);
      const { held, claimed } = await writeStatesAndAttempts(trx, outcomes, attemptIds, along);
      const results = outcomes.map((outcome): OutcomeResult => ({ held: held.has(outcome.delivery.id) }));
      return { results, claimed };
    };
    const { results, claimed } =
      engine === 'postgres' && !healthWrites
        ? await write(db, topUp)
        : await inTransaction(db, async (transaction) => {
            const written = await write(transaction.db);
            if (healthWrites) await health.write(outcomes, written.results, transaction);
            if (!topUp) return written;
            const due = (param: (value: unknown) => string) =>
              webhooksDue(param, topUp.lease.now, topUp.webhooks);
            return { ...written, claimed: await claimRows(topUp.lease, due, transaction.db) };
          });

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
    return { results, claimed };
  }

  return {
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
    async claimForWebhooks(lease: Lease, webhooks: WebhookTopUps): Promise<ClaimedDelivery[]> {
      if (webhooks.length === 0) return [];
      const stored = storedLease(lease);
      return claimRows(stored, (param) => webhooksDue(param, stored.now, webhooks));
    },

    /** Gives leases back without an attempt (more claimed than a webhook's free slots, or shutting down). */
    release(workerId: string, rows?: readonly string[]): Promise<string[]> {
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
      return (await record(outcomes)).results;
    },

    /**
     * recordOutcomes, and with it the top-ups of these webhooks' lanes (claimForWebhooks) in the same
     * transaction: one commit for both, and on PostgreSQL, when no webhook's health needs a write, one
     * statement. The outcomes are written before any claim can take their deliveries again.
     */
    recordOutcomesAndTopUp: (
      outcomes: readonly DeliveryOutcome[],
      lease: Lease,
      webhooks: WebhookTopUps,
    ): Promise<{ results: OutcomeResult[]; claimed?: ClaimedDelivery[] | undefined }> =>
      record(outcomes, { lease: storedLease(lease), webhooks }),
  };
}

/**
 * Locks the outcomes' webhooks, in id order, before their deliveries are written: a batch that writes a
 * webhook's health writes its deliveries and then the webhook, while deleting a webhook locks the webhook and
 * then its deliveries (the cascade). In opposite orders PostgreSQL found a deadlock and answered the delete
 * 500; taken here first, the webhook row is the one both wait on.
 */
async function lockWebhooksFirst(trx: Kysely<Database>, outcomes: readonly DeliveryOutcome[]): Promise<void> {
  const ids = [...new Set(outcomes.map((outcome) => outcome.delivery.webhookId))].sort();
  await trx
    .selectFrom('webhooks')
    .select('id')
    .where('id', 'in', ids)
    .orderBy('id')
    .forNoKeyUpdate()
    .execute();
}

export type DeliveryQueue = ReturnType<typeof createDeliveryQueue>;
