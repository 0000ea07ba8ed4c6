import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Contact imports (issue 37, third step): a CSV import is a job. Its bytes are kept in `message_pieces`
// (owner `contact_import:<id>`, 256 KiB a row) from the request that uploads them until the job has read them;
// the row is the job (leased by a worker: `locked_by`, `locked_until`) and what the API shows of it: counts
// and a bounded list of the rows that failed, as JSON text.
//
// Also the indexes the contact list's filters read: unsubscribed (with the page order), and on PostgreSQL the
// email prefix (a LIKE, which the unique (project_id, email) index serves only under the C collation; SQLite
// reads that index for its range: src/db/engine/sql.ts textStartsWith).
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('contact_imports')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      // queued, in_progress, completed, failed
      .addColumn('status', 'text', (col) => col.notNull())
      // JSON text: the column map by column index, on_conflict, segments, topics.
      .addColumn('plan', 'text', (col) => col.notNull())
      .addColumn('bytes', 'integer', (col) => col.notNull())
      .addColumn('rows_total', 'integer', (col) => col.notNull())
      .addColumn('rows_read', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('created_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('updated_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('skipped_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('failed_count', 'integer', (col) => col.notNull().defaultTo(0))
      // JSON text: [{ row, reason }], the first failures only.
      .addColumn('errors', 'text', (col) => col.notNull().defaultTo('[]'))
      .addColumn('failure', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('started_at', 'text')
      .addColumn('completed_at', 'text')
      .addColumn('locked_by', 'text')
      .addColumn('locked_until', 'text')
      .execute();
    await db.schema
      .createIndex('contact_imports_project_id')
      .on('contact_imports')
      .columns(['project_id', 'id'])
      .execute();
    await db.schema
      .createIndex('contact_imports_due')
      .on('contact_imports')
      .columns(['status', 'locked_until'])
      .execute();
    await db.schema
      .createIndex('contacts_project_unsubscribed')
      .on('contacts')
      .columns(['project_id', 'unsubscribed', 'id'])
      .execute();
    if (db.getExecutor().adapter instanceof PostgresAdapter) {
      await sql`create index contacts_project_email_prefix on contacts (project_id, email text_pattern_ops)`.execute(
        db,
      );
    }
  },
};
