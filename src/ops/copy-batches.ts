// Copying one table of `postwire copy-to`: read from where its progress stopped, in bounded batches, each
// committed with its progress; SQLite's values made into what PostgreSQL's columns take.
import type { StatementSync, DatabaseSync } from 'node:sqlite';
import type pg from 'pg';
import { CopyError, PROGRESS_TABLE, type TablePlan } from './copy-tables.ts';

/**
 * A batch of rows goes in one INSERT and one transaction (with its progress): at most this many rows, and
 * at most about this many bytes of values (attachments and received messages are megabytes each), so what is
 * held in memory stays bounded whatever the tables hold.
 */
export const COPY_BATCH_ROWS = 500;
export const COPY_BATCH_BYTES = 16 * 1024 * 1024;
/** PostgreSQL takes at most 65,535 parameters in one statement. */
const POSTGRES_MAX_PARAMETERS = 65_535;

/** How a table is copied in batches (the CopyRequest's part of it). */
export interface BatchOptions {
  batchRows?: number;
  batchBytes?: number;
  /** Told of each batch once committed; a test interrupts the copy by throwing here. */
  afterBatch?: (progress: { table: string; rowsCopied: number }) => void;
}

export interface Progress {
  lastKey: unknown[] | null;
  rowsCopied: number;
  done: boolean;
}

export async function readProgress(target: pg.Client, table: string, sourceId: string): Promise<Progress> {
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
export async function copyTable(
  source: DatabaseSync,
  target: pg.Client,
  plan: TablePlan,
  progress: Progress,
  sourceId: string,
  request: BatchOptions,
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
