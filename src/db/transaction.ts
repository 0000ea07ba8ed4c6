import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

/**
 * A transaction, passed explicitly from the service that opens it to every repository method that writes (or
 * must read) in it, as that method's last parameter: a query made through anything else is not in it. On
 * SQLite it holds the one connection from its begin to its commit, so a query through the root database
 * made inside it would wait for it for ever; keep slow work (DNS, rendering, reads that can come first)
 * before it. Whatever must wait for the commit (waking this process's workers for the rows just written)
 * goes to `afterCommit`.
 */
export interface Transaction {
  db: Kysely<Database>;
  afterCommit(callback: () => void): void;
}

/**
 * The one way to run work in a transaction: `work` gets it, it commits when `work` resolves (rolls back when
 * it throws), and the callbacks `work` registered run after the commit, in order, before this resolves.
 */
export async function inTransaction<T>(
  db: Kysely<Database>,
  work: (transaction: Transaction) => Promise<T>,
): Promise<T> {
  const callbacks: Array<() => void> = [];
  const result = await db
    .transaction()
    .execute((trx) => work({ db: trx, afterCommit: (callback) => callbacks.push(callback) }));
  for (const callback of callbacks) callback();
  return result;
}

/**
 * Work whose one write is a single statement, run autocommitted: the statement is its own transaction (all or
 * nothing, committed before this resolves, with the same durability as a COMMIT), one round trip where BEGIN,
 * the statement and COMMIT are three. `work` gets a Transaction on the database itself and must make exactly
 * one statement through it; its afterCommit callbacks run once that statement has succeeded. When it fails,
 * `refusedByTheDatabase` tells whether it certainly did not take effect.
 */
export async function autocommitted<T>(
  db: Kysely<Database>,
  work: (transaction: Transaction) => Promise<T>,
): Promise<T> {
  const callbacks: Array<() => void> = [];
  const result = await work({ db, afterCommit: (callback) => callbacks.push(callback) });
  for (const callback of callbacks) callback();
  return result;
}

/**
 * Whether an autocommitted statement's error came from the database as its answer (a SQLSTATE: the statement
 * was refused and rolled back, nothing of it stored), as against a connection lost on the way, after which
 * whether it committed is unknown.
 */
export function refusedByTheDatabase(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  return typeof severity === 'string' && typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code);
}
