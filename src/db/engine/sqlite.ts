import { closeSync, existsSync, mkdirSync, openSync, readSync } from 'node:fs';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Kysely, SqliteDialect, type SqliteDatabase } from 'kysely';
import type { Database } from '../schema.ts';
import { createStamps, noteStatements } from '../validated-cache.ts';
import type { DatabaseHandle, DialectWrapper } from '../handle.ts';
import { createBoundedMemo } from '../../lib/memo.ts';
import { startBackgroundCheckpoints } from './sqlite-checkpoints.ts';

// The SQLite engine: node:sqlite behind Kysely's SqliteDialect, and the measured speed work that only this
// engine needs (a statement cache, array rows made into objects, the stamps read from the WAL index).

/** How long a SQLite statement waits for another connection's (or process's) write lock before failing. */
export const SQLITE_BUSY_TIMEOUT_MS = 5000;

export function openSqlite(
  file: string,
  wrap: DialectWrapper,
  options: { backgroundCheckpoints?: boolean } = {},
): DatabaseHandle {
  if (file !== ':memory:') mkdirSync(path.dirname(file), { recursive: true });
  // The file holds key hashes and sealed secrets: readable by its owner only.
  if (file !== ':memory:') closeSync(openSync(file, 'a', 0o600));
  const sqlite = new DatabaseSync(file);
  // WAL lets the CLI and a worker process use the file while the server runs; busy_timeout makes a
  // writer wait for another process's write instead of failing at once.
  sqlite.exec(
    `PRAGMA journal_mode = WAL; PRAGMA busy_timeout = ${SQLITE_BUSY_TIMEOUT_MS}; PRAGMA synchronous = NORMAL;`,
  );
  sqlite.exec('PRAGMA foreign_keys = ON;');
  const checkpoints =
    options.backgroundCheckpoints && file !== ':memory:'
      ? startBackgroundCheckpoints(file, SQLITE_BUSY_TIMEOUT_MS)
      : undefined;
  if (checkpoints) sqlite.exec('PRAGMA wal_autocheckpoint = 0;');
  // Kysely's SQLite driver lends its one connection to one query or one transaction at a time: no query
  // can run inside another's transaction (test/transactions.test.ts).
  const dialect = wrap(new SqliteDialect({ database: adaptNodeSqlite(sqlite) }));
  const db = new Kysely<Database>({ dialect, log: noteStatements });
  const stamps = stampReader(sqlite, file);
  return {
    db,
    engine: 'sqlite',
    stamps: createStamps(db, { readDirectly: stamps.read }),
    close: async () => {
      stamps.close();
      await checkpoints?.stop();
      await db.destroy();
    },
  };
}

/** The first copy of the WAL-index header (walformat: `WalIndexHdr`). */
const WAL_INDEX_HEADER_BYTES = 48;

/**
 * The cache stamps read on the connection itself, a few microseconds instead of a trip through Kysely: every
 * authenticated request reads them. Only while no transaction is open on the connection: then the read is a
 * transaction of its own and sees exactly what is committed, by this process or another. Inside one it
 * would see that transaction's snapshot and uncommitted writes, so then the caller goes through Kysely, which
 * waits for the transaction (or reads through it, when given the transaction's `db`).
 *
 * Cheaper still when nothing was committed since the last read: every commit to the database, by any
 * connection of any process, rewrites the WAL-index header at the start of the `-shm` file (its change
 * counter and last frame; SQLite's documented WAL-index format, "walformat"). While those 48 bytes are the
 * same as at the last read, the stamps are too, and a read of them (one pread, a third of a read transaction)
 * replaces the query. The first copy of the header is the one SQLite writes last.
 */
