import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Broadcasts (issue 37, item 4): one row per broadcast, its copies ordinary emails.
//
// An email that is a broadcast's copy names its broadcast and contact (`broadcast_id`, `contact_id`), unique
// together: the fan-out writes a batch's copies and its place in the segment (`cursor`) in one transaction, so
// a crash between batches resumes after the last committed one, and the index refuses a second copy to one
// contact whatever happens. The index is partial: other emails (every transactional send) add no entry.
// Contacts a broadcast does not go to are listed with their reason in broadcast_exclusions.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('broadcasts')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('from_address', 'text')
      .addColumn('reply_to', 'text', (col) => col.notNull().defaultTo('[]'))
      .addColumn('subject', 'text')
      .addColumn('preview_text', 'text')
      .addColumn('html', 'text')
      .addColumn('text', 'text')
      .addColumn('template_id', 'text')
      .addColumn('template_variables', 'text')
      // How its copies are personalized: Liquid (/v1) or Resend's `{{{FIRST_NAME|there}}}` (/resend).
      .addColumn('personalization', 'text', (col) => col.notNull().defaultTo('liquid'))
      // No foreign keys: a broadcast sent keeps naming the segment and topic it went to after they are gone.
      .addColumn('segment_id', 'text')
      .addColumn('topic_id', 'text')
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('scheduled_at', 'text')
      .addColumn('started_at', 'text')
      .addColumn('sent_at', 'text')
      .addColumn('cursor', 'text')
      .addColumn('copies', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('excluded', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('key_domain_id', 'text')
      .addColumn('track_opens', 'boolean', (col) => col.notNull().defaultTo(false))
      .addColumn('track_clicks', 'boolean', (col) => col.notNull().defaultTo(false))
      .addColumn('locked_by', 'text')
      .addColumn('locked_until', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('broadcasts_project_id')
      .on('broadcasts')
      .columns(['project_id', 'id'])
      .execute();
    // The fan-out's queue: broadcasts sending, or scheduled, by when they are due.
    await db.schema
      .createIndex('broadcasts_due')
      .on('broadcasts')
      .columns(['status', 'scheduled_at'])
      .where(sql.ref('status'), 'in', ['scheduled', 'sending'])
      .execute();
    await db.schema
      .createTable('broadcast_exclusions')
      .addColumn('broadcast_id', 'text', (col) =>
        col.notNull().references('broadcasts.id').onDelete('cascade'),
      )
      .addColumn('contact_id', 'text', (col) => col.notNull())
      .addColumn('email', 'text', (col) => col.notNull())
      .addColumn('reason', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addPrimaryKeyConstraint('broadcast_exclusions_pk', ['broadcast_id', 'contact_id'])
      .execute();
    await db.schema.alterTable('emails').addColumn('broadcast_id', 'text').execute();
    await db.schema.alterTable('emails').addColumn('contact_id', 'text').execute();
    await db.schema
      .createIndex('emails_broadcast_contact')
      .on('emails')
      .columns(['broadcast_id', 'contact_id'])
      .unique()
      .where(sql.ref('broadcast_id'), 'is not', null)
      .execute();
  },
};
