import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import type { PageRequest } from '../../db/pagination.ts';
import type { Database } from '../../db/schema.ts';
import type { Clock } from '../../lib/clock.ts';
import { invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import { createDeliveryRepo } from '../deliveries/deliveries.repo.ts';
import { toDeliveryView } from '../deliveries/deliveries.schemas.ts';
import { DELIVERY_CHANNEL, type DeliveryNotifier } from '../deliveries/notifier.ts';
import { type EventKind, isEventKind } from '../event-kinds/event-kinds.ts';
import { createEventRepo, type EventRecord } from './events.repo.ts';
import type { EventView, EventWithDeliveriesView } from './events.schemas.ts';

export interface EventServiceDeps {
  db: Kysely<Database>;
  engine: Engine;
  clock: Clock;
  notifier: DeliveryNotifier;
}

export interface EmitOptions {
  /**
   * Deliver to this webhook of the project only, whether or not it subscribes to the kind (a test send).
   * A disabled webhook still gets nothing: the caller checks and says so if it matters.
   */
  webhookId?: string;
}

export interface EmittedEvent extends EventView {
  /** The deliveries created, one per receiving webhook. */
  delivery_ids: string[];
}

const toView = (record: EventRecord): EventView => ({
  object: 'event',
  id: record.id,
  type: record.type,
  created_at: record.createdAt,
  data: JSON.parse(record.data) as Record<string, unknown>,
});

export function createEventService({ db, engine, clock, notifier }: EventServiceDeps) {
  const repo = createEventRepo(db);
  const deliveries = createDeliveryRepo(db, engine);

  return {
    /**
     * Stores an event and one pending delivery per enabled webhook of the project subscribed to its kind,
     * in one transaction (the outbox: if the event exists, so do its deliveries), then wakes the workers.
     */
    async emit(
      projectId: string,
      kind: EventKind,
      data: Record<string, unknown>,
      options: EmitOptions = {},
    ): Promise<EmittedEvent> {
      if (!isEventKind(kind)) throw new Error(`Unknown event kind '${String(kind)}'.`);
      if (typeof data !== 'object' || data === null || Array.isArray(data)) {
        throw new Error('Event data must be an object.');
      }
      const now = clock.now().toISOString();
      const record: EventRecord = {
        id: newId('evt'),
        projectId,
        type: kind,
        data: JSON.stringify(data),
        createdAt: now,
      };
      const deliveryIds = await db.transaction().execute(async (trx) => {
        const events = createEventRepo(trx);
        await events.insert(record);
        const webhookIds = await events.recipients(projectId, kind, options.webhookId);
        const rows = webhookIds.map((webhookId) => ({
          id: newId('dlv'),
          projectId,
          eventId: record.id,
          webhookId,
          dueAt: now,
          createdAt: now,
        }));
        await events.insertDeliveries(rows);
        // PostgreSQL delivers a NOTIFY at commit, so workers in other processes wake only for committed work.
        if (rows.length > 0 && engine === 'postgres')
          await sql.raw(`NOTIFY ${DELIVERY_CHANNEL}`).execute(trx);
        return rows.map((row) => row.id);
      });
      if (deliveryIds.length > 0) notifier.notify();
      return { ...toView(record), delivery_ids: deliveryIds };
    },

    async list(projectId: string, page: PageRequest, type?: string) {
      if (type !== undefined && !isEventKind(type)) {
        throw invalidParam('type', `Unknown event kind '${type}'; GET /v1/event-kinds lists them.`);
      }
      const result = await repo.list(projectId, page, type);
      return { items: result.items.map(toView), hasMore: result.hasMore };
    },

    async get(projectId: string, id: string): Promise<EventWithDeliveriesView> {
      const record = isId('evt', id) ? await repo.find(projectId, id) : undefined;
      if (!record) throw notFound('event', id);
      const rows = await deliveries.listForEvent(projectId, id);
      return { ...toView(record), deliveries: rows.map(toDeliveryView) };
    },
  };
}

export type EventService = ReturnType<typeof createEventService>;
