import type { Kysely } from 'kysely';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { deleteProjectRow, insertProjectRowUnlessNamed, updateProjectRow } from '../../db/project-rows.ts';

export type PropertyType = 'string' | 'number';
export type PropertyValue = string | number;

export interface ContactPropertyRecord {
  id: string;
  projectId: string;
  key: string;
  type: PropertyType;
  fallbackValue: PropertyValue | null;
  createdAt: string;
  updatedAt: string;
}

const toRecord = (row: Row<'contact_properties'>): ContactPropertyRecord => ({
  id: row.id,
  projectId: row.project_id,
  key: row.key,
  type: row.type,
  fallbackValue: row.fallback_value === null ? null : (JSON.parse(row.fallback_value) as PropertyValue),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

const fallbackText = (value: PropertyValue | null): string | null =>
  value === null ? null : JSON.stringify(value);

/** The contact_properties table: what a project declares its contacts' properties to be. */
export function createContactPropertyRepo(db: Kysely<Database>) {
  const select = (via: Kysely<Database>, projectId: string) =>
    via.selectFrom('contact_properties').selectAll().where('project_id', '=', projectId);

  return {
    /** False when the project already has a property with this key (nothing written). */
    async insert(record: ContactPropertyRecord, transaction: Transaction): Promise<boolean> {
      return insertProjectRowUnlessNamed(transaction.db, 'contact_properties', 'key', record, {
        key: record.key,
        type: record.type,
        fallback_value: fallbackText(record.fallbackValue),
      });
    },

    async find(
      projectId: string,
      column: 'id' | 'key',
      value: string,
    ): Promise<ContactPropertyRecord | undefined> {
      const row = await select(db, projectId).where(column, '=', value).executeTakeFirst();
      return row && toRecord(row);
    },

    /** Every property of the project (at most MAX_CONTACT_PROPERTIES), oldest first; in `transaction` when given. */
    async all(projectId: string, transaction?: Transaction): Promise<ContactPropertyRecord[]> {
      const rows = await select(transaction?.db ?? db, projectId)
        .orderBy('id', 'asc')
        .execute();
      return rows.map(toRecord);
    },

    /** How many properties the project has, in `transaction` (the one that adds the next). */
    async count(projectId: string, transaction: Transaction): Promise<number> {
      const row = await transaction.db
        .selectFrom('contact_properties')
        .select((eb) => eb.fn.countAll<number | string>().as('count'))
        .where('project_id', '=', projectId)
        .executeTakeFirstOrThrow();
      return Number(row.count);
    },

    async list(projectId: string, page: PageRequest): Promise<Page<ContactPropertyRecord>> {
      const query = select(db, projectId);
      return mapPage(await pageOfQuery(query, page), toRecord);
    },

    async update(record: ContactPropertyRecord, transaction?: Transaction): Promise<boolean> {
      return updateProjectRow(transaction?.db ?? db, 'contact_properties', record.projectId, record.id, {
        fallback_value: fallbackText(record.fallbackValue),
        updated_at: record.updatedAt,
      });
    },

    async delete(projectId: string, id: string, transaction?: Transaction): Promise<boolean> {
      // Contacts' values of it stay in their rows, unread (keyed by this id), until each contact's next write.
      return deleteProjectRow(transaction?.db ?? db, 'contact_properties', projectId, id);
    },
  };
}

export type ContactPropertyRepo = ReturnType<typeof createContactPropertyRepo>;
