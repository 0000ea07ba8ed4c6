import { sql } from 'kysely';
import type { Migration } from 'kysely/migration';

export const migration: Migration = {
  // Two processes starting at once on an empty database must not both make a default project.
  async up(db) {
    await db.schema
      .createIndex('projects_one_default')
      .on('projects')
      .column('is_default')
      .unique()
      .where(sql.ref('is_default'), '=', sql.lit(true))
      .execute();
  },
};
