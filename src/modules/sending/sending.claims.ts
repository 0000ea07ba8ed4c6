import type { Engine } from '../../db/connection.ts';
import { skipLockedRows } from '../../db/engine/sql.ts';
import type { RecipientStatus, Row } from '../../db/schema.ts';
import { type Lease, storedLease } from '../../queue/lease.ts';
import { LOADED_EMAIL_COLUMNS, type LoadedEmailRow } from '../emails/email-rows.ts';
import { NOT_SUSPENDED } from '../destinations/destinations.repo.ts';

// The sending queue's claims as SQL text (sql-text.ts), one spelling for both engines (building them was most
// of the query builder's time in a sending worker), and the rows they return. sending.queue.ts runs them, alone
// or (PostgreSQL) in the statement that records the outcomes of the previous attempts.

/** A recipient row a worker holds the lease on. */
export interface ClaimedRecipient {
  id: string;
  emailId: string;
  projectId: string;
  address: string;
  host: string;
  status: RecipientStatus;
  attempts: number;
  /** Queue position: groups go out in the order of their first recipient. */
  seq: number;
}

const CLAIMED_COLUMNS = [
  'id',
  'email_id',
  'project_id',
  'address',
  'host',
  'status',
  'attempts',
  'ready_seq',
] as const;

export type ClaimedRow = Pick<Row<'email_recipients'>, (typeof CLAIMED_COLUMNS)[number]>;

export const toClaimed = (row: ClaimedRow): ClaimedRecipient => ({
  id: row.id,
  emailId: row.email_id,
  projectId: row.project_id,
  address: row.address,
  host: row.host,
  status: row.status,
  attempts: Number(row.attempts),
  seq: Number(row.ready_seq),
});

/**
 * A claim: leases the due rows its WHERE picks (not leased, or the lease ran out: its worker died) and returns
 * them. Its parameters, each from `slot` in turn: the lease's end and worker, now, then the WHERE's (`which`).
 */
function claimText(engine: Engine, slot: () => string, which: (slot: () => string) => string): string {
  const lease = `locked_until = ${slot()}, locked_by = ${slot()}`;
  const due = `ready_seq IS NOT NULL AND (locked_until IS NULL OR locked_until < ${slot()})${which(slot)}`;
  const rows = `SELECT id FROM email_recipients WHERE ${due}${skipLockedRows(engine)}`;
  return `UPDATE email_recipients SET ${lease} WHERE id IN (${rows}) RETURNING ${CLAIMED_COLUMNS.join(', ')}`;
}

/**
 * The look over the queue: the lowest queue positions first, `excluded` hosts left out, with `destinations`
 * the recipients of suspended destinations too (their source's and now's parameters), `also` a further
 * condition; then the limit's parameter.
 */
export function nextDueClaim(
  engine: Engine,
  slot: () => string,
  excluded: number,
  also = '',
  destinations = false,
): string {
  return claimText(engine, slot, (slot) => {
    const hosts = Array.from({ length: excluded }, slot).join(', ');
    // Direct delivery: a suspended destination's recipients stay queued, out of the way (issue 38).
    const held = destinations ? NOT_SUSPENDED(slot) : '';
    return `${hosts ? ` AND host NOT IN (${hosts})` : ''}${held}${also} ORDER BY ready_seq LIMIT ${slot()}`;
  });
}

/** The due recipients of `emails` emails. */
export const siblingsClaim = (engine: Engine, slot: () => string, emails: number): string =>
  claimText(engine, slot, (slot) => ` AND email_id IN (${Array.from({ length: emails }, slot).join(', ')})`);

/** A claim's parameters, in the order of its text: the lease's, then the WHERE's. */
export function claimParameters(lease: Lease, ...where: unknown[]): unknown[] {
  const { workerId, now, lockedUntil } = storedLease(lease);
  return [lockedUntil, workerId, now, ...where];
}

/**
 * PostgreSQL: a claim's rows with their emails, from its `claimed` (the emails by named columns, not
 * `emails.*`: the statement is prepared (src/db/engine/postgres.ts), and a prepared statement whose result
 * columns change under a migration fails instead of being planned again).
 */
export const CLAIMED_WITH_EMAILS = `${LOADED_EMAIL_COLUMNS}, ${CLAIMED_COLUMNS.map((column) => `claimed.${column} AS claimed_${column}`).join(', ')}`;

type ClaimedColumn = (typeof CLAIMED_COLUMNS)[number];
/** A row of CLAIMED_WITH_EMAILS. */
export type ClaimedWithEmailRow = LoadedEmailRow & { [C in ClaimedColumn as `claimed_${C}`]: ClaimedRow[C] };

/** The claimed recipients of CLAIMED_WITH_EMAILS's rows, in queue order. */
export const claimedOf = (rows: readonly ClaimedWithEmailRow[]): ClaimedRecipient[] =>
  rows
    .map((row) =>
      toClaimed({
        id: row.claimed_id,
        email_id: row.claimed_email_id,
        project_id: row.claimed_project_id,
        address: row.claimed_address,
        host: row.claimed_host,
        status: row.claimed_status,
        attempts: row.claimed_attempts,
        ready_seq: row.claimed_ready_seq,
      }),
    )
    .sort((a, b) => a.seq - b.seq);
