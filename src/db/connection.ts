import { closeSync, existsSync, mkdirSync, openSync, readSync } from 'node:fs';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import {
  type Dialect,
  Kysely,
  type LogEvent,
  PostgresDialect,
  SqliteDialect,
  type SqliteDatabase,
} from 'kysely';
import pg from 'pg';
import type { Database } from './schema.ts';
import { observeStatements, type StatementObserver } from './statement-observer.ts';
import { type LongTransactionReport, watchTransactions } from './transaction-watch.ts';
import { createStamps, noteStatement, type Stamps } from './validated-cache.ts';
import { DEFAULTS } from '../config.ts';
import { createBoundedMemo } from '../lib/memo.ts';

export type Engine = 'sqlite' | 'postgres';

export interface DatabaseHandle {
  db: Kysely<Database>;
  engine: Engine;
  close(): Promise<void>;
  /** The version stamps this process's in-memory reads are checked against (validated-cache.ts). */
  stamps: Stamps;
  /**
   * PostgreSQL only: LISTEN on `channel` over a dedicated connection (a pooled one would be handed to other
   * queries). `onError` reports a lost connection; the listener is then closed and may be opened again.
   */
  listen?(channel: string, onNotify: () => void, onError: (error: Error) => void): Promise<Listener>;
  /** PostgreSQL only: the connection pool's use now (SQLite has one connection and nothing to wait for). */
  poolUse?(): PoolUse;
}

/** A connection pool's state at one moment, for /metrics. */
export interface PoolUse {
  /** Connections the pool may open. */
  max: number;
  /** Connections open, busy or idle. */
  total: number;
  idle: number;
  /** Queries waiting for a connection: the pool is too small for the load, or connections are held long. */
  waiting: number;
}

export interface Listener {
  close(): Promise<void>;
}

export interface DatabaseOptions {
  /** `postgres://…`; when absent, `sqlitePath` is used. */
  url?: string | undefined;
  sqlitePath?: string;
  /** PostgreSQL schema to use (created when missing); tests give each run its own. */
  schema?: string;
  /**
   * PostgreSQL: how long a stamp read vouches for the stamps, in milliseconds (validated-cache.ts; 0 reads them
   * on every use). The same in every process sharing the database.
   */
  stampLeaseMs?: number;
  poolSize?: number;
  /**
   * A transaction open longer than this, in milliseconds, is reported with the stack that opened it
   * (TRANSACTION_WARN; transaction-watch.ts); unset: none is.
   */
  transactionWarnMs?: number | undefined;
  /** Where a long transaction is reported; a process warning (stderr) when absent. */
  onLongTransaction?: LongTransactionReport;
  /** Told every statement run (tests and benchmarks count them); nothing is observed when absent. */
  observe?: StatementObserver;
}

/** Every statement run, for the request windows of the in-memory lookups (validated-cache.ts). */
const noteStatements = (event: LogEvent) => noteStatement(event.query.query.kind);

const reportAsWarning: LongTransactionReport = ({ openMs, stack }) =>
  process.emitWarning(`A transaction has been open for ${openMs} ms (TRANSACTION_WARN). ${stack}`, {
    code: 'POSTWIRE_LONG_TRANSACTION',
  });

export async function openDatabase(options: DatabaseOptions): Promise<DatabaseHandle> {
  const observed = (dialect: Dialect) =>
    options.observe ? observeStatements(dialect, options.observe) : dialect;
  const watch = {
    warnAfterMs: options.transactionWarnMs,
    report: options.onLongTransaction ?? reportAsWarning,
  };
  if (options.url) {
    return openPostgres(options, options.url, options.poolSize ?? 10, (dialect) =>
      watchTransactions(observed(dialect), watch),
    );
  }
  if (!options.sqlitePath) throw new Error('openDatabase needs a PostgreSQL url or a SQLite path.');
  // BEGIN IMMEDIATE: a transaction reads and writes; taking the write lock first means another process's
  // write makes it wait (busy_timeout) rather than fail on a lock upgrade.
  return openSqlite(options.sqlitePath, (dialect) =>
    watchTransactions(observed(dialect), { ...watch, begin: 'begin immediate' }),
  );
}

type DialectWrapper = (dialect: Dialect) => Dialect;

/** How long a SQLite statement waits for another connection's (or process's) write lock before failing. */
export const SQLITE_BUSY_TIMEOUT_MS = 5000;

