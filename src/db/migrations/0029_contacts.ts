import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// Contacts (issue 37): the people a project's broadcasts go to, and the custom properties it declares for them.
//
// A contact's `email` is stored lowercased, so the unique constraint makes it unique per project in any case.
// Its `properties` are JSON text keyed by the property's id, not its key: a property deleted and declared again
// (perhaps with another type) never meets the values of the old one, and no write over every contact is needed
// when one goes (the values of a property that is gone are left out of every read, dropped at the next write).
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('contact_properties')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('key', 'text', (col) => col.notNull())
      .addColumn('type', 'text', (col) => col.notNull())
      // JSON text (a string or a number, as the type says), or null.
      .addColumn('fallback_value', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .addUniqueConstraint('contact_properties_project_key', ['project_id', 'key'])
      .execute();
    await db.schema
      .createTable('contacts')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('email', 'text', (col) => col.notNull())
      .addColumn('first_name', 'text')
      .addColumn('last_name', 'text')
      .addColumn('unsubscribed', 'boolean', (col) => col.notNull().defaultTo(false))
      .addColumn('properties', 'text', (col) => col.notNull().defaultTo('{}'))
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .addUniqueConstraint('contacts_project_email', ['project_id', 'email'])
      .execute();
    // Lists page by id within a project; the email prefix filter uses the unique constraint's index.
    await db.schema.createIndex('contacts_project_id').on('contacts').columns(['project_id', 'id']).execute();
  },
};
