import type { Kysely } from 'kysely';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import { deleteProjectRow, insertProjectRowUnlessNamed, updateProjectRow } from '../../db/project-rows.ts';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { EventSchemaMap } from './custom-events.schemas.ts';

export interface CustomEventRecord {
  id: string;
  projectId: string;
  name: string;
  schema: EventSchemaMap | null;
  createdAt: string;
  updatedAt: string;
}

export interface CustomEventSendRecord {
  id: string;
  projectId: string;
  eventName: string;
  contactId: string;
  payload: Record<string, unknown>;
  runsStarted: number;
  runsResumed: number;
  createdAt: string;
}

const toRecord = (row: Row<'custom_events'>): CustomEventRecord => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  schema: row.schema === null ? null : (JSON.parse(row.schema) as EventSchemaMap),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

/** The custom_events (declared names) and custom_event_sends (each one sent) tables. */
export function createCustomEventRepo(db: Kysely<Database>) {
  const select = (projectId: string, via: Kysely<Database> = db) =>
    via.selectFrom('custom_events').selectAll().where('project_id', '=', projectId);

  return {
    /** False when the project already declares the name. */
    async insert(record: CustomEventRecord, transaction: Transaction): Promise<boolean> {
      return insertProjectRowUnlessNamed(transaction.db, 'custom_events', 'name', record, {
        name: record.name,
        schema: record.schema === null ? null : JSON.stringify(record.schema),
      });
    },

    async find(
      projectId: string,
      by: { id: string } | { name: string },
      transaction?: Transaction,
    ): Promise<CustomEventRecord | undefined> {
      const query = select(projectId, transaction?.db);
      const row = await (
        'id' in by ? query.where('id', '=', by.id) : query.where('name', '=', by.name)
      ).executeTakeFirst();
      return row && toRecord(row);
    },

    async list(projectId: string, page: PageRequest): Promise<Page<CustomEventRecord>> {
      return mapPage(await pageOfQuery(select(projectId), page), toRecord);
    },

    async updateSchema(record: CustomEventRecord, transaction: Transaction): Promise<boolean> {
      return updateProjectRow(transaction.db, 'custom_events', record.projectId, record.id, {
        schema: record.schema === null ? null : JSON.stringify(record.schema),
        updated_at: record.updatedAt,
      });
    },

    async delete(projectId: string, id: string, transaction: Transaction): Promise<boolean> {
      return deleteProjectRow(transaction.db, 'custom_events', projectId, id);
    },

    async insertSend(record: CustomEventSendRecord, transaction: Transaction): Promise<void> {
      await transaction.db
        .insertInto('custom_event_sends')
        .values({
          id: record.id,
          project_id: record.projectId,
          event_name: record.eventName,
          contact_id: record.contactId,
          payload: JSON.stringify(record.payload),
          runs_started: record.runsStarted,
          runs_resumed: record.runsResumed,
          created_at: record.createdAt,
        })
        .execute();
    },
  };
}

export type CustomEventRepo = ReturnType<typeof createCustomEventRepo>;
