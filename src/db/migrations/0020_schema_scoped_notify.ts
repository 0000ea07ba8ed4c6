import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// PostgreSQL's notification channels are shared by the whole database, while Postwire's tables live in one
// schema: two deployments in two schemas of one database (staging beside production, or parallel test
// runs) heard each other's stamp changes and re-read their stamps for nothing. The stamps' notification now
// carries the schema whose stamp changed, and listeners ignore the others' (src/db/connection.ts).
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await sql`
      create or replace function bump_cache_stamp() returns trigger language plpgsql as $$
      begin
        update cache_stamps set version = nextval('cache_stamp_values') where scope = tg_argv[0];
        perform pg_notify('postwire_cache_stamps', tg_table_schema);
        return null;
      end $$`.execute(db);
  },
};
