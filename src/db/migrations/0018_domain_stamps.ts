import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';
import { watchTables } from './0015_cache_stamps.ts';

// Every accepted send asks which domains cover its From domain (the sending-domain rules): a query per
// send, for a table that changes when a domain is added, verified, fails or is deleted. Its stamp lets each
// process keep the answers in memory (src/db/validated-cache.ts). Only the columns those answers depend
// on move the stamp: the re-check queue's own bookkeeping (leases, next check) does not.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await sql`insert into cache_stamps (scope, version) values ('domains', 0)`.execute(db);
    await watchTables(db, [
      {
        table: 'domains',
        scope: 'domains',
        columns: ['id', 'project_id', 'name', 'status', 'return_path_verified'],
      },
    ]);
  },
};
