import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { locksRows, skipLockedRows, writesInWith } from '../../db/engine/sql.ts';
import type { Database, DeliveryStatus } from '../../db/schema.ts';
import { statement, valuesTable } from '../../db/sql-text.ts';
import { inTransaction } from '../../db/transaction.ts';
import { newId } from '../../lib/ids.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';
import { type Lease, releaseLeases, type StoredLease, storedLease } from '../../queue/lease.ts';
import type { QueueJob, QueueSource } from '../../queue/runtime.ts';
import type { MetricsRecorder } from '../metrics/instruments.ts';
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
    if (writesInWith(engine)) {
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
    if (writesInWith(engine)) {
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

  /** Due, pending and not leased (or the lease ran out), as SQL conditions on `deliveries`. */
  const claimable = (param: (value: unknown) => string, now: string) => {
    const at = param(now);
    return `status = 'pending' AND next_attempt_at <= ${at} AND (locked_until IS NULL OR locked_until < ${param(now)})`;
  };

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
      if (outcomes.length === 0) return [];
      const attemptIds = outcomes.map((outcome) => outcome.attempt && newId('att'));
      const healthWrites = outcomes.some((outcome) => health.needsWrite(outcome));

      const write = async (trx: Kysely<Database>): Promise<OutcomeResult[]> => {
        if (healthWrites && locksRows(engine)) await lockWebhooksFirst(trx, outcomes);
        const held = await writeStatesAndAttempts(trx, outcomes, attemptIds);
        return outcomes.map((outcome): OutcomeResult => ({ held: held.has(outcome.delivery.id) }));
      };
      const results =
        engine === 'postgres' && !healthWrites
          ? await write(db)
          : await inTransaction(db, async (transaction) => {
              const written = await write(transaction.db);
              if (healthWrites) await health.write(outcomes, written, transaction);
              return written;
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
      return results;
    },
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

/** A delivery as the runtime holds it: one row, in its webhook's lane. */
export type DeliveryJob = ClaimedDelivery & QueueJob;

const toJob = (delivery: ClaimedDelivery): DeliveryJob => ({
  ...delivery,
  lane: delivery.webhookId,
  rows: [delivery.id],
});

/**
 * The deliveries table as the runtime's queue: each pending delivery a job in its webhook's lane, claimed,
 * topped up, given back and recorded through the statements above. Its own function so the
 * runtime's tests (test/queue.test.ts) hold the runtime to this SQL, not to a model of it.
 */
export function createDeliveryQueueSource(deps: {
  queue: DeliveryQueue;
  logger: WorkerLogger;
  metrics: Pick<MetricsRecorder, 'webhookAttempts'>;
}): QueueSource<DeliveryJob, DeliveryOutcome> {
  const { queue: repo, logger, metrics } = deps;
  return {
    claim: async (lease, request) =>
      (await repo.claim(lease, { limit: request.limit, excludeWebhookIds: request.excludeLanes })).map(toJob),
    claimLanes: async (lease, lanes) =>
      (
        await repo.claimForWebhooks(
          lease,
          lanes.map(({ lane, limit }) => ({ webhookId: lane, limit })),
        )
      ).map(toJob),
    release: (workerId, rows) => repo.release(workerId, rows),
    nextDueAt: async () => {
      const next = await repo.nextDueAt();
      return next === undefined ? undefined : Date.parse(next);
    },
    async record(attempted) {
      const results = await repo.recordOutcomes(attempted.map(({ outcome }) => outcome));
      // Every attempt made counts, recorded as ours or not (a lost lease still recorded the attempt).
      let succeeded = 0;
      let failed = 0;
      for (const { outcome } of attempted) {
        if (!outcome.attempt) continue;
        if (outcome.status === 'succeeded') succeeded += 1;
        else failed += 1;
      }
      metrics.webhookAttempts(succeeded, failed);
      return results.map((result, index) => {
        if (result.disabledReason) {
          const webhook = attempted[index]!.job.webhookId;
          logger.warn({ webhook, reason: result.disabledReason }, 'webhook disabled');
        }
        const retryAt = attempted[index]!.outcome.nextAttemptAt;
        return { held: result.held, retryAt: retryAt === undefined ? undefined : Date.parse(retryAt) };
      });
    },
  };
}
