import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// Engagement (opens, clicks, one-click unsubscribe) and the daily numbers senders watch.
// - email_tracking: what a send asked for, and the links of its html, stored once per email (the per-recipient
//   MIME is built at send time from these, never stored).
// - recipient_engagement: per recipient, counters kept with upserts, so "first open" and "unique" are decided
//   by the database even when two opens race.
// - email_stats_daily: per project, UTC day, tag ('' for all) and metric, a count kept up to date in the
//   transaction that records the event: the stats route reads a few hundred rows, never the events table.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('email_tracking')
      .addColumn('email_id', 'text', (col) => col.primaryKey().references('emails.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('opens', 'boolean', (col) => col.notNull())
      .addColumn('clicks', 'boolean', (col) => col.notNull())
      .addColumn('unsubscribe', 'boolean', (col) => col.notNull())
      .addColumn('links', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();

    await db.schema
      .createTable('recipient_engagement')
      .addColumn('recipient_id', 'text', (col) =>
        col.primaryKey().references('email_recipients.id').onDelete('cascade'),
      )
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('email_id', 'text', (col) => col.notNull())
      .addColumn('open_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('human_open_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('automated_open_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('first_opened_at', 'text')
      .addColumn('last_opened_at', 'text')
      .addColumn('click_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('human_click_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('automated_click_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('first_clicked_at', 'text')
      .addColumn('unsubscribe_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('unsubscribed_at', 'text')
      .execute();
    await db.schema
      .createIndex('recipient_engagement_email')
      .on('recipient_engagement')
      .columns(['project_id', 'email_id'])
      .execute();

    await db.schema
      .createTable('email_stats_daily')
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('tag', 'text', (col) => col.notNull())
      .addColumn('day', 'text', (col) => col.notNull())
      .addColumn('metric', 'text', (col) => col.notNull())
      .addColumn('count', 'bigint', (col) => col.notNull())
      .addPrimaryKeyConstraint('email_stats_daily_pk', ['project_id', 'tag', 'day', 'metric'])
      .execute();
  },
};
