import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// PostgreSQL: a stamp's change is also announced, so that processes listening need not read the stamps on
// every request (src/db/validated-cache.ts). NOTIFY is delivered at commit, only if the transaction commits;
// the notifications of one transaction are folded into one. The channel is STAMP_CHANNEL, written out here
// because a migration must not change once shipped. SQLite has no notifications; its readers read the stamps.
// Channels are shared by the whole database while Postwire's tables live in one schema, so the notification
// carries the schema whose stamp changed: listeners ignore other schemas' (another deployment in the same
// database, or parallel test runs; src/db/connection.ts).
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
