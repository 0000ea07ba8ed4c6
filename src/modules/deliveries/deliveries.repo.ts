import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { type Page, type PageRequest, pageByIdDesc } from '../../db/pagination.ts';
import type { Database, DeliveryStatus, Row } from '../../db/schema.ts';
import { newId } from '../../lib/ids.ts';

/** A delivery a worker holds the lease on, with what it needs to make the attempt. */
export interface ClaimedDelivery {
  id: string;
  projectId: string;
  eventId: string;
  webhookId: string;
  attempts: number;
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
  delivery: Pick<ClaimedDelivery, 'id' | 'projectId' | 'eventId' | 'webhookId'>;
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

export type DeliveryRecord = Row<'deliveries'>;
export type AttemptRow = Row<'delivery_attempts'>;
/** A delivery with its event's kind, as the delivery log shows it. */
export type DeliveryWithType = DeliveryRecord & { event_type: string };

export function createDeliveryRepo(db: Kysely<Database>, engine: Engine) {
  return {
    /**
     * Leases up to `limit` due deliveries to `workerId` until `lockedUntil`, oldest due first, skipping
     * deliveries of `excludeWebhookIds` (webhooks already at this worker's per-webhook limit). One statement:
     * PostgreSQL skips rows another worker is claiming at the same moment; SQLite serializes writers.
     *
     *   UPDATE deliveries SET locked_until = ?, locked_by = ? WHERE id IN (
     *     SELECT id FROM deliveries WHERE status = 'pending' AND next_attempt_at <= ?
     *       AND (locked_until IS NULL OR locked_until < ?) [AND webhook_id NOT IN (…)]
     *     ORDER BY next_attempt_at LIMIT ? [FOR UPDATE SKIP LOCKED]) RETURNING id, webhook_id
     */
    async claim(options: {
      workerId: string;
      now: string;
      lockedUntil: string;
      limit: number;
      excludeWebhookIds: readonly string[];
    }): Promise<Array<{ id: string; webhookId: string }>> {
      const due = db
        .selectFrom('deliveries')
        .select('id')
        .where('status', '=', 'pending')
        .where('next_attempt_at', '<=', options.now)
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', options.now)]))
        .$if(options.excludeWebhookIds.length > 0, (query) =>
          query.where('webhook_id', 'not in', [...options.excludeWebhookIds]),
        )
        .orderBy('next_attempt_at')
        .limit(options.limit)
        .$if(engine === 'postgres', (query) => query.forUpdate().skipLocked());
      const rows = await db
        .updateTable('deliveries')
        .set({ locked_until: options.lockedUntil, locked_by: options.workerId })
        .where('id', 'in', due)
        .returning(['id', 'webhook_id'])
        .execute();
      return rows.map((row) => ({ id: row.id, webhookId: row.webhook_id }));
    },

    /** The claimed deliveries with their event and webhook, read after the claim. */
    async loadClaimed(workerId: string, ids: readonly string[]): Promise<ClaimedDelivery[]> {
      if (ids.length === 0) return [];
      const rows = await db
        .selectFrom('deliveries as d')
        .innerJoin('events as e', 'e.id', 'd.event_id')
        .innerJoin('webhooks as w', 'w.id', 'd.webhook_id')
        .select([
          'd.id',
          'd.project_id',
          'd.event_id',
          'd.webhook_id',
          'd.attempts',
          'e.type',
          'e.data',
          'e.created_at as event_created_at',
          'w.url',
          'w.enabled',
          'w.disabled_reason',
          'w.secret_sealed',
          'w.previous_secret_sealed',
          'w.previous_secret_expires_at',
        ])
        .where('d.id', 'in', [...ids])
        .where('d.locked_by', '=', workerId)
        .execute();
      return rows.map((row) => ({
        id: row.id,
        projectId: row.project_id,
        eventId: row.event_id,
        webhookId: row.webhook_id,
        attempts: Number(row.attempts),
        eventType: row.type,
        eventData: row.data,
        eventCreatedAt: row.event_created_at,
        url: row.url,
        webhookEnabled: Boolean(row.enabled),
        disabledReason: row.disabled_reason,
        secretSealed: row.secret_sealed,
        previousSecretSealed: row.previous_secret_sealed,
        previousSecretExpiresAt: row.previous_secret_expires_at,
      }));
    },

    /** Gives leases back without an attempt (more claimed than a webhook's free slots, or shutting down). */
    async release(workerId: string, ids?: readonly string[]): Promise<void> {
      if (ids !== undefined && ids.length === 0) return;
      await db
        .updateTable('deliveries')
        .set({ locked_until: null, locked_by: null })
        .where('locked_by', '=', workerId)
        .where('status', '=', 'pending')
        .$if(ids !== undefined, (query) => query.where('id', 'in', [...ids!]))
        .execute();
    },

    /** The earliest due time among pending deliveries, to sleep until then rather than poll. */
    async nextDueAt(): Promise<string | undefined> {
      const row = await db
        .selectFrom('deliveries')
        .select((eb) => eb.fn.min('next_attempt_at').as('next'))
        .where('status', '=', 'pending')
        .executeTakeFirst();
      return row?.next ?? undefined;
    },

    /**
     * Records an attempt and the delivery's new state. Only the lease holder moves the delivery on, so a
     * worker whose lease expired (and whose delivery another worker has claimed since) cannot overwrite
     * that worker's result; its attempt is still recorded, since it did happen.
     */
    async recordOutcome(outcome: DeliveryOutcome): Promise<OutcomeResult> {
      const { delivery, now } = outcome;
      const attemptRow = outcome.attempt && {
        id: newId('att'),
        delivery_id: delivery.id,
        project_id: delivery.projectId,
        webhook_id: delivery.webhookId,
        event_id: delivery.eventId,
        attempted_at: outcome.attempt.attemptedAt,
        status_code: outcome.attempt.statusCode,
        duration_ms: outcome.attempt.durationMs,
        error: outcome.attempt.error,
        response_excerpt: outcome.attempt.responseExcerpt,
      };

      const result = await db.transaction().execute(async (trx): Promise<OutcomeResult> => {
        const updated = await trx
          .updateTable('deliveries')
          .set((eb) => ({
            status: outcome.status,
            ...(outcome.attempt
              ? {
                  attempts: eb('attempts', '+', 1),
                  last_attempt_at: outcome.attempt.attemptedAt,
                  last_status_code: outcome.attempt.statusCode,
                }
              : {}),
            last_error: outcome.lastError,
            ...(outcome.nextAttemptAt !== undefined ? { next_attempt_at: outcome.nextAttemptAt } : {}),
            locked_until: null,
            locked_by: null,
            updated_at: now,
            completed_at: outcome.status === 'pending' ? null : now,
          }))
          .where('id', '=', delivery.id)
          .where('locked_by', '=', outcome.workerId)
          .where('status', '=', 'pending')
          .executeTakeFirst();
        if (Number(updated.numUpdatedRows) === 0) return { held: false };

        if (attemptRow) await trx.insertInto('delivery_attempts').values(attemptRow).execute();
        if (!outcome.health) return { held: true };

        // Every attempt to a busy webhook would otherwise write its row: the writes are skipped when they
        // change nothing that matters (a failure streak already started; a success recorded in the last
        // minute), so concurrent outcomes for one webhook do not queue on its row lock.
        if (outcome.health.ok) {
          const recent = new Date(Date.parse(now) - SUCCESS_RECORD_INTERVAL_MS).toISOString();
          await trx
            .updateTable('webhooks')
            .set({ last_success_at: now, failing_since: null })
            .where('id', '=', delivery.webhookId)
            .where((eb) =>
              eb.or([
                eb('failing_since', 'is not', null),
                eb('last_success_at', 'is', null),
                eb('last_success_at', '<', recent),
              ]),
            )
            .execute();
          return { held: true };
        }

        await trx
          .updateTable('webhooks')
          .set({ failing_since: now })
          .where('id', '=', delivery.webhookId)
          .where('failing_since', 'is', null)
          .execute();
        const webhook = await trx
          .selectFrom('webhooks')
          .select(['enabled', 'failing_since'])
          .where('id', '=', delivery.webhookId)
          .executeTakeFirst();
        if (!webhook || !webhook.enabled) return { held: true };
        let reason = outcome.health.disableNow;
        const failingSince = webhook.failing_since ?? now;
        if (!reason && Date.parse(now) - Date.parse(failingSince) >= outcome.health.disableAfterMs) {
          reason = `Every delivery attempt has failed since ${failingSince}; the webhook was disabled at ${now}.`;
        }
        if (!reason) return { held: true };
        await trx
          .updateTable('webhooks')
          .set({ enabled: false, disabled_reason: reason, updated_at: now })
          .where('id', '=', delivery.webhookId)
          .where('enabled', '=', true)
          .execute();
        return { held: true, disabledReason: reason };
      });

      if (!result.held && attemptRow) {
        // Not ours any more; still keep the attempt in the log unless the delivery itself is gone.
        try {
          const exists = await db
            .selectFrom('deliveries')
            .select('id')
            .where('id', '=', delivery.id)
            .executeTakeFirst();
          if (exists) await db.insertInto('delivery_attempts').values(attemptRow).execute();
        } catch {
          // Deleted in between (its webhook was deleted): there is nothing left to attach the attempt to.
        }
      }
      return result;
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

    /** The attempts of these deliveries, oldest first, by delivery id. */
    async listAttempts(
      projectId: string,
      deliveryIds: readonly string[],
    ): Promise<Map<string, AttemptRow[]>> {
      const byDelivery = new Map<string, AttemptRow[]>();
      if (deliveryIds.length === 0) return byDelivery;
      const rows = await db
        .selectFrom('delivery_attempts')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('delivery_id', 'in', [...deliveryIds])
        .orderBy('attempted_at')
        .orderBy('id')
        .execute();
      for (const row of rows) {
        const list = byDelivery.get(row.delivery_id);
        if (list) list.push(row);
        else byDelivery.set(row.delivery_id, [row]);
      }
      return byDelivery;
    },

    /**
     * Puts a webhook's failed deliveries created since `since` back in the queue, due now, with the retry
     * schedule starting over (`attempts` counts the current run; the attempt log keeps the earlier ones).
     * Returns how many were re-queued.
     */
    async requeueFailed(options: {
      projectId: string;
      webhookId: string;
      since: string;
      now: string;
    }): Promise<number> {
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
