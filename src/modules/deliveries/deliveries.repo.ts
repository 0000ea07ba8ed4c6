import { type Kysely, sql } from 'kysely';
import { idAt } from '../../lib/ids.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import { type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, DeliveryStatus, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';

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

// The deliveries table as the API and the outbox use it: the pending rows an event's emit writes, the
// delivery log's reads and recovery's re-queue. The queue's claims and outcome writes are its adapter's
// (deliveries.queue.ts).
export function createDeliveryRepo(db: Kysely<Database>) {
  /** A webhook's deliveries with their event's kind, as the delivery log reads them. */
  const webhookDeliveries = (projectId: string, webhookId: string) =>
    db
      .selectFrom('deliveries as d')
      .innerJoin('events as e', 'e.id', 'd.event_id')
      .selectAll('d')
      .select('e.type as event_type')
      .where('d.project_id', '=', projectId)
      .where('d.webhook_id', '=', webhookId);

  return {
    /** Retention: attempts made before `cutoff` (their deliveries go with their events). */
    pruneTargets: (cutoff: Date): PruneTarget[] => [
      pruneTarget(db, 'delivery_attempts', 'id', sql<boolean>`id < ${idAt('att', cutoff)}`),
    ],

    /** Queues deliveries, due at `dueAt`, in `transaction` (the outbox writes them with their event). */
    async insertPending(deliveries: readonly NewDelivery[], transaction: Transaction): Promise<void> {
      if (deliveries.length === 0) return;
      await transaction.db
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
      let query = webhookDeliveries(projectId, webhookId);
      // A literal rather than a parameter: SQLite uses the partial index on failed deliveries only when
      // the query names the same value.
      if (status !== undefined) query = query.where('d.status', '=', sql.lit(status));
      return pageOfQuery(query, page, 'd.id');
    },

    /** One of a webhook's deliveries, with its event's kind. */
    async findForWebhook(
      projectId: string,
      webhookId: string,
      id: string,
    ): Promise<DeliveryWithType | undefined> {
      return webhookDeliveries(projectId, webhookId).where('d.id', '=', id).executeTakeFirst();
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
    async requeueFailed(options: RequeueRequest, transaction: Transaction): Promise<number> {
      const result = await transaction.db
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
