import type { Dialect } from 'kysely';
import type { DatabaseHandle, DatabaseOptions } from './handle.ts';
import { observeStatements } from './statement-observer.ts';
import { type LongTransactionReport, watchTransactions } from './transaction-watch.ts';
import { openPostgres } from './engine/postgres.ts';
import { openSqlite } from './engine/sqlite.ts';

// The engine-neutral handle on the database. What each engine needs on top of Kysely's dialect (and its
// measured speed work) lives in src/db/engine/.

export type { DatabaseHandle, DatabaseOptions, DialectWrapper, Engine, Listener } from './handle.ts';

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
  return openSqlite(
    options.sqlitePath,
    (dialect) => watchTransactions(observed(dialect), { ...watch, begin: 'begin immediate' }),
    { backgroundCheckpoints: options.backgroundCheckpoints ?? false },
  );
}
