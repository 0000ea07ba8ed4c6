import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// PostgreSQL: the processes that hear of every cached write (src/db/engine/stamp-registry.ts). Each has a row
// while it listens on the stamps' channel (migration 0017): the backend pid of its listening connection, which
// acknowledges each writer's notification, and when the row expires, in the database's time (renewed every
// few seconds; the process stops vouching for its reads well before). A writer waits for the acknowledgement
// of every unexpired row but its own, or its lease, before it answers; so a process's reads may vouch for a
// long lease only while it has a row. SQLite has no notifications (its stamp reads cost microseconds): no
// table there.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await sql`
      create table stamp_listeners (
        id text primary key,
        listener_pid integer not null,
        expires_at timestamptz not null
      )`.execute(db);
  },
};
