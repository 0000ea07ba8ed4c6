import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

// What the API's resources share in storage: a row that belongs to a project by `project_id` and is named by
// `id`, and that is only ever touched with both (another project's id is simply not there).

/** The tables of the API's resources that a project owns row by row. */
export type ProjectTable =
  | 'contacts'
  | 'contact_properties'
  | 'segments'
  | 'topics'
  | 'domains'
  | 'webhooks'
  | 'templates'
  | 'inbound_routes';

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
