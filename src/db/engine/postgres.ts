import { Kysely, PostgresDialect } from 'kysely';
import { Socket } from 'node:net';
import pg from 'pg';
import { writesCachedRows } from '../cached-tables.ts';
import type { Database } from '../schema.ts';
import { observeStatements, type StatementObserver } from '../statement-observer.ts';
import { createStamps, noteStatements } from '../validated-cache.ts';
import { oneWritePerQuery, pipelineBegin } from './pipelined-begin.ts';
import { inSchema, listenPostgres } from './postgres-listen.ts';
import { startStatisticsKeeper } from './postgres-statistics.ts';
import { createStampRegistry } from './stamp-registry.ts';
import type { DatabaseHandle, DatabaseOptions, DialectWrapper } from '../handle.ts';
import { DEFAULTS } from '../../config.ts';
import { createBoundedMemo } from '../../lib/memo.ts';

// The PostgreSQL engine: a pg pool behind Kysely's PostgresDialect, the hot writes sent as named (prepared)
// statements, a transaction's BEGIN sent with its first statement (pipelined-begin.ts), this process's own
// writes to cached tables noticed for the stamps' leases, the registry of processes that hear of them
// (stamp-registry.ts), LISTEN (postgres-listen.ts), and the tables' statistics kept up with their growth
// (postgres-statistics.ts).

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

/** A new name for `text` when it is a write to prepare and names are left; undefined otherwise. */
function nameOf(text: string): string | undefined {
  if (!PREPARABLE.test(text) || COLUMN_WILDCARD.test(text)) return undefined;
  if (preparedNames.size >= PREPARED_STATEMENTS_MAX) return undefined;
  const name = `postwire_${preparedNames.size + 1}`;
  preparedNames.set(text, name);
  return name;
}

/**
 * PostgreSQL parses and plans an unnamed statement anew on every run; the hot writes are sent as named
 * statements instead, parsed and planned once per connection (node-postgres keeps which of them each
 * connection has prepared). A send group's recipients INSERT spent longer being planned than run (290 µs
 * against 160 per group of 5, pg_stat_statements). Names are given by text, one per distinct text, for a
 * bounded number of texts, so that a connection never holds more than that many.
 */
class PreparingClient extends pg.Client {
  /** Each query's messages leave in one socket write, a BEGIN's with the next query's (pipelined-begin.ts). */
  readonly #writes: ReturnType<typeof oneWritePerQuery>;

  constructor(config: pg.ClientConfig = {}) {
    // The socket is made here through pg's documented `stream` option, so that this client can cork it.
    let socket: Socket | undefined;
    super({ ...config, stream: () => (socket = new Socket()) });
    this.#writes = oneWritePerQuery(() => socket);
  }

  override query(...args: unknown[]): never {
    return this.#writes(args[0], () => this.#query(args));
  }

  #query(args: unknown[]): never {
    const [text, values] = args;
    // Only with parameters: a text without any goes by the simple protocol, which also runs several
    // statements at once (a named statement is one statement).
    if (typeof text === 'string' && Array.isArray(values) && values.length > 0 && args.length === 2) {
      // A text named before is looked up, not read again: the two patterns cost 20–30 µs on a 4 KB accepting
      // statement, on every run (bench/README.md, issue 43, fourth session).
      const name = preparedNames.get(text) ?? nameOf(text);
      if (name !== undefined) return super.query({ name, text, values }) as never;
    }
    return (super.query as (...all: unknown[]) => never)(...args);
  }
}

export async function openPostgres(
  {
    schema,
    stampLeaseMs = DEFAULTS.cacheStampLeaseMs,
    stampClock = () => performance.now(),
    keepStatistics = false,
  }: Pick<DatabaseOptions, 'schema' | 'stampLeaseMs' | 'stampClock' | 'keepStatistics'>,
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
    // Queries are written without waiting for the previous answer (pipelined-begin.ts sends BEGIN so).
    pipeline: true,
    ...inSchema(schema),
  });
  // An idle pooled client that loses its server (a PostgreSQL restart) emits 'error'; unhandled, it would
  // crash the process. The pool drops that client and the next query connects again.
  pool.on('error', () => undefined);
  // Told of this process's own commits of cached writes; bound once the stamps exist (they need `db`).
  let ownCommit = () => {};
  const tracked = observeStatements(
    pipelineBegin(new PostgresDialect({ pool })),
    stampedWrites(() => ownCommit()),
  );
  const db = new Kysely<Database>({ dialect: wrap(tracked), log: noteStatements });
  const listen: NonNullable<DatabaseHandle['listen']> = (...args) => listenPostgres(url, schema, ...args);
  const registry = createStampRegistry({
    url,
    schema,
    db,
    now: stampClock,
    heard: () => stamps.heardWrite(),
  });
  const stamps = createStamps(db, { leaseMs: stampLeaseMs, now: stampClock, listeners: registry });
  ownCommit = () => stamps.noteOwnCommit();
  const statistics = keepStatistics ? startStatisticsKeeper(db) : undefined;
  return {
    db,
    engine: 'postgres',
    stamps,
    close: async () => {
      // The tool's or process's own writes first: their acknowledgements come to the registry's listener.
      await stamps.close();
      await registry.close();
      await statistics?.stop();
      await db.destroy();
    },
    listen,
    joinStampRegistry: () => registry.join(),
    poolUse: () => ({
      max: poolSize,
      total: pool.totalCount,
      idle: pool.idleCount,
      waiting: pool.waitingCount,
    }),
  };
}

/**
 * Calls `committed` once a statement writing what the stamps vouch for (cached-tables.ts: the columns the
 * triggers watch, so a worker's bookkeeping is none) has committed on its connection: at once outside a
 * transaction, else after the transaction's COMMIT (a rollback forgets it). By the statements' text, under
 * every transaction mechanism (Kysely's, units of work, group commit).
 */
function stampedWrites(committed: () => void): StatementObserver {
  const open = new WeakMap<object, { wrote: boolean }>();
  // By text: the hot statements are the same few texts (kept by shape), and a WITH's is read whole.
  const writesCached = createBoundedMemo<string, boolean>(PREPARED_STATEMENTS_MAX);
  return (text, connection) => {
    const transaction = open.get(connection);
    if (/^\s*(?:begin|start\s+transaction)\b/i.test(text)) {
      open.set(connection, { wrote: false });
    } else if (/^\s*commit\b/i.test(text)) {
      open.delete(connection);
      if (transaction?.wrote) return committed;
    } else if (/^\s*rollback\s*$/i.test(text)) {
      open.delete(connection);
    } else if (writesCached(text, () => writesCachedRows(text))) {
      if (!transaction) return committed;
      transaction.wrote = true;
    }
    return undefined;
  };
}
