import type { Kysely } from 'kysely';
import { type Page, type PageRequest, pageByIdDesc } from '../../db/pagination.ts';
import type { Database, Row } from '../../db/schema.ts';

export interface EventRecord {
  id: string;
  projectId: string;
  type: string;
  /** The data object as JSON text. */
  data: string;
  createdAt: string;
}

export interface NewDelivery {
  id: string;
  projectId: string;
  eventId: string;
  webhookId: string;
  dueAt: string;
  createdAt: string;
}

const toRecord = (row: Row<'events'>): EventRecord => ({
  id: row.id,
  projectId: row.project_id,
  type: row.type,
  data: row.data,
  createdAt: row.created_at,
});

/** Takes a Kysely instance or a transaction, so the event service can write an event and its deliveries at once. */
export function createEventRepo(db: Kysely<Database>) {
  return {
    async insert(record: EventRecord): Promise<void> {
      await db
        .insertInto('events')
        .values({
          id: record.id,
          project_id: record.projectId,
          type: record.type,
          data: record.data,
          created_at: record.createdAt,
        })
        .execute();
    },

    /** The project's enabled webhooks subscribed to `type` (or just `onlyWebhookId`, subscribed or not). */
    async recipients(projectId: string, type: string, onlyWebhookId?: string): Promise<string[]> {
      const rows = await db
        .selectFrom('webhooks')
        .select(['id', 'events'])
        .where('project_id', '=', projectId)
        .where('enabled', '=', true)
        .$if(onlyWebhookId !== undefined, (query) => query.where('id', '=', onlyWebhookId!))
        .orderBy('id')
        .execute();
      return rows
        .filter((row) => onlyWebhookId !== undefined || (JSON.parse(row.events) as string[]).includes(type))
        .map((row) => row.id);
    },

    /** These webhooks of the project (those that exist), with what a redelivery needs to know. */
    async webhooks(
      projectId: string,
      ids: readonly string[],
    ): Promise<Array<{ id: string; enabled: boolean; events: string[] }>> {
      if (ids.length === 0) return [];
      const rows = await db
        .selectFrom('webhooks')
        .select(['id', 'enabled', 'events'])
        .where('project_id', '=', projectId)
        .where('id', 'in', [...ids])
        .orderBy('id')
        .execute();
      return rows.map((row) => ({
        id: row.id,
        enabled: Boolean(row.enabled),
        events: JSON.parse(row.events) as string[],
      }));
    },

    async insertDeliveries(deliveries: NewDelivery[]): Promise<void> {
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

    async find(projectId: string, id: string): Promise<EventRecord | undefined> {
      const row = await db
        .selectFrom('events')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && toRecord(row);
    },

    async list(projectId: string, page: PageRequest, type?: string): Promise<Page<EventRecord>> {
      const result = await pageByIdDesc(page, (cursor, order, limit) => {
        let query = db.selectFrom('events').selectAll().where('project_id', '=', projectId);
        if (type !== undefined) query = query.where('type', '=', type);
        if (cursor) query = query.where('id', cursor.op, cursor.id);
        return query.orderBy('id', order).limit(limit).execute();
      });
      return { items: result.items.map(toRecord), hasMore: result.hasMore };
    },
  };
}

export type EventRepo = ReturnType<typeof createEventRepo>;
