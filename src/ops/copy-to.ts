// `postwire copy-to postgres://…`: moves a whole installation from its SQLite file to an empty PostgreSQL
// database, for when one machine is no longer enough. Every row keeps its id; sealed secrets are copied as
// they are (the same key opens them); the copy can be interrupted and run again; it ends by comparing the
// row count of every table.
import { existsSync } from 'node:fs';
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { openDatabase } from '../db/connection.ts';
import { SQLITE_BUSY_TIMEOUT_MS } from '../db/engine/sqlite.ts';
import { migrateToLatest } from '../db/migrate.ts';

/**
 * Tables not copied, and why:
 * - postwire_migrations: the target's own, written when the same migrations run on it (the copy checks that
 *   both databases have the same ones applied);
 * - cache_stamps: version stamps for in-memory reads; on PostgreSQL their values come from a sequence, and
 *   the triggers that watch the copied tables give them new values as the rows arrive, which is all a stamp
 *   needs (a value it never had before).
 * Everything else is copied as is, the queues included: a pending job stays due, and a job leased by a worker
 * that stopped comes back at once, since its worker's row in queue_workers has a heartbeat long past.
 */
const NOT_COPIED = new Set(['postwire_migrations', 'cache_stamps']);

/** Where an interrupted copy records how far each table got; dropped when the copy is complete. */
const PROGRESS_TABLE = 'postwire_copy_progress';

/**
 * A batch of rows goes in one INSERT and one transaction (with its progress): at most this many rows, and
 * at most about this many bytes of values (attachments and received messages are megabytes each), so what is
 * held in memory stays bounded whatever the tables hold.
 */
export const COPY_BATCH_ROWS = 500;
export const COPY_BATCH_BYTES = 16 * 1024 * 1024;
/** PostgreSQL takes at most 65,535 parameters in one statement. */
const POSTGRES_MAX_PARAMETERS = 65_535;

