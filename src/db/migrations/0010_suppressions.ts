import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// The suppression list: per project, addresses that are not sent to any more (a hard bounce, a complaint,
// an unsubscribe, or added by hand). Addresses are stored lowercased, so they match case-insensitively.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('suppressions')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('address', 'text', (col) => col.notNull())
      .addColumn('reason', 'text', (col) => col.notNull())
      .addColumn('email_id', 'text')
      .addColumn('detail', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addUniqueConstraint('suppressions_project_address', ['project_id', 'address'])
      .execute();
    await db.schema
      .createIndex('suppressions_project_id')
      .on('suppressions')
      .columns(['project_id', 'id'])
      .execute();
  },
};