function stampReader(
  sqlite: DatabaseSync,
  file: string,
): { read: () => Map<string, string> | undefined; close: () => void } {
  let statement: ReturnType<DatabaseSync['prepare']> | undefined;
  let walIndex: number | undefined;
  const header = Buffer.alloc(WAL_INDEX_HEADER_BYTES);
  const headerAtLastRead = Buffer.alloc(WAL_INDEX_HEADER_BYTES);
  let lastRead: Map<string, string> | undefined;
  const readHeader = (into: Buffer): boolean => {
    if (walIndex === undefined) return false;
    try {
      return readSync(walIndex, into, 0, WAL_INDEX_HEADER_BYTES, 0) === WAL_INDEX_HEADER_BYTES;
    } catch {
      return false;
    }
  };
  const read = () => {
    if (sqlite.isTransaction) return undefined;
    if (lastRead && readHeader(header) && header.equals(headerAtLastRead)) return lastRead;
    // Prepared on first use: the table exists only once the migrations have run. Arrays: node:sqlite's row
    // objects are slow to make.
    if (!statement) {
      statement = sqlite.prepare('select scope, version from cache_stamps');
      statement.setReturnArrays(true);
      // In WAL mode the file exists while a connection is open; without it, every use reads.
      if (file !== ':memory:' && existsSync(`${file}-shm`)) walIndex = openSync(`${file}-shm`, 'r');
    }
    // The header before the read: a commit landing between the two makes the next use read again.
    const known = readHeader(headerAtLastRead);
    const rows = statement.all() as unknown as Array<[string, number]>;
    const values = new Map(rows.map(([scope, version]) => [scope, String(version)]));
    lastRead = known ? values : undefined;
    return values;
  };
  const close = () => {
    if (walIndex !== undefined) closeSync(walIndex);
    walIndex = undefined;
  };
  return { read, close };
}

// Kysely's SqliteDialect speaks the better-sqlite3 interface; node:sqlite differs in three ways: parameters
// are spread rather than passed as an array, booleans cannot be bound, and `reader` is `columns().length > 0`.
const STATEMENT_CACHE_SIZE = 500;

function adaptNodeSqlite(sqlite: DatabaseSync): SqliteDatabase {
  const bind = (parameters: ReadonlyArray<unknown>) =>
    parameters.map((value) => (typeof value === 'boolean' ? Number(value) : value)) as never[];
  type Statement = ReturnType<DatabaseSync['prepare']>;
  // Prepared statements are kept by their SQL text and reused: preparing is a large share of a short
  // query's cost (a sixth of the sending benchmark's CPU before this cache). Bounded, since multi-row
  // INSERTs make a new text per row count; the oldest entry goes first.
  const prepared = createBoundedMemo<string, ReturnType<SqliteDatabase['prepare']>>(STATEMENT_CACHE_SIZE);
  return {
    close: () => sqlite.close(),
    prepare: (sql) => prepared(sql, () => prepareStatement(sql)),
  };

  function prepareStatement(sql: string): ReturnType<SqliteDatabase['prepare']> {
    const statement = sqlite.prepare(sql);
    const reader = statement.columns().length > 0;
    // node:sqlite's row objects are in dictionary mode, slow to read (20 webhook rows: 15 µs against
    // 0.2 µs); rows fetched as arrays and made into plain objects here are faster to fetch and to read.
    if (reader) statement.setReturnArrays(true);
    let toRow = reader ? rowBuilder(statement) : undefined;
    const toRowChecked = (values: unknown[]) => {
      // `SELECT *` follows its table: altered (by a migration in another process), the column list changes.
      if (values.length !== toRow!.width) toRow = rowBuilder(statement);
      return toRow!(values);
    };
    return {
      reader,
      all: (parameters: ReadonlyArray<unknown>) =>
        (statement.all(...bind(parameters)) as unknown as unknown[][]).map(toRowChecked),
      run: (parameters: ReadonlyArray<unknown>) => statement.run(...bind(parameters)),
      *iterate(parameters: ReadonlyArray<unknown>) {
        for (const values of statement.iterate(...bind(parameters)))
          yield toRowChecked(values as unknown as unknown[]);
      },
    };
  }

  /**
   * Makes a row object from a statement's array of values, with one object literal generated for its
   * columns: the rows share one hidden class and keep fast properties however many columns there are
   * (objects grown key by key fall back to dictionary mode past 16 or so). Names are JSON-quoted literals.
   */
  function rowBuilder(statement: Statement): ((values: unknown[]) => Record<string, unknown>) & {
    width: number;
  } {
    const names = statement.columns().map((column) => column.name);
    const fields = names.map((name, index) => `${JSON.stringify(name)}: values[${index}]`);
    const build = new Function('values', `return { ${fields.join(', ')} };`) as (
      values: unknown[],
    ) => Record<string, unknown>;
    return Object.assign(build, { width: names.length });
  }
}
