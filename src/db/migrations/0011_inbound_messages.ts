import { type Kysely, PostgresAdapter } from 'kysely';
import type { Migration } from 'kysely/migration';

// Reports mailed back to the bounce domain (DSNs, feedback reports, auto-replies): each message is stored
// whole before the listener answers 250, then read from here by the inbound worker (a leased queue like
// the others), so a crash between the two loses nothing. Also: emails are found by their Message-ID when a
// report names no return path of ours, and a recipient remembers that a delay was already reported.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema
      .createTable('inbound_messages')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('received_at', 'text', (col) => col.notNull())
      .addColumn('mail_from', 'text', (col) => col.notNull())
      .addColumn('rcpt_to', 'text', (col) => col.notNull())
      .addColumn('remote_address', 'text')
      .addColumn('size', 'integer', (col) => col.notNull())
      // The message as received, byte for byte: hostile input need not be valid UTF-8.
      .addColumn('raw', postgres ? 'bytea' : 'blob', (col) => col.notNull())
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('kind', 'text')
      .addColumn('detail', 'text')
      .addColumn('subject', 'text')
      .addColumn('project_id', 'text', (col) => col.references('projects.id').onDelete('cascade'))
      .addColumn('email_id', 'text')
      .addColumn('recipient', 'text')
      .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('locked_until', 'text')
      .addColumn('locked_by', 'text')
      .addColumn('processed_at', 'text')
      .execute();
    await db.schema
      .createIndex('inbound_messages_status')
      .on('inbound_messages')
      .columns(['status', 'id'])
      .execute();
    await db.schema
      .createIndex('inbound_messages_project')
      .on('inbound_messages')
      .columns(['project_id', 'id'])
      .execute();
    await db.schema.createIndex('emails_message_id').on('emails').column('message_id').execute();
    await db.schema.alterTable('email_recipients').addColumn('delay_reported_at', 'text').execute();
  },
};
