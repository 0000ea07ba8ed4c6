import type { Insertable, Kysely, Updateable } from 'kysely';
import type { Database } from './schema.ts';
import type { Transaction } from './transaction.ts';

// What the API's resources share in storage: a row that belongs to a project by `project_id` and is named by
// `id`, and that is only ever touched with both (another project's id is simply not there).

/** The tables of the API's resources that a project owns row by row. */
export type ProjectTable =
  | 'contacts'
  | 'contact_properties'
  | 'segments'
  | 'topics'
  | 'broadcasts'
  | 'custom_events'
  | 'automations'
  | 'domains'
  | 'webhooks'
  | 'templates'
  | 'inbound_routes';

/** What every project table has, to write any of them by one statement. */
type ProjectRowColumns = { project_id: string; id: string } & Record<string, unknown>;

/** Deletes a project's row by id, through `db` (the root or a transaction's); false when there was none. */
export async function deleteProjectRow(
  db: Kysely<Database>,
  table: ProjectTable,
  projectId: string,
  id: string,
): Promise<boolean> {
  const result = await db
    .deleteFrom(table)
    .where('project_id', '=', projectId)
    .where('id', '=', id)
    .executeTakeFirst();
  return Number(result.numDeletedRows) > 0;
}

/**
 * Writes `changes` to a project's row by id, through `db` (the root or a transaction's); false when there was
 * none.
 */
export async function updateProjectRow<T extends ProjectTable>(
  db: Kysely<Database>,
  table: T,
  projectId: string,
  id: string,
  changes: Updateable<Database[T]>,
): Promise<boolean> {
  // Kysely cannot type `set` over a union of tables; the caller's `changes` are checked against its own table
  // above, and every project table has `project_id` and `id`.
  const result = await (db as unknown as Kysely<Record<string, ProjectRowColumns>>)
    .updateTable(table as string)
    .set(changes as ProjectRowColumns)
    .where('project_id', '=', projectId)
    .where('id', '=', id)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** What every project row is stamped with, as its record names it. */
export interface ProjectRowRecord {
  id: string;
  projectId: string;
  createdAt: string;
  updatedAt: string;
}

/**
 * Inserts a project's row, `record`'s id, project and times with the table's own `columns`, unless the
 * project already has one with the same `nameColumn` (unique with `project_id`): false when it had one, and
 * nothing was written. Through `db` (the root or a transaction's).
 */
export async function insertProjectRowUnlessNamed<T extends ProjectTable>(
  db: Kysely<Database>,
  table: T,
  nameColumn: string & keyof Database[T],
  record: ProjectRowRecord,
  columns: Omit<Insertable<Database[T]>, 'id' | 'project_id' | 'created_at' | 'updated_at'>,
): Promise<boolean> {
  // As in updateProjectRow: Kysely cannot type `values` over a union of tables; the caller's `columns` are
  // checked against its own table above.
  const values = {
    id: record.id,
    project_id: record.projectId,
    ...columns,
    created_at: record.createdAt,
    updated_at: record.updatedAt,
  };
  const result = await (db as unknown as Kysely<Record<string, ProjectRowColumns>>)
    .insertInto(table as string)
    .values(values)
    .onConflict((conflict) => conflict.columns(['project_id', nameColumn]).doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
}

/**
 * A resource's create when the insert is all it writes: the record prepared before the transaction (checks,
 * ids, times) is inserted in it, and answered as `view` shows it.
 */
export const insertThenView =
  <R, V>(repo: { insert(record: R, transaction: Transaction): Promise<unknown> }, view: (record: R) => V) =>
  async (transaction: Transaction, record: R): Promise<V> => {
    await repo.insert(record, transaction);
    return view(record);
  };
