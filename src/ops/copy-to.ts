// `postwire copy-to postgres://…`: moves a whole installation from its SQLite file to an empty PostgreSQL
// database, for when one machine is no longer enough. Every row keeps its id; sealed secrets are copied as
// they are (the same key opens them); the copy can be interrupted and run again; it ends by comparing the
// row count of every table. The checks are in copy-checks.ts, the tables and their order in copy-tables.ts,
// a table's batches in copy-batches.ts.
import { existsSync } from 'node:fs';
import { DatabaseSync } from 'node:sqlite';
import pg from 'pg';
import { SQLITE_BUSY_TIMEOUT_MS } from '../db/engine/sqlite.ts';
import { type BatchOptions, copyTable, readProgress } from './copy-batches.ts';
import {
  checkTarget,
  migrateSource,
  migrateTarget,
  refuseWhileInUse,
  sameMigrations,
  sourceIdentity,
} from './copy-checks.ts';
import { CopyError, planTables, PROGRESS_TABLE } from './copy-tables.ts';

export { COPY_BATCH_BYTES, COPY_BATCH_ROWS } from './copy-batches.ts';
export { CopyError } from './copy-tables.ts';

export interface CopyRequest extends BatchOptions {
  /** The SQLite database file (postwire.db in the data directory). */
  sqlitePath: string;
  /** postgres://… of an empty database (or schema, through `options=-c search_path=…`). */
  targetUrl: string;
  /** A worker heartbeat newer than this means a process still works on the SQLite file: the copy refuses. */
  workerDeadAfterMs: number;
  /** Progress for the operator, a line at a time. */
  log?: (line: string) => void;
}

export interface TableCount {
  table: string;
  sqlite: number;
  postgres: number;
}

export interface CopyResult {
  /** Whether an earlier, interrupted copy was continued. */
  resumed: boolean;
  tables: TableCount[];
  /** Every table has as many rows in PostgreSQL as in SQLite. */
  matched: boolean;
}

/**
 * Copies the SQLite database at `sqlitePath` into the PostgreSQL database at `targetUrl`.
 *
 * Refuses while a Postwire process still works on the SQLite file (a fresh worker heartbeat), since rows
 * written during or after the copy would be left behind; refuses a target that holds data, unless it is an
 * interrupted copy of the same SQLite database, which it continues. All of one run reads one snapshot of the
 * SQLite file. Each batch commits with its table's progress (the last primary key copied) in one transaction,
 * so a run that stops anywhere continues at the next row; the inserts also skip rows already there.
 */
export async function copySqliteToPostgres(request: CopyRequest): Promise<CopyResult> {
  const log = request.log ?? (() => {});
  if (!existsSync(request.sqlitePath)) {
    throw new CopyError(
      `there is no SQLite database at ${request.sqlitePath} (POSTWIRE_DATA_DIR); nothing to copy.`,
    );
  }
  await migrateSource(request.sqlitePath, (probe) =>
    refuseWhileInUse(probe, request.workerDeadAfterMs, new Date()),
  );
  const source = new DatabaseSync(request.sqlitePath);
  const target = new pg.Client({ connectionString: request.targetUrl, application_name: 'postwire copy-to' });
  try {
    source.exec(`PRAGMA busy_timeout = ${SQLITE_BUSY_TIMEOUT_MS}`);
    // One read transaction for the whole run: every table is read as of the same commit.
    source.exec('BEGIN');
    source.exec('PRAGMA query_only = ON');
    const sourceId = sourceIdentity(source);

    await target.connect();
    // One copy into a schema at a time: a second run waits for nothing, it stops.
    const locked = await target.query<{ locked: boolean }>(
      "select pg_try_advisory_lock(hashtext('postwire copy-to ' || current_schema())) as locked",
    );
    if (!locked.rows[0]!.locked) throw new CopyError('another copy-to into this database is running.');

    const resumed = await checkTarget(target, sourceId);
    await migrateTarget(request.targetUrl);
    await sameMigrations(source, target);
    const plans = await planTables(source, target);
    await target.query(
      `create table if not exists ${PROGRESS_TABLE} (table_name text primary key, source text not null,
        last_key text, rows_copied bigint not null, done boolean not null)`,
    );
    log(resumed ? 'Continuing an interrupted copy.' : `Copying ${plans.length} tables.`);

    for (const plan of plans) {
      const progress = await readProgress(target, plan.name, sourceId);
      if (progress.done) continue;
      const copied = await copyTable(source, target, plan, progress, sourceId, request);
      log(`${plan.name}: ${copied} rows`);
    }

    const tables: TableCount[] = [];
    for (const plan of plans) {
      const sqliteCount = source.prepare(`select count(*) as n from "${plan.name}"`).get() as { n: number };
      const postgresCount = await target.query<{ n: string }>(`select count(*) as n from "${plan.name}"`);
      tables.push({
        table: plan.name,
        sqlite: Number(sqliteCount.n),
        postgres: Number(postgresCount.rows[0]!.n),
      });
    }
    const matched = tables.every((count) => count.sqlite === count.postgres);
    // Complete and checked: nothing is left to continue, and the schema is Postwire's alone again.
    if (matched) await target.query(`drop table ${PROGRESS_TABLE}`);
    return { resumed, tables, matched };
  } finally {
    if (source.isTransaction) source.exec('ROLLBACK');
    source.close();
    await target.end().catch(() => {});
  }
}
