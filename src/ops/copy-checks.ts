// What `postwire copy-to` checks before it copies anything: the source is a Postwire database no process
// works on any longer, the target is empty or holds an interrupted copy of this same source, and both have
// the same migrations applied.
import { DatabaseSync } from 'node:sqlite';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { openDatabase } from '../db/connection.ts';
import { migrateToLatest } from '../db/migrate.ts';
import { CopyError, NOT_COPIED, PROGRESS_TABLE } from './copy-tables.ts';

/**
 * The source's schema brought up to this version's, as every command does before it reads, through the
 * service's own connection code so that the migrations run exactly as at start-up. Before anything is
 * written, `check` looks at the file as it is, and a file that is not a Postwire database is refused:
 * migrating it would fill it with Postwire's tables.
 */
export async function migrateSource(file: string, check: (probe: DatabaseSync) => void): Promise<void> {
  const probe = new DatabaseSync(file, { readOnly: true });
  try {
    const found = probe.prepare("select 1 from sqlite_master where name = 'postwire_migrations'").get();
    if (!found) throw new CopyError(`${file} is not a Postwire database.`);
    check(probe);
  } finally {
    probe.close();
  }
  const handle = await openDatabase({ sqlitePath: file });
  try {
    await migrateToLatest(handle.db);
  } finally {
    await handle.close();
  }
}

/** A worker heartbeat fresher than `deadAfterMs` means a process still writes (a schema without heartbeats is old). */
export function refuseWhileInUse(source: DatabaseSync, deadAfterMs: number, now: Date): void {
  if (!source.prepare("select 1 from sqlite_master where name = 'queue_workers'").get()) return;
  const since = new Date(now.getTime() - deadAfterMs).toISOString();
  const live = source
    .prepare(
      'select id, heartbeat_at from queue_workers where heartbeat_at >= ? order by heartbeat_at desc limit 1',
    )
    .get(since) as { id: string; heartbeat_at: string } | undefined;
  if (live) {
    throw new CopyError(
      `a Postwire worker is still running on this database (${live.id}, heartbeat at ${live.heartbeat_at}). ` +
        'Stop every serve and worker process first: what they write during the copy would be left behind.',
    );
  }
}

/** Names the SQLite database an interrupted copy came from: its default project, made at its first start. */
export function sourceIdentity(source: DatabaseSync): string {
  const row = source.prepare('select id from projects order by is_default desc, id limit 1').get() as
    { id: string } | undefined;
  return `sqlite:${row?.id ?? 'no projects'}`;
}

/**
 * A target may be empty (no tables, or Postwire's tables with no rows in them) or hold an interrupted copy of
 * this same source; anything else is refused before anything is written. Returns whether a copy is continued.
 */
export async function checkTarget(target: pg.Client, sourceId: string): Promise<boolean> {
  const tables = await target.query<{ name: string }>(
    `select table_name as name from information_schema.tables
      where table_schema = current_schema() and table_type = 'BASE TABLE'`,
  );
  const names = new Set(tables.rows.map((row) => row.name));
  if (names.has(PROGRESS_TABLE)) {
    const sources = await target.query<{ source: string }>(`select distinct source from ${PROGRESS_TABLE}`);
    const other = sources.rows.find((row) => row.source !== sourceId);
    if (other) {
      throw new CopyError(
        `the PostgreSQL database holds an interrupted copy of another SQLite database (${other.source}, ` +
          `not ${sourceId}); copy into an empty database.`,
      );
    }
    return sources.rows.length > 0;
  }
  if (!names.has('postwire_migrations')) return false;
  for (const name of names) {
    if (NOT_COPIED.has(name)) continue;
    const rows = await target.query(`select 1 from "${name}" limit 1`);
    if (rows.rows.length > 0) {
      throw new CopyError(
        `the PostgreSQL database is not empty (table ${name} has rows) and holds no interrupted copy; ` +
          'copy into an empty database, so that nothing there is mixed with the copy.',
      );
    }
  }
  return false;
}

export async function migrateTarget(url: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool }) });
  try {
    await migrateToLatest(db);
  } finally {
    await db.destroy();
  }
}

export async function sameMigrations(source: DatabaseSync, target: pg.Client): Promise<void> {
  const inSource = (
    source.prepare('select name from postwire_migrations order by name').all() as Array<{ name: string }>
  )
    .map((row) => row.name)
    .join(',');
  const inTarget = (
    await target.query<{ name: string }>('select name from postwire_migrations order by name')
  ).rows
    .map((row) => row.name)
    .join(',');
  if (inSource !== inTarget) {
    throw new CopyError(
      `the two databases have different migrations applied (SQLite: ${inSource}; PostgreSQL: ${inTarget}).`,
    );
  }
}
