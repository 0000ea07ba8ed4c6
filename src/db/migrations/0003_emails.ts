import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Sending: an email and one row per recipient (the sending job, claimed with a lease like a delivery),
// the captured MIME of the capture transport, the email's events (an outbox in front of the event
// service) and each project's fair-queue clock and daily count.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('emails')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('from_address', 'text', (col) => col.notNull())
      .addColumn('to_addresses', 'text', (col) => col.notNull())
      .addColumn('cc_addresses', 'text', (col) => col.notNull())
      .addColumn('bcc_addresses', 'text', (col) => col.notNull())
      .addColumn('reply_to', 'text', (col) => col.notNull())
      .addColumn('subject', 'text', (col) => col.notNull())
      .addColumn('html', 'text')
      .addColumn('text', 'text')
      .addColumn('headers', 'text', (col) => col.notNull())
      .addColumn('tags', 'text', (col) => col.notNull())
      .addColumn('template_id', 'text')
      .addColumn('template_version', 'integer')
      .addColumn('message_id', 'text', (col) => col.notNull())
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('recipient_count', 'integer', (col) => col.notNull())
      .addColumn('scheduled_at', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema.createIndex('emails_project_id').on('emails').columns(['project_id', 'id']).execute();

    await db.schema
      .createTable('email_recipients')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('email_id', 'text', (col) => col.notNull().references('emails.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('position', 'integer', (col) => col.notNull())
      .addColumn('type', 'text', (col) => col.notNull())
      .addColumn('address', 'text', (col) => col.notNull())
      .addColumn('host', 'text', (col) => col.notNull())
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('ready_seq', 'bigint')
      .addColumn('wait_until', 'text')
      .addColumn('next_attempt_at', 'text')
      .addColumn('locked_until', 'text')
      .addColumn('locked_by', 'text')
      .addColumn('last_attempt_at', 'text')
      .addColumn('last_response', 'text')
      .addColumn('last_response_code', 'integer')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .addColumn('completed_at', 'text')
      .execute();
    await db.schema
      .createIndex('email_recipients_email')
      .on('email_recipients')
      .columns(['email_id', 'position'])
      .execute();
    // The two queue indexes hold only the rows they serve (due, or waiting), so they stay small however
    // many sent recipients the table keeps.
    await db.schema
      .createIndex('email_recipients_ready')
      .on('email_recipients')
      .column('ready_seq')
      .where(sql.ref('ready_seq'), 'is not', null)
      .execute();
    await db.schema
      .createIndex('email_recipients_waiting')
      .on('email_recipients')
      .column('wait_until')
      .where(sql.ref('wait_until'), 'is not', null)
      .execute();

    await db.schema
      .createTable('email_raw')
      .addColumn('email_id', 'text', (col) => col.primaryKey().references('emails.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('raw', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();

    await db.schema
      .createTable('email_events')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('email_id', 'text', (col) => col.notNull().references('emails.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('recipient', 'text', (col) => col.notNull())
      .addColumn('type', 'text', (col) => col.notNull())
      .addColumn('data', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('event_id', 'text')
      .execute();
    await db.schema
      .createIndex('email_events_email')
      .on('email_events')
      .columns(['email_id', 'id'])
      .execute();
    await db.schema
      .createIndex('email_events_unemitted')
      .on('email_events')
      .column('created_at')
      .where(sql.ref('event_id'), 'is', null)
      .execute();

    await db.schema
      .createTable('project_send_state')
      .addColumn('project_id', 'text', (col) =>
        col.primaryKey().references('projects.id').onDelete('cascade'),
      )
      .addColumn('fair_seq', 'bigint', (col) => col.notNull())
      .addColumn('quota_day', 'text', (col) => col.notNull())
      .addColumn('quota_used', 'integer', (col) => col.notNull())
      .execute();
  },
};
