import type { Kysely } from 'kysely';
import { type Migration, type MigrationProvider, Migrator } from 'kysely/migration';

// Migrations live in code (not files found at run time) so they ship with the process and run the same
// on both engines. Names sort in the order they apply; never edit one that has shipped, add another.
const migrations: Record<string, Migration> = {
  '0001_projects_keys_webhooks_templates': {
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
      await db.schema
        .createIndex('webhooks_project_id')
        .on('webhooks')
        .columns(['project_id', 'id'])
        .execute();

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
        .addColumn('template_id', 'text', (col) =>
          col.notNull().references('templates.id').onDelete('cascade'),
        )
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
  },
};

const provider: MigrationProvider = { getMigrations: async () => migrations };

/** Brings the schema up to date; safe to call from several processes at once (the migrator locks). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the migrator works on any schema
export async function migrateToLatest(db: Kysely<any>): Promise<string[]> {
  const migrator = new Migrator({ db, provider });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw error instanceof Error ? error : new Error(String(error));
  return (results ?? [])
    .filter((result) => result.status === 'Success')
    .map((result) => result.migrationName);
}
