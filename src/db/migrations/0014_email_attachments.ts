import { type Kysely, PostgresAdapter } from 'kysely';
import type { Migration } from 'kysely/migration';

// The files sent with an email, stored with it when it is accepted: every attempt (and a retry after a
// crash) builds the same MIME from them, and nobody uploads them twice.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema
      .createTable('email_attachments')
      .addColumn('email_id', 'text', (col) => col.notNull().references('emails.id').onDelete('cascade'))
      .addColumn('position', 'integer', (col) => col.notNull())
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('filename', 'text', (col) => col.notNull())
      .addColumn('content_type', 'text')
      .addColumn('content_id', 'text')
      .addColumn('size', 'integer', (col) => col.notNull())
      .addColumn('content', postgres ? 'bytea' : 'blob', (col) => col.notNull())
      .addPrimaryKeyConstraint('email_attachments_pk', ['email_id', 'position'])
      .execute();
  },
};
