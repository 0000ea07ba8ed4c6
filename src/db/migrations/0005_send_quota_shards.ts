import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Sending without a hot row: one counter row per project made every accepted email of a project wait for
// the previous one's commit on PostgreSQL (100 emails/s). Queue positions now come from the project's own
// rows (an index finds its highest queued position), and the daily count is spread over a few shard rows.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.dropTable('project_send_state').execute();
    await db.schema
      .createTable('send_quota')
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('day', 'text', (col) => col.notNull())
      .addColumn('shard', 'integer', (col) => col.notNull())
      .addColumn('used', 'integer', (col) => col.notNull())
      .addPrimaryKeyConstraint('send_quota_pk', ['project_id', 'day', 'shard'])
      .execute();
    await db.schema
      .createIndex('email_recipients_project_ready')
      .on('email_recipients')
      .columns(['project_id', 'ready_seq'])
      .where(sql.ref('ready_seq'), 'is not', null)
      .execute();
  },
};
