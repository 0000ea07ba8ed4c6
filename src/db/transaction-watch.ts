import { CompiledQuery, type DatabaseConnection, type Dialect, type Driver } from 'kysely';

/** Frames kept of the stack that opened a transaction. */
const STACK_FRAMES = 30;

/** Told of a transaction still open past the bound: how long so far, and the stack that began it. */
export type LongTransactionReport = (report: { openMs: number; stack: string }) => void;

export interface TransactionWatchOptions {
  /**
   * The statement that begins a transaction instead of the driver's own (SQLite: `begin immediate`, so that a
   * transaction that reads before it writes waits for another process's write lock at once, with
   * busy_timeout, rather than failing when it upgrades its lock).
   */
  begin?: string;
  /**
   * A transaction still open this long, in milliseconds, is reported to `report` with the stack that began
   * it (once per transaction). While one is open, the engine's write lock (SQLite: the one connection, so
   * every other query of the process) waits for it; nothing slow belongs inside one. Unset: not watched.
   */
  warnAfterMs?: number | undefined;
  report?: LongTransactionReport;
}

/**
 * The dialect with its transactions watched (see TransactionWatchOptions). It works on the driver, under
 * Kysely, so that every way of beginning a transaction is watched, and the stack is taken when the driver
 * is asked to begin: its async frames lead back to the code that opened the transaction.
 */
export function watchTransactions(dialect: Dialect, options: TransactionWatchOptions): Dialect {
  if (options.begin === undefined && options.warnAfterMs === undefined) return dialect;
  return {
    createDriver: () => watchDriver(dialect.createDriver(), options),
    createQueryCompiler: () => dialect.createQueryCompiler(),
    createAdapter: () => dialect.createAdapter(),
    createIntrospector: (db) => dialect.createIntrospector(db),
  };
}

function watchDriver(inner: Driver, { begin, warnAfterMs, report }: TransactionWatchOptions): Driver {
  const beginStatement = begin === undefined ? undefined : CompiledQuery.raw(begin);
  const timers = new WeakMap<DatabaseConnection, NodeJS.Timeout>();
  const stopWatching = (connection: DatabaseConnection) => {
    clearTimeout(timers.get(connection));
    timers.delete(connection);
  };
  const startWatching = (connection: DatabaseConnection) => {
    if (warnAfterMs === undefined || report === undefined) return;
    const opened = performance.now();
    // The frames are taken now; they are only formatted (the costly part) for a report. Kysely's and this
    // driver's own frames come first, so more than the default ten are kept to reach the caller's.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = STACK_FRAMES;
    const where = new Error('Transaction opened');
    Error.stackTraceLimit = limit;
    // Unref'd: a transaction left open must not also keep the process alive for its warning.
    const check = () => {
      const openMs = performance.now() - opened;
      // Timers may fire a little early against the monotonic clock: wait again for what is left.
      if (openMs < warnAfterMs) {
        timers.set(connection, setTimeout(check, Math.ceil(warnAfterMs - openMs)).unref());
        return;
      }
      timers.delete(connection);
      report({ openMs: Math.round(openMs), stack: where.stack ?? '' });
    };
    timers.set(connection, setTimeout(check, warnAfterMs).unref());
  };
  return {
    init: () => inner.init(),
    acquireConnection: () => inner.acquireConnection(),
    async beginTransaction(connection, settings) {
      startWatching(connection);
      try {
        if (beginStatement) await connection.executeQuery(beginStatement);
        else await inner.beginTransaction(connection, settings);
      } catch (error) {
        stopWatching(connection);
        throw error;
      }
    },
    async commitTransaction(connection) {
      try {
        await inner.commitTransaction(connection);
      } finally {
        stopWatching(connection);
      }
    },
    async rollbackTransaction(connection) {
      try {
        await inner.rollbackTransaction(connection);
      } finally {
        stopWatching(connection);
      }
    },
    ...(inner.savepoint ? { savepoint: inner.savepoint.bind(inner) } : {}),
    ...(inner.rollbackToSavepoint ? { rollbackToSavepoint: inner.rollbackToSavepoint.bind(inner) } : {}),
    ...(inner.releaseSavepoint ? { releaseSavepoint: inner.releaseSavepoint.bind(inner) } : {}),
    releaseConnection: (connection) => inner.releaseConnection(connection),
    destroy: () => inner.destroy(),
  };
}
