import type { Dialect, Kysely } from 'kysely';
import type { Database } from './schema.ts';
import type { StatementObserver } from './statement-observer.ts';
import type { LongTransactionReport } from './transaction-watch.ts';
import type { Stamps } from './validated-cache.ts';

// The engine-neutral handle on the database and how to open one: the types both connection.ts (which opens
// it) and the engines in src/db/engine/ (which build it) speak, so that neither imports the other's code.

export type Engine = 'sqlite' | 'postgres';

/**
 * Whether every process on the database shares one data directory (and so its key file): SQLite's processes
 * open the one file in it; PostgreSQL's may run on other machines, each with a data directory of its own.
 */
export const processesShareDataDir = (engine: Engine): boolean => engine === 'sqlite';

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
  /**
   * PostgreSQL only: joins the registry of processes that hear of every cached write (engine/stamp-registry.ts,
   * migration 0048), for as long as the handle is open: while registered, this process's stamp reads vouch for
   * their lease, and writers wait for its acknowledgement. Until then (and whenever its listener is lost) it
   * reads the stamps on every use. For processes that serve; a tool that only writes need not join.
   */
  joinStampRegistry?(): Promise<void>;
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
  /** Monotonic time in milliseconds for the stamps' leases (tests move it); performance.now() when absent. */
  stampClock?: () => number;
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
  /**
   * SQLite: checkpoint the write-ahead log from a thread rather than in the commits of the event loop
   * (engine/sqlite-checkpoints.ts); for processes that serve. Default false.
   */
  backgroundCheckpoints?: boolean;
  /**
   * PostgreSQL: analyze a table once it holds twice the rows of its last analysis, so that the plans each
   * connection keeps follow the tables' growth (engine/postgres-statistics.ts); for processes that serve.
   * Default false.
   */
  keepStatistics?: boolean;
}

/** Wraps an engine's dialect (in statement observers) before anything else sees it. */
export type DialectWrapper = (dialect: Dialect) => Dialect;
