import { type Kysely, PostgresAdapter } from 'kysely';
import type { Migration } from 'kysely/migration';

// SMTP submission (issue 27): an email can come from an application speaking SMTP. It is the same email as an
// API send (the same tables, rules, events), with where it came from (`source`, and the SMTP username), and the
// message as the application wrote it (`email_submissions`): what the sending worker sends, byte for byte,
// with only what Postwire must add. Its Message-ID is unique per project, so a client that retries after a
// lost 250 gets the first email back instead of a second one.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema
      .alterTable('emails')
      .addColumn('source', 'text', (col) => col.notNull().defaultTo('api'))
      .execute();
    await db.schema.alterTable('emails').addColumn('smtp_username', 'text').execute();
    await db.schema
      .createTable('email_submissions')
      .addColumn('email_id', 'text', (col) => col.primaryKey().references('emails.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('message_id', 'text', (col) => col.notNull())
      // Submitted mail need not be valid UTF-8: bytes, not text.
      .addColumn('raw', postgres ? 'bytea' : 'blob', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('email_submissions_message_id')
      .on('email_submissions')
      .columns(['project_id', 'message_id'])
      .unique()
      .execute();
  },
};
