import { CompiledQuery, type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { locksRows } from '../../db/engine/sql.ts';
import type { Database, DeliveryStatus } from '../../db/schema.ts';
import {
  type OutcomeValues,
  postgresClaim,
  postgresClaimForWebhooks,
  postgresOutcomes,
  sqliteClaimedText,
  sqliteClaimForWebhooksText,
  sqliteClaimForWebhooksValues,
  sqliteClaimText,
  sqliteClaimValues,
  sqliteOutcomes,
  type WebhookTopUps,
} from './deliveries.queue-sql.ts';
import { inTransaction } from '../../db/transaction.ts';
import { newId } from '../../lib/ids.ts';
import { type Lease, releaseLeases, type StoredLease, storedLease } from '../../queue/lease.ts';
import { type AttemptHealth, createWebhookHealth, type HealthWrites } from './webhook-health.ts';

// The webhook deliveries queue: pending deliveries rows, claimed by the delivery worker under a lease with
// their event and webhook, given back, and moved on by each attempt's outcome (the attempt kept in the row,
// the one it replaces moved to delivery_attempts, and the webhook's health). The queue's SQL texts are in
// deliveries.queue-sql.ts (PostgreSQL's take array parameters, SQLite's are written once per shape). The
// worker holds the policy (signing, POSTing, what a response means). deliveries.repo.ts keeps the API's reads
// and the outbox's insert.

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
  const health = createWebhookHealth(webhooks);
  /** PostgreSQL's statements take their rows as array parameters (deliveries.queue-sql.ts). */
  const postgres = engine === 'postgres';

  /**
   * SQLite: leases the rows `lease` (its text and values: the UPDATE … RETURNING id of deliveries.queue-sql.ts)
   * selects and reads them back with their event and webhook (in process, no round trip to save; PostgreSQL
   * does both in one statement).
   */
  async function claimRows(
    lease: CompiledQuery,
    workerId: string,
    via: Kysely<Database> = db,
  ): Promise<ClaimedDelivery[]> {
    const { rows: claimed } = await via.executeQuery<{ id: string }>(lease);
    if (claimed.length === 0) return [];
    const { rows } = await via.executeQuery<ClaimedRow>(
      CompiledQuery.raw(sqliteClaimedText(claimed.length), [...claimed.map((row) => row.id), workerId]),
    );
    return rows.map(toClaimed);
  }

  /** Leases up to each of `webhooks`' limit of its due deliveries (claimForWebhooks). */
  async function claimForWebhooks(
    lease: StoredLease,
    webhooks: WebhookTopUps,
    via: Kysely<Database> = db,
  ): Promise<ClaimedDelivery[]> {
    if (!postgres) {
      const text = sqliteClaimForWebhooksText(webhooks.length);
      return claimRows(
        CompiledQuery.raw(text, sqliteClaimForWebhooksValues(lease, webhooks)),
        lease.workerId,
        via,
      );
    }
    const { rows } = await via.executeQuery<ClaimedRow>(postgresClaimForWebhooks(lease, webhooks));
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
    const values = outcomes.map((outcome, index): OutcomeValues => {
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
    // PostgreSQL answers with the outcomes it did not hold (none, almost always).
    const heldBut = (notHeld: readonly string[]) =>
      new Set(outcomes.map((outcome) => outcome.delivery.id).filter((id) => !notHeld.includes(id)));
    if (postgres && topUp) {
      const { rows } = await trx.executeQuery<
        ClaimedRow & { not_held: string[] | null; claimed_id: string | null }
      >(postgresOutcomes(values, topUp));
      return {
        held: heldBut(rows[0]?.not_held ?? []),
        claimed: rows.filter((row) => row.claimed_id !== null).map(toClaimed),
      };
    }
    if (postgres) {
      const { rows } = await trx.executeQuery<{ id: string }>(postgresOutcomes(values));
      return { held: heldBut(rows.map((row) => row.id)) };
    }
    const statements = sqliteOutcomes(values);
    // Only a delivery attempted before holds an attempt to move (as claimed: another worker's attempt since
    // then would mean the lease, and with it this outcome, was lost).
    if (outcomes.some((outcome) => outcome.attempt && outcome.delivery.holdsAttempt)) {
      await trx.executeQuery(statements.moveAttempts);
    }
    const { rows } = await trx.executeQuery<{ id: string }>(statements.update);
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
      postgres && !healthWrites
        ? await write(db, topUp)
        : await inTransaction(db, async (transaction) => {
            const written = await write(transaction.db);
            if (healthWrites) await health.write(outcomes, written.results, transaction);
            if (!topUp) return written;
            return {
              ...written,
              claimed: await claimForWebhooks(topUp.lease, topUp.webhooks, transaction.db),
            };
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
      if (postgres) {
        const { rows } = await db.executeQuery<ClaimedRow>(postgresClaim(stored, options.limit, excluded));
        return rows.map(toClaimed);
      }
      const text = sqliteClaimText(excluded.length);
      return claimRows(
        CompiledQuery.raw(text, sqliteClaimValues(stored, options.limit, excluded)),
        stored.workerId,
      );
    },

    /**
     * Leases, per webhook, up to its `limit` of its due deliveries, oldest due first, in one statement: how a
     * worker tops up the webhooks it knows have work. The pending rows' (webhook_id, next_attempt_at) index finds
     * each webhook's rows directly, however long other webhooks' backlogs are.
     */
    async claimForWebhooks(lease: Lease, webhooks: WebhookTopUps): Promise<ClaimedDelivery[]> {
      if (webhooks.length === 0) return [];
      return claimForWebhooks(storedLease(lease), webhooks);
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