function openSqlite(file: string, wrap: DialectWrapper): DatabaseHandle {
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

/** A connection's settings for the tables in `schema` (the URL's search_path when none is given). */
const inSchema = (schema: string | undefined) => (schema ? { options: `-c search_path=${schema}` } : {});

/** Distinct statement texts sent as named (prepared) statements; past it, texts are sent unnamed. */
const PREPARED_STATEMENTS_MAX = 200;
/** Writes (a WITH's included), the statements that are named. */
const PREPARABLE = /^\s*(?:insert|update|delete|with)\b/i;
/**
 * A `*` column list anywhere (`RETURNING *`, `SELECT *`, `"emails".*`): a prepared statement whose result
 * columns change (a migration adding a column under a running process) fails on every later run instead of
 * being planned again, so such texts stay unnamed. `count(*)` is no column list.
 */
const COLUMN_WILDCARD = /(?:\bselect|\breturning|,|\.)\s*\*/i;
const preparedNames = new Map<string, string>();

/**
 * PostgreSQL parses and plans an unnamed statement anew on every run; the hot writes are sent as named
 * statements instead, parsed and planned once per connection (node-postgres keeps which of them each
 * connection has prepared). A send group's recipients INSERT spent longer being planned than run (290 µs
 * against 160 per group of 5, pg_stat_statements). Names are given by text, one per distinct text, for a
 * bounded number of texts, so that a connection never holds more than that many.
 */
class PreparingClient extends pg.Client {
  override query(...args: unknown[]): never {
    const [text, values] = args;
    // Only with parameters: a text without any goes by the simple protocol, which also runs several
    // statements at once (a named statement is one statement).
    if (
      typeof text === 'string' &&
      Array.isArray(values) &&
      values.length > 0 &&
      args.length === 2 &&
      PREPARABLE.test(text) &&
      !COLUMN_WILDCARD.test(text)
    ) {
      let name = preparedNames.get(text);
      if (name === undefined && preparedNames.size < PREPARED_STATEMENTS_MAX) {
        name = `postwire_${preparedNames.size + 1}`;
        preparedNames.set(text, name);
      }
      if (name !== undefined) return super.query({ name, text, values }) as never;
    }
    return (super.query as (...all: unknown[]) => never)(...args);
  }
}

async function openPostgres(
  { schema, stampLeaseMs = DEFAULTS.cacheStampLeaseMs }: Pick<DatabaseOptions, 'schema' | 'stampLeaseMs'>,
  url: string,
  poolSize: number,
  wrap: DialectWrapper,
): Promise<DatabaseHandle> {
  if (schema !== undefined && !/^[a-z_][a-z0-9_]*$/.test(schema))
    throw new Error(`Bad schema name '${schema}'.`);
  if (schema) {
    const setup = new pg.Client({ connectionString: url });
    await setup.connect();
    try {
      await setup.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    } finally {
      await setup.end();
    }
  }
  const pool = new pg.Pool({
    Client: PreparingClient,
    connectionString: url,
    max: poolSize,
    ...inSchema(schema),
  });
  // An idle pooled client that loses its server (a PostgreSQL restart) emits 'error'; unhandled, it would
  // crash the process. The pool drops that client and the next query connects again.
  pool.on('error', () => undefined);
  // Told of this process's own commits to stamped tables; bound once the stamps exist (they need `db`).
  let ownCommit = () => {};
  const tracked = observeStatements(
    new PostgresDialect({ pool }),
    stampedWrites(() => ownCommit()),
  );
  const db = new Kysely<Database>({ dialect: wrap(tracked), log: noteStatements });
  const listen: NonNullable<DatabaseHandle['listen']> = (...args) => listenPostgres(url, schema, ...args);
  const stamps = createStamps(db, { leaseMs: stampLeaseMs });
  ownCommit = () => stamps.noteOwnCommit();
  return {
    db,
    engine: 'postgres',
    stamps,
    close: async () => {
      await stamps.close();
      await db.destroy();
    },
    listen,
    poolUse: () => ({
      max: poolSize,
      total: pool.totalCount,
      idle: pool.idleCount,
      waiting: pool.waitingCount,
    }),
  };
}

// A write to a table whose records the stamps vouch for (the tables migrations 0015 and 0018 watch; a
// project's deletion reaches its keys, webhooks, templates and domains by cascade), quoted or not.
const STAMPED_WRITE =
  /^\s*(?:(?:insert\s+into|update)\s+"?(?:api_keys|webhooks|templates|template_versions|domains)"?\s|delete\s+from\s+"?(?:api_keys|webhooks|templates|template_versions|domains|projects)"?\s)/i;

/**
 * Calls `committed` once a statement writing a stamped table has committed on its connection: at once
 * outside a transaction, else after the transaction's COMMIT (a rollback forgets it). By the statements'
 * text, whoever began the transaction.
 */
function stampedWrites(committed: () => void): StatementObserver {
  const open = new WeakMap<object, { wrote: boolean }>();
  return (text, connection) => {
    const transaction = open.get(connection);
    if (/^\s*(?:begin|start\s+transaction)\b/i.test(text)) {
      open.set(connection, { wrote: false });
    } else if (/^\s*commit\b/i.test(text)) {
      open.delete(connection);
      if (transaction?.wrote) return committed;
    } else if (/^\s*rollback\s*$/i.test(text)) {
      open.delete(connection);
    } else if (STAMPED_WRITE.test(text)) {
      if (!transaction) return committed;
      transaction.wrote = true;
    }
    return undefined;
  };
}

/**
 * Channels are shared by the whole database, and Postwire's tables live in one schema: the notifications
 * carry the schema they come from (notifyStatement, the stamps' trigger), and those of other schemas (another
 * deployment in the same database) are ignored. One without a schema (sent by an older version) is heard.
 */
async function listenPostgres(
  url: string,
  schema: string | undefined,
  channel: string,
  onNotify: () => void,
  onError: (error: Error) => void,
): Promise<Listener> {
  if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`Bad channel name '${channel}'.`);
  const client = new pg.Client({
    connectionString: url,
    // Named, so that an operator (or a test) can tell this process's listeners apart in pg_stat_activity.
    application_name: `postwire listen ${channel}${schema ? ` ${schema}` : ''}`,
    ...inSchema(schema),
  });
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await client.end().catch(() => undefined);
  };
  let ownSchema: string | null = null;
  client.on('notification', (message) => {
    if (message.channel !== channel) return;
    if (message.payload && ownSchema !== null && message.payload !== ownSchema) return;
    onNotify();
  });
  client.on('error', (error) => {
    if (closed) return;
    void close();
    onError(error);
  });
  client.on('end', () => {
    if (closed) return;
    closed = true;
    onError(new Error('The LISTEN connection ended.'));
  });
  try {
    await client.connect();
    // The schema the tables are found in: the one given, or the URL's search_path.
    const result = await client.query<{ schema: string | null }>('select current_schema() as schema');
    ownSchema = result.rows[0]?.schema ?? null;
    await client.query(`LISTEN ${channel}`);
  } catch (error) {
    await close();
    throw error;
  }
  return { close };
}
