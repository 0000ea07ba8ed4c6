import { type Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('projects')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('is_default', 'boolean', (col) => col.notNull().defaultTo(false))
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();

    await db.schema
      .createTable('api_keys')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text')
      .addColumn('key_hash', 'text', (col) => col.notNull().unique())
      .addColumn('key_prefix', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('revoked_at', 'text')
      .execute();

    await db.schema
      .createTable('webhooks')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('url', 'text', (col) => col.notNull())
      .addColumn('enabled', 'boolean', (col) => col.notNull())
      .addColumn('events', 'text', (col) => col.notNull())
      .addColumn('secret_sealed', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema.createIndex('webhooks_project_id').on('webhooks').columns(['project_id', 'id']).execute();

    await db.schema
      .createTable('templates')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('alias', 'text')
      .addColumn('subject', 'text')
      .addColumn('html', 'text')
      .addColumn('text', 'text')
      .addColumn('variables', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .addColumn('published_at', 'text')
      .addColumn('published_version', 'integer')
      .execute();
    await db.schema
      .createIndex('templates_project_id')
      .on('templates')
      .columns(['project_id', 'id'])
      .execute();
    await db.schema
      .createIndex('templates_project_alias')
      .on('templates')
      .columns(['project_id', 'alias'])
      .unique()
      .execute();

    await db.schema
      .createTable('template_versions')
      .addColumn('template_id', 'text', (col) => col.notNull().references('templates.id').onDelete('cascade'))
      .addColumn('version', 'integer', (col) => col.notNull())
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('subject', 'text')
      .addColumn('html', 'text')
      .addColumn('text', 'text')
      .addColumn('variables', 'text', (col) => col.notNull())
      .addColumn('published_at', 'text', (col) => col.notNull())
      .addPrimaryKeyConstraint('template_versions_pk', ['template_id', 'version'])
      .execute();

    await db.schema
      .createTable('idempotency_keys')
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('key', 'text', (col) => col.notNull())
      .addColumn('request_hash', 'text', (col) => col.notNull())
      .addColumn('status_code', 'integer')
      .addColumn('response_body', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addPrimaryKeyConstraint('idempotency_keys_pk', ['project_id', 'key'])
      .execute();
    await db.schema
      .createIndex('idempotency_keys_created_at')
      .on('idempotency_keys')
      .column('created_at')
      .execute();
  },
};
