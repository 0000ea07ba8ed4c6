import type { Dialect, Kysely } from 'kysely';
import type { Database } from './schema.ts';
import { observeStatements, type StatementObserver } from './statement-observer.ts';
import type { GroupCommitSettings } from './unit-of-work.ts';
import type { Stamps } from './validated-cache.ts';
import { openPostgres } from './engine/postgres.ts';
import { openSqlite } from './engine/sqlite.ts';
import { DEFAULTS } from '../config.ts';

// The engine-neutral handle on the database. What each engine needs on top of Kysely's dialect (and its
// measured speed work) lives in src/db/engine/.

export type Engine = 'sqlite' | 'postgres';

export interface DatabaseHandle {
  db: Kysely<Database>;
  engine: Engine;
  close(): Promise<void>;
  /**
   * Runs `work` as one transaction that every query it makes joins, whichever repository makes it (see
   * unit-of-work.ts): committed when `work` resolves, rolled back when it throws.
   */
  unitOfWork<T>(work: () => Promise<T>): Promise<T>;
  /** The version stamps this process's in-memory reads are checked against (validated-cache.ts). */
  stamps: Stamps;
  /**
   * PostgreSQL only: LISTEN on `channel` over a dedicated connection (a pooled one would be handed to other
   * queries). `onError` reports a lost connection; the listener is then closed and may be opened again.
   */
  listen?(channel: string, onNotify: () => void, onError: (error: Error) => void): Promise<Listener>;
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
   * Units of work that arrive together share a transaction and its commit (unit-of-work.ts): the default
   * on SQLite, false to run each in its own; on PostgreSQL only when given.
   */
  groupCommit?: GroupCommitOptions | false;
  /** Told every statement run (tests and benchmarks count them); nothing is observed when absent. */
  observe?: StatementObserver;
}

export type GroupCommitOptions = Omit<GroupCommitSettings, 'begin'>;

export async function openDatabase(options: DatabaseOptions): Promise<DatabaseHandle> {
  const observed = (dialect: Dialect) =>
    options.observe ? observeStatements(dialect, options.observe) : dialect;
  if (options.url) {
    const groups = options.groupCommit ? { ...options.groupCommit, begin: 'begin' } : undefined;
    return openPostgres(options, options.url, options.poolSize ?? 10, observed, groups);
  }
  if (!options.sqlitePath) throw new Error('openDatabase needs a PostgreSQL url or a SQLite path.');
  // BEGIN IMMEDIATE: a group reads and writes; taking the write lock first means another process's write
  // makes it wait (busy_timeout) rather than fail on a lock upgrade.
  const groups =
    options.groupCommit === false
      ? undefined
      : { ...(options.groupCommit ?? DEFAULTS.groupCommit), begin: 'begin immediate' };
  return openSqlite(options.sqlitePath, observed, groups);
}

/** Wraps an engine's dialect (in statement observers) before anything else sees it. */
export type DialectWrapper = (dialect: Dialect) => Dialect;