export interface CopyRequest {
  /** The SQLite database file (postwire.db in the data directory). */
  sqlitePath: string;
  /** postgres://… of an empty database (or schema, through `options=-c search_path=…`). */
  targetUrl: string;
  /** A worker heartbeat newer than this means a process still works on the SQLite file: the copy refuses. */
  workerDeadAfterMs: number;
  batchRows?: number;
  batchBytes?: number;
  /** Told of each batch once committed; a test interrupts the copy by throwing here. */
  afterBatch?: (progress: { table: string; rowsCopied: number }) => void;
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

/** A reason to refuse that the operator can act on: the CLI prints the message alone. */
export class CopyError extends Error {}

interface Column {
  name: string;
  /** The target's type, which says how a SQLite value is converted. */
  type: string;
}

interface TablePlan {
  name: string;
  columns: Column[];
  primaryKey: string[];
}

interface Progress {
  lastKey: unknown[] | null;
  rowsCopied: number;
  done: boolean;
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

/**
 * The source's schema brought up to this version's, as every command does before it reads, through the
 * service's own connection code so that the migrations run exactly as at start-up. Before anything is
 * written, `check` looks at the file as it is, and a file that is not a Postwire database is refused:
 * migrating it would fill it with Postwire's tables.
 */
async function migrateSource(file: string, check: (probe: DatabaseSync) => void): Promise<void> {
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
function refuseWhileInUse(source: DatabaseSync, deadAfterMs: number, now: Date): void {
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
function sourceIdentity(source: DatabaseSync): string {
  const row = source.prepare('select id from projects order by is_default desc, id limit 1').get() as
    { id: string } | undefined;
  return `sqlite:${row?.id ?? 'no projects'}`;
}

/**
 * A target may be empty (no tables, or Postwire's tables with no rows in them) or hold an interrupted copy of
 * this same source; anything else is refused before anything is written. Returns whether a copy is continued.
 */
async function checkTarget(target: pg.Client, sourceId: string): Promise<boolean> {
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

async function migrateTarget(url: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool }) });
  try {
    await migrateToLatest(db);
  } finally {
    await db.destroy();
  }
}

async function sameMigrations(source: DatabaseSync, target: pg.Client): Promise<void> {
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

/**
 * The tables to copy, parents before the tables whose foreign keys point at them, each with its columns (the
 * same set on both sides, the target's types) and its primary key (the order rows are read and resumed in).
 */
async function planTables(source: DatabaseSync, target: pg.Client): Promise<TablePlan[]> {
  const sourceTables = (
    source
      .prepare(
        "select name from sqlite_master where type = 'table' and name not like 'sqlite\\_%' escape '\\'",
      )
      .all() as Array<{ name: string }>
  )
    .map((row) => row.name)
    .filter((name) => !NOT_COPIED.has(name));
  const targetColumns = await target.query<{ table_name: string; column_name: string; data_type: string }>(
    `select table_name, column_name, data_type from information_schema.columns
      where table_schema = current_schema() order by table_name, ordinal_position`,
  );
  const columnsByTable = new Map<string, Column[]>();
  for (const row of targetColumns.rows) {
    if (NOT_COPIED.has(row.table_name) || row.table_name === PROGRESS_TABLE) continue;
    const list = columnsByTable.get(row.table_name) ?? [];
    list.push({ name: row.column_name, type: row.data_type });
    columnsByTable.set(row.table_name, list);
  }
  const missing = sourceTables.filter((name) => !columnsByTable.has(name));
  const extra = [...columnsByTable.keys()].filter((name) => !sourceTables.includes(name));
  if (missing.length > 0 || extra.length > 0) {
    throw new CopyError(
      `the two databases do not have the same tables (only in SQLite: ${missing.join(', ') || 'none'}; ` +
        `only in PostgreSQL: ${extra.join(', ') || 'none'}).`,
    );
  }

  const plans = new Map<string, TablePlan>();
  for (const name of sourceTables) {
    const info = source.prepare(`select name, pk from pragma_table_info(?)`).all(name) as Array<{
      name: string;
      pk: number;
    }>;
    const columns = columnsByTable.get(name)!;
    const sourceNames = info
      .map((column) => column.name)
      .sort()
      .join(',');
    const targetNames = columns
      .map((column) => column.name)
      .sort()
      .join(',');
    if (sourceNames !== targetNames) {
      throw new CopyError(
        `table ${name} has different columns (SQLite: ${sourceNames}; PostgreSQL: ${targetNames}).`,
      );
    }
    const primaryKey = info
      .filter((column) => Number(column.pk) > 0)
      .sort((a, b) => Number(a.pk) - Number(b.pk))
      .map((column) => column.name);
    if (primaryKey.length === 0) throw new CopyError(`table ${name} has no primary key to copy it by.`);
    plans.set(name, { name, columns, primaryKey });
  }

  const references = await target.query<{ child: string; parent: string }>(
    `select child.relname as child, parent.relname as parent
      from pg_constraint c
      join pg_class child on child.oid = c.conrelid
      join pg_class parent on parent.oid = c.confrelid
      join pg_namespace n on n.oid = child.relnamespace
      where c.contype = 'f' and n.nspname = current_schema()`,
  );
  return parentsFirst([...plans.values()], references.rows);
}

function parentsFirst(plans: TablePlan[], references: Array<{ child: string; parent: string }>): TablePlan[] {
  const ordered: TablePlan[] = [];
  const placed = new Set<string>();
  const visiting = new Set<string>();
  const byName = new Map(plans.map((plan) => [plan.name, plan]));
  const visit = (plan: TablePlan) => {
    if (placed.has(plan.name)) return;
    if (visiting.has(plan.name)) throw new CopyError(`foreign keys form a cycle through ${plan.name}.`);
    visiting.add(plan.name);
    for (const reference of references) {
      if (reference.child !== plan.name || reference.parent === plan.name) continue;
      const parent = byName.get(reference.parent);
      if (parent) visit(parent);
    }
    visiting.delete(plan.name);
    placed.add(plan.name);
    ordered.push(plan);
  };
  for (const plan of [...plans].sort((a, b) => a.name.localeCompare(b.name))) visit(plan);
  return ordered;
}

async function readProgress(target: pg.Client, table: string, sourceId: string): Promise<Progress> {
  const result = await target.query<{ last_key: string | null; rows_copied: string; done: boolean }>(
    `select last_key, rows_copied, done from ${PROGRESS_TABLE} where table_name = $1`,
    [table],
  );
  const row = result.rows[0];
  if (!row) {
    await target.query(
      `insert into ${PROGRESS_TABLE} (table_name, source, last_key, rows_copied, done) values ($1, $2, null, 0, false)`,
      [table, sourceId],
    );
    return { lastKey: null, rowsCopied: 0, done: false };
  }
  return {
    lastKey: row.last_key === null ? null : (JSON.parse(row.last_key) as unknown[]),
    rowsCopied: Number(row.rows_copied),
    done: row.done,
  };
}

/** Streams one table from where its progress stopped, in bounded batches; returns its rows copied in all. */
async function copyTable(
  source: DatabaseSync,
  target: pg.Client,
  plan: TablePlan,
  progress: Progress,
  sourceId: string,
  request: CopyRequest,
): Promise<number> {
  const quoted = (name: string) => `"${name}"`;
  const columnList = plan.columns.map((column) => quoted(column.name)).join(', ');
  const keyList = plan.primaryKey.map(quoted).join(', ');
  const after = progress.lastKey
    ? ` where (${keyList}) > (${plan.primaryKey.map(() => '?').join(', ')})`
    : '';
  const read: StatementSync = source.prepare(
    `select ${columnList} from ${quoted(plan.name)}${after} order by ${keyList}`,
  );
  read.setReturnArrays(true);
  // Exact integers: SQLite's 64-bit values can be past what a JavaScript number holds.
  read.setReadBigInts(true);
  const keyIndexes = plan.primaryKey.map((key) => plan.columns.findIndex((column) => column.name === key));
  const rowsLimit = Math.min(
    request.batchRows ?? COPY_BATCH_ROWS,
    Math.floor(POSTGRES_MAX_PARAMETERS / plan.columns.length),
  );
  const bytesLimit = request.batchBytes ?? COPY_BATCH_BYTES;

  let rowsCopied = progress.rowsCopied;
  let batch: unknown[][] = [];
  let batchBytes = 0;
  let lastKey: unknown[] = [];
  const flush = async () => {
    if (batch.length === 0) return;
    await insertBatch(target, plan, batch, sourceId, lastKey);
    rowsCopied += batch.length;
    batch = [];
    batchBytes = 0;
    request.afterBatch?.({ table: plan.name, rowsCopied });
  };
  const rows = read.iterate(...((progress.lastKey ?? []) as never[])) as Iterable<unknown[]>;
  for (const values of rows) {
    lastKey = keyIndexes.map((index) => keyValue(values[index]));
    const row = values.map((value, index) => toPostgres(value, plan.columns[index]!.type));
    batch.push(row);
    batchBytes += row.reduce<number>((sum, value) => sum + sizeOf(value), 0);
    if (batch.length >= rowsLimit || batchBytes >= bytesLimit) await flush();
  }
  await flush();
  await target.query(`update ${PROGRESS_TABLE} set done = true where table_name = $1`, [plan.name]);
  return rowsCopied;
}

async function insertBatch(
  target: pg.Client,
  plan: TablePlan,
  rows: unknown[][],
  sourceId: string,
  lastKey: unknown[],
): Promise<void> {
  const width = plan.columns.length;
  const tuples = rows.map(
    (_row, rowIndex) =>
      `(${plan.columns.map((_column, index) => `$${rowIndex * width + index + 1}`).join(', ')})`,
  );
  const columnList = plan.columns.map((column) => `"${column.name}"`).join(', ');
  await target.query('begin');
  try {
    // Rows already there (a run that stopped between its insert and its commit cannot leave any, but a row
    // the source wrote twice cannot either) are skipped rather than failing the copy.
    await target.query(
      `insert into "${plan.name}" (${columnList}) values ${tuples.join(', ')} on conflict do nothing`,
      rows.flat(),
    );
    await target.query(
      `update ${PROGRESS_TABLE} set last_key = $2, rows_copied = rows_copied + $3 where table_name = $1 and source = $4`,
      [plan.name, JSON.stringify(lastKey), rows.length, sourceId],
    );
    await target.query('commit');
  } catch (error) {
    await target.query('rollback').catch(() => {});
    throw error;
  }
}

/**
 * A value as SQLite stores it, made into what the PostgreSQL column takes: booleans are stored as 0 and 1,
 * bytes as blobs (Uint8Array), integers read exactly (bigint, sent as text); text (JSON included, which is
 * text on both engines) goes as it is.
 */
function toPostgres(value: unknown, type: string): unknown {
  if (value === null || value === undefined) return null;
  switch (type) {
    case 'boolean':
      return typeof value === 'string' ? value === '1' || value === 'true' : Number(value) !== 0;
    case 'bytea':
      return value instanceof Uint8Array
        ? Buffer.from(value.buffer, value.byteOffset, value.byteLength)
        : Buffer.from(String(value));
    default:
      return typeof value === 'bigint' ? value.toString() : value;
  }
}

/**
 * A primary key value as SQLite gave it, made storable as JSON in the progress table and bindable to SQLite
 * again on resume with the same type (an integer stays an integer, so it compares as one).
 */
function keyValue(value: unknown): string | number {
  if (typeof value === 'string') return value;
  if (
    typeof value === 'bigint' &&
    value >= BigInt(Number.MIN_SAFE_INTEGER) &&
    value <= BigInt(Number.MAX_SAFE_INTEGER)
  )
    return Number(value);
  throw new CopyError(`a primary key value of type ${typeof value} cannot be resumed from.`);
}

function sizeOf(value: unknown): number {
  if (typeof value === 'string') return value.length * 2;
  if (value instanceof Uint8Array) return value.byteLength;
  return 8;
}
