import { hostname } from 'node:os';
import { type Expression, type Kysely, type SqlBool, sql } from 'kysely';
import type { Database } from '../db/schema.ts';
import { randomToken } from '../lib/crypto.ts';

/** A claim's lease: the rows are `workerId`'s until `until`; past it, another worker may take them. */
export interface Lease {
  workerId: string;
  now: Date;
  until: Date;
}

/** A lease as the queue tables store it: ISO timestamps, compared as text. */
export interface StoredLease {
  workerId: string;
  now: string;
  lockedUntil: string;
}

export const storedLease = (lease: Lease): StoredLease => ({
  workerId: lease.workerId,
  now: lease.now.toISOString(),
  lockedUntil: lease.until.toISOString(),
});

/** A worker's name in `locked_by`: the host and process, and a random part so two workers of one process differ. */
export const newWorkerId = (): string => `${THIS_PROCESS}${randomToken(6)}`;

/** How the ids of this process's workers begin (newWorkerId): another process's workers' do not. */
export const THIS_PROCESS = `${hostname()}/${process.pid}/`;

/** The queue tables: each has `id`, `locked_by` and `locked_until`, leased only through its queue's adapter. */
export type QueueTable =
  | 'deliveries'
  | 'email_recipients'
  | 'inbound_messages'
  | 'domains'
  | 'contact_imports'
  | 'broadcasts'
  | 'automation_runs';

/**
 * Gives back leases without an attempt (more claimed than there are slots, or shutting down): these rows
 * (or all) that `workerId` holds and that are still waiting (`waiting`: the table's own test), so a row
 * finished meanwhile keeps its outcome. Called by the table's queue adapter (`<name>.queue.ts`). Answers the
 * ids of the rows given back: those `workerId` still held.
 */
export async function releaseLeases(
  db: Kysely<Database>,
  table: QueueTable,
  request: { workerId: string; rows?: readonly string[] | undefined; waiting: Expression<SqlBool> },
): Promise<string[]> {
  const { workerId, rows, waiting } = request;
  if (rows !== undefined && rows.length === 0) return [];
  const only = rows === undefined ? sql`` : sql`AND id IN (${sql.join(rows)})`;
  const released = await sql<{
    id: string;
  }>`UPDATE ${sql.table(table)} SET locked_until = NULL, locked_by = NULL
    WHERE locked_by = ${workerId} AND ${waiting} ${only} RETURNING id`.execute(db);
  return released.rows.map((row) => row.id);
}
