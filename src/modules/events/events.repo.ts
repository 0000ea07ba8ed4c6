import { type Kysely, sql } from 'kysely';
import { idAt } from '../../lib/ids.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, Row } from '../../db/schema.ts';
import { valuesList } from '../../db/sql-text.ts';
import type { Transaction } from '../../db/transaction.ts';

export interface EventRecord {
  id: string;
  projectId: string;
  type: string;
  /** The data object as JSON text. */
  data: string;
  createdAt: string;
  /** The email the event is about, if any: an email's timeline is read from its events. */
  emailId: string | null;
}

const toRecord = (row: Row<'events'>): EventRecord => ({
  id: row.id,
  projectId: row.project_id,
  type: row.type,
  data: row.data,
  createdAt: row.created_at,
  emailId: row.email_id,
});

const EVENT_COLUMNS = ['id', 'project_id', 'type', 'data', 'created_at', 'email_id'] as const;

/** An event's row as stored. */
const toRow = (record: EventRecord): Row<'events'> => ({
  id: record.id,
  project_id: record.projectId,
  type: record.type,
  data: record.data,
  created_at: record.createdAt,
  email_id: record.emailId,
});

/**
 * PostgreSQL: the events' INSERT as a data-modifying part of another statement's WITH, named `name`, storing
 * the events only when `guard` (an SQL condition on that statement's other parts) holds; its placeholders
 * from `param`, in the order of the text.
 */
export function insertEventsWhere(
  name: string,
  records: readonly EventRecord[],
  param: (value: unknown) => string,
  guard: string,
): string {
  const rows = records.map(toRow);
  const columns = EVENT_COLUMNS.join(', ');
  return `${name} AS (INSERT INTO events (${columns}) SELECT ${columns}
    FROM (${valuesList(EVENT_COLUMNS, rows, param)}) AS e (${columns}) WHERE ${guard})`;
}

/** The events table; the event service writes an event with its deliveries, in its caller's transaction. */
export function createEventRepo(db: Kysely<Database>) {
  return {
    /**
     * Retention: events from before `cutoff` that no delivery still waits to send (their deliveries and
     * attempts go with them).
     */
    pruneTargets: (cutoff: Date): PruneTarget[] => [
      pruneTarget(
        db,
        'events',
        'id',
        sql<boolean>`id < ${idAt('evt', cutoff)} AND NOT EXISTS (SELECT 1 FROM deliveries
          WHERE deliveries.event_id = events.id AND deliveries.status = 'pending')`,
      ),
    ],

    /**
     * The statement that stores events in `transaction`, to run alone (insert) or alongside another (at least
     * one record).
     */
    insertStatement: (records: readonly EventRecord[], transaction: Transaction) =>
      transaction.db.insertInto('events').values(records.map(toRow)),

    async insert(records: readonly EventRecord[], transaction: Transaction): Promise<void> {
      if (records.length === 0) return;
      await this.insertStatement(records, transaction).execute();
    },

    /** An email's events, oldest first: its timeline; in `transaction` when given. */
    async forEmail(projectId: string, emailId: string, transaction?: Transaction): Promise<EventRecord[]> {
      const rows = await (transaction?.db ?? db)
        .selectFrom('events')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('email_id', '=', emailId)
        .orderBy('id')
        .execute();
      return rows.map(toRecord);
    },

    /** The events of these emails of the project, newest first (a contact's activity). */
    async forEmails(projectId: string, emailIds: readonly string[]): Promise<EventRecord[]> {
      if (emailIds.length === 0) return [];
      const rows = await db
        .selectFrom('events')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('email_id', 'in', emailIds)
        .orderBy('id', 'desc')
        .execute();
      return rows.map(toRecord);
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
      let query = db.selectFrom('events').selectAll().where('project_id', '=', projectId);
      if (type !== undefined) query = query.where('type', '=', type);
      return mapPage(await pageOfQuery(query, page), toRecord);
    },
  };
}

export type EventRepo = ReturnType<typeof createEventRepo>;
