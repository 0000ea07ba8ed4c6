import { randomBytes } from 'node:crypto';
import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';
import { watchTables } from './0015_cache_stamps.ts';

// A domain name belongs to whoever proves control of it, not to whoever adds it first. Any number of
// projects may add the same name (each with its own key, pending until its records are published); at most
// one holds it verified at a time. So the name stops being unique across projects: it is unique within a
// project (409 `domain_exists`), and unique among verified domains (the first to verify holds it; another
// project takes it over only with its challenge record, and the same transaction demotes the holder).
//
// Each domain gets the token of its challenge record (`_postwire-challenge.<name>` TXT
// `postwire-verification=<token>`), which it needs while another project holds the name (or a parent).
//
// SQLite cannot drop a table constraint: the table is rebuilt, with its indexes and its cache-stamp triggers
// (migration 0018's columns). PostgreSQL drops the constraint.
const token = () => randomBytes(18).toString('base64url');

export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    if (postgres) {
      await sql`alter table domains drop constraint domains_name`.execute(db);
      await db.schema.alterTable('domains').addColumn('challenge_token', 'text').execute();
    } else {
      await db.schema
        .createTable('domains_rebuilt')
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
        .addColumn('challenge_token', 'text', (col) => col.notNull())
        .execute();
      await sql`
        insert into domains_rebuilt (id, project_id, name, status, dkim_selector, dkim_public_key,
          dkim_private_key_sealed, next_dkim_selector, next_dkim_public_key, next_dkim_private_key_sealed,
          return_path_verified, checks, last_checked_at, verified_at, next_check_at, locked_by, locked_until,
          created_at, updated_at, challenge_token)
        select id, project_id, name, status, dkim_selector, dkim_public_key,
          dkim_private_key_sealed, next_dkim_selector, next_dkim_public_key, next_dkim_private_key_sealed,
          return_path_verified, checks, last_checked_at, verified_at, next_check_at, locked_by, locked_until,
          created_at, updated_at, lower(hex(randomblob(18)))
        from domains`.execute(db);
      await db.schema.dropTable('domains').execute();
      await db.schema.alterTable('domains_rebuilt').renameTo('domains').execute();
      await db.schema.createIndex('domains_project_id').on('domains').columns(['project_id', 'id']).execute();
      await db.schema.createIndex('domains_next_check').on('domains').columns(['next_check_at']).execute();
      await watchTables(db, [
        {
          table: 'domains',
          scope: 'domains',
          columns: ['id', 'project_id', 'name', 'status', 'return_path_verified'],
        },
      ]);
    }
    if (postgres) {
      // Existing domains each get a token of their own (on SQLite, as the rows are copied).
      const rows = await sql<{ id: string }>`select id from domains`.execute(db);
      for (const row of rows.rows) {
        await sql`update domains set challenge_token = ${token()} where id = ${row.id}`.execute(db);
      }
      await sql`alter table domains alter column challenge_token set not null`.execute(db);
    }

    await db.schema
      .createIndex('domains_project_name')
      .on('domains')
      .columns(['project_id', 'name'])
      .unique()
      .execute();
    await db.schema
      .createIndex('domains_verified_name')
      .on('domains')
      .column('name')
      .unique()
      .where(sql.ref('status'), '=', 'verified')
      .execute();
    // Who holds a name, or its parents (every accepted send asks, through the in-memory coverage).
    await db.schema.createIndex('domains_by_name').on('domains').column('name').execute();
  },
};
