import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Version stamps for the reads each process keeps in memory (api keys, webhooks, templates; see
// src/db/validated-cache.ts). A trigger on each table gives its scope's stamp a new value in the writing
// transaction, whichever process or tool writes, so a reader that finds the stamp unchanged knows its copy
// is current. The value is new every time (a sequence on PostgreSQL, a random 53-bit number on SQLite, so
// that JavaScript reads it exactly), never a counter:
// a stamp seen inside a transaction that then rolled back can never come back and vouch for other data.
//
// The triggers fire on the columns the cached records hold: the delivery worker's bookkeeping on a webhook
// (last_success_at, failing_since) does not throw away every process's webhook list.
export interface WatchedTable {
  table: string;
  scope: string;
  /** Only updates of these columns change the stamp (every update when absent). */
  columns?: string[];
}

const WATCHED: WatchedTable[] = [
  { table: 'api_keys', scope: 'api_keys' },
  {
    table: 'webhooks',
    scope: 'webhooks',
    columns: [
      'id',
      'project_id',
      'url',
      'enabled',
      'events',
      'secret_sealed',
      'created_at',
      'updated_at',
      'disabled_reason',
      'previous_secret_sealed',
      'previous_secret_expires_at',
    ],
  },
  { table: 'templates', scope: 'templates' },
  { table: 'template_versions', scope: 'templates' },
];

export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema
      .createTable('cache_stamps')
      .addColumn('scope', 'text', (col) => col.primaryKey())
      .addColumn('version', 'bigint', (col) => col.notNull())
      .execute();
    const scopes = [...new Set(WATCHED.map((watched) => watched.scope))];
    for (const scope of scopes)
      await sql`insert into cache_stamps (scope, version) values (${scope}, 0)`.execute(db);

    if (postgres) {
      await sql`create sequence cache_stamp_values`.execute(db);
      // Row-level, so an UPDATE that matches no row changes nothing.
      await sql`
        create function bump_cache_stamp() returns trigger language plpgsql as $$
        begin
          update cache_stamps set version = nextval('cache_stamp_values') where scope = tg_argv[0];
          return null;
        end $$`.execute(db);
    }
    await watchTables(db, WATCHED);
  },
};

/**
 * Triggers that give each watched table's scope a new stamp on every insert, delete and (watched) update;
 * the scopes' rows in cache_stamps, and on PostgreSQL the function, must exist.
 */
export async function watchTables(db: Kysely<unknown>, watched: readonly WatchedTable[]): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  for (const { table, scope, columns } of watched) {
    for (const operation of ['insert', 'update', 'delete']) {
      const event = operation === 'update' && columns ? `update of ${columns.join(', ')}` : operation;
      const name = `${table}_${operation}_stamp`;
      if (postgres) {
        await sql
          .raw(
            `create trigger ${name} after ${event} on ${table} for each row execute function bump_cache_stamp('${scope}')`,
          )
          .execute(db);
      } else {
        await sql
          .raw(
            `create trigger ${name} after ${event} on ${table} begin update cache_stamps set version = random() % 9007199254740991 where scope = '${scope}'; end`,
          )
          .execute(db);
      }
    }
  }
}
