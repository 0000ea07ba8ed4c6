import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Sending domains: per project, a customer's domain with its DKIM key (sealed like webhook secrets), what
// its DNS records said at the last check, and its place in the re-check queue (next_check_at and a lease).
// A name belongs to one project at a time: unique across projects. Emails record which domain signed them
// and whose return path they used, so GET /v1/emails/{id} says what was done, not what would be done now.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('domains')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('dkim_selector', 'text', (col) => col.notNull())
      .addColumn('dkim_public_key', 'text', (col) => col.notNull())
      .addColumn('dkim_private_key_sealed', 'text', (col) => col.notNull())
      .addColumn('next_dkim_selector', 'text')
      .addColumn('next_dkim_public_key', 'text')
      .addColumn('next_dkim_private_key_sealed', 'text')
      .addColumn('return_path_verified', 'boolean', (col) => col.notNull().defaultTo(sql`false`))
      .addColumn('checks', 'text')
      .addColumn('last_checked_at', 'text')
      .addColumn('verified_at', 'text')
      .addColumn('next_check_at', 'text', (col) => col.notNull())
      .addColumn('locked_by', 'text')
      .addColumn('locked_until', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .addUniqueConstraint('domains_name', ['name'])
      .execute();
    await db.schema.createIndex('domains_project_id').on('domains').columns(['project_id', 'id']).execute();
    await db.schema.createIndex('domains_next_check').on('domains').columns(['next_check_at']).execute();
    await db.schema.alterTable('emails').addColumn('dkim_domain', 'text').execute();
    await db.schema.alterTable('emails').addColumn('return_path_domain', 'text').execute();
  },
};
