import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// Segments and topics (issue 37, second step): named lists of a project's contacts, and what its contacts
// subscribe to.
//
// A segment's members and a contact's topic choices are rows of their own, each cascading with both its
// contact and its segment or topic, so deleting any of the three needs no write over the others. A contact
// without a row for a topic has made no choice: the topic's default applies (read, never written per contact,
// so changing nothing on a topic's creation for a million contacts).
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('segments')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema.createIndex('segments_project_id').on('segments').columns(['project_id', 'id']).execute();
    await db.schema
      .createTable('segment_contacts')
      .addColumn('segment_id', 'text', (col) => col.notNull().references('segments.id').onDelete('cascade'))
      .addColumn('contact_id', 'text', (col) => col.notNull().references('contacts.id').onDelete('cascade'))
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addPrimaryKeyConstraint('segment_contacts_pk', ['segment_id', 'contact_id'])
      .execute();
    // A contact's segments, and the cascade from a contact's delete.
    await db.schema
      .createIndex('segment_contacts_contact')
      .on('segment_contacts')
      .columns(['contact_id', 'segment_id'])
      .execute();
    await db.schema
      .createTable('topics')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('description', 'text')
      .addColumn('default_subscription', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema.createIndex('topics_project_id').on('topics').columns(['project_id', 'id']).execute();
    await db.schema
      .createTable('contact_topics')
      .addColumn('contact_id', 'text', (col) => col.notNull().references('contacts.id').onDelete('cascade'))
      .addColumn('topic_id', 'text', (col) => col.notNull().references('topics.id').onDelete('cascade'))
      .addColumn('subscription', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .addPrimaryKeyConstraint('contact_topics_pk', ['contact_id', 'topic_id'])
      .execute();
    // A topic's subscribers (the contacts list's topic filter), and the cascade from a topic's delete.
    await db.schema
      .createIndex('contact_topics_topic')
      .on('contact_topics')
      .columns(['topic_id', 'contact_id'])
      .execute();
  },
};
