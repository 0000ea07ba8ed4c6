// The database the configuration names, as every process kind and every command opens it.
import path from 'node:path';
import type { Config } from '../config.ts';
import { type DatabaseHandle, openDatabase } from '../db/connection.ts';

export const SQLITE_FILE = 'postwire.db';

/** The database the configuration names: PostgreSQL for a DATABASE_URL, else `postwire.db` in the data directory. */
export function openConfiguredDatabase(
  config: Pick<Config, 'databaseUrl' | 'dataDir' | 'cacheStampLeaseMs' | 'transactionWarnMs'>,
  options: { poolSize?: number } = {},
): Promise<DatabaseHandle> {
  return openDatabase({
    url: config.databaseUrl,
    sqlitePath: path.join(config.dataDir, SQLITE_FILE),
    stampLeaseMs: config.cacheStampLeaseMs,
    transactionWarnMs: config.transactionWarnMs,
    backgroundCheckpoints: true,
    keepStatistics: true,
    ...(options.poolSize ? { poolSize: options.poolSize } : {}),
  });
}

/** Where the data lives, for people: the SQLite file, or the PostgreSQL server and database without credentials. */
export function describeDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir'>): string {
  if (!config.databaseUrl) return `SQLite ${path.join(config.dataDir, SQLITE_FILE)}`;
  try {
    const url = new URL(config.databaseUrl);
    return `PostgreSQL ${url.host}${url.pathname}`;
  } catch {
    return 'PostgreSQL';
  }
}
