import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';
import { afterUnitCommits } from './unit-of-work.ts';

/**
 * A transaction as the services pass it to each other: repositories write through `db`, and whatever must
 * wait for the commit (waking this process's workers for the rows just written) goes to `afterCommit`.
 */
export interface Transaction {
  db: Kysely<Database>;
  afterCommit(callback: () => void): void;
}

/** Runs `work` in one transaction; after it commits, runs the callbacks it registered, in order. */
export async function inTransaction<T>(
  db: Kysely<Database>,
  work: (transaction: Transaction) => Promise<T>,
): Promise<T> {
  const callbacks: Array<() => void> = [];
  const result = await db
    .transaction()
    .execute((trx) => work({ db: trx, afterCommit: (callback) => callbacks.push(callback) }));
  // Inside a unit of work this transaction only joined it: the callbacks wait for the unit's commit.
  for (const callback of callbacks) if (!afterUnitCommits(callback)) callback();
  return result;
}
