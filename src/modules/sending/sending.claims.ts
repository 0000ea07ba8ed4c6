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
  /**
   * Direct delivery: the destination the database maps its domain to (`destination_domains`, read by the
   * claim), so that a worker that has not sent there yet knows it from the first message; else null.
   */
  destination: string | null;
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

export type ClaimedRow = Pick<Row<'email_recipients'>, (typeof CLAIMED_COLUMNS)[number]> & {
  destination: string | null;
};

/** The claims' RETURNING: the claimed columns, and with direct delivery their domain's destination. */
const claimedReturning = (direct: boolean) =>
  `${CLAIMED_COLUMNS.join(', ')}, ${
    direct
      ? '(SELECT destination FROM destination_domains WHERE destination_domains.domain = email_recipients.host)'
      : 'CAST(NULL AS TEXT)'
  } AS destination`;

export const toClaimed = (row: ClaimedRow): ClaimedRecipient => ({
  id: row.id,
  emailId: row.email_id,
  projectId: row.project_id,
  address: row.address,
  host: row.host,
  status: row.status,
  attempts: Number(row.attempts),
  seq: Number(row.ready_seq),
  destination: row.destination,
});

/**
 * A claim: leases the due rows its WHERE picks (not leased, or the lease ran out: its worker died) and returns
 * them. Its parameters, each from `slot` in turn: the lease's end and worker, then the rows' (dueRows).
 */
function claimText(slot: () => string, rows: (slot: () => string) => string, direct: boolean): string {
  const lease = `locked_until = ${slot()}, locked_by = ${slot()}`;
  return `UPDATE email_recipients SET ${lease} WHERE id IN (${rows(slot)}) RETURNING ${claimedReturning(direct)}`;
}

/** The due rows `which` picks (their `columns`); parameters: now, then the WHERE's (`which`). */
function dueRows(
  engine: Engine,
  slot: () => string,
  which: (slot: () => string) => string,
  columns = 'id',
): string {
  const due = `ready_seq IS NOT NULL AND (locked_until IS NULL OR locked_until < ${slot()})${which(slot)}`;
  return `SELECT ${columns} FROM email_recipients WHERE ${due}${skipLockedRows(engine)}`;
}

/**
 * A look's shape: how many hosts it leaves out, and for each lane it takes at most a limit of (a paced
 * destination: ClaimRequest.laneLimits), how many hosts that lane has.
 */
export interface LookShape {
  excluded: number;
  lanes: readonly number[];
}

/** The key of a look's shape, for textsByShape. */
export const lookShapeKey = (shape: LookShape): string => [shape.excluded, ...shape.lanes].join(' ');
export const lookShapeOf = (key: string): LookShape => {
  const [excluded, ...lanes] = key.split(' ').map(Number);
  return { excluded: excluded!, lanes };
};

/**
 * The look over the queue: the lowest queue positions first, `excluded` hosts left out, with `sources` the
 * recipients of destinations suspended for all of them too (NOT_SUSPENDED's parameters), `also` a further
 * condition; then the limit's parameter. Each limited lane (`shape.lanes`) is left out of that part too,
 * and has a part of its own: each of its hosts' rows, lowest positions first, up to the lane's limit (the
 * parameters as the first part's, with the host for the hosts left out), and of those the lowest up to it
 * (the limit again) when it has several hosts. So a paced destination's rows are never claimed past what it
 * can start, to be given back (issue 38); and one host at a time, the part reads its rows from the
 * (paced_host, ready_seq) index (migration 0047: the rows accepted for direct delivery), not the queue in
 * order past every other destination's rows ahead of them.
 */
export function nextDueClaim(
  engine: Engine,
  slot: () => string,
  shape: LookShape,
  also = '',
  /** Direct delivery: how many sending sources the suspensions are read for (0: none, not direct). */
  sources = 0,
): string {
  // Direct delivery: a destination's recipients suspended for every source stay queued, out of the way (issue 38).
  const held = (slot: () => string) => (sources > 0 ? NOT_SUSPENDED(slot, sources) : '');
  const laneHosts = shape.lanes.reduce((sum, hosts) => sum + hosts, 0);
  const first = (slot: () => string) =>
    dueRows(engine, slot, (slot) => {
      const list = (length: number) => Array.from({ length }, slot).join(', ');
      const excluded = shape.excluded > 0 ? ` AND host NOT IN (${list(shape.excluded)})` : '';
      // A limited lane's rows without `paced_host` (accepted while the transport was not direct, migration
      // 0047) are not in its part's index: they stay in this part, and what the lane cannot hold is given back.
      const lanes = laneHosts > 0 ? ` AND (paced_host IS NULL OR host NOT IN (${list(laneHosts)}))` : '';
      return `${excluded}${lanes}${held(slot)}${also} ORDER BY ready_seq LIMIT ${slot()}`;
    });
  if (shape.lanes.length === 0) return claimText(slot, first, sources > 0);
  const ofHost = (slot: () => string, columns?: string) =>
    dueRows(
      engine,
      slot,
      (slot) => ` AND paced_host = ${slot()}${held(slot)}${also} ORDER BY ready_seq LIMIT ${slot()}`,
      columns,
    );
  const lane = (slot: () => string, hosts: number) => {
    if (hosts === 1) return ofHost(slot);
    const each = Array.from(
      { length: hosts },
      (_, index) => `SELECT id, ready_seq FROM (${ofHost(slot, 'id, ready_seq')}) AS host${index}`,
    );
    return `SELECT id FROM (${each.join(' UNION ALL ')}) AS hosts ORDER BY ready_seq LIMIT ${slot()}`;
  };
  return claimText(
    slot,
    (slot) =>
      [first(slot), ...shape.lanes.map((hosts) => lane(slot, hosts))]
        .map((rows, index) => `SELECT id FROM (${rows}) AS part${index}`)
        .join(' UNION ALL '),
    sources > 0,
  );
}

/**
 * Direct delivery: the rows queued (`ready_seq`) or waiting (`wait_until`) without a `paced_host` given theirs,
 * so their lanes' parts of a look read them by the index (migration 0047): rows accepted while the transport
 * was not direct, or before the upgrade. Rows another worker has locked are skipped (PostgreSQL): the look's
 * part over the queue claims what is left without one.
 */
export const pacedHostsText = (engine: Engine, column: 'ready_seq' | 'wait_until'): string =>
  `UPDATE email_recipients SET paced_host = host WHERE id IN (SELECT id FROM email_recipients
    WHERE ${column} IS NOT NULL AND paced_host IS NULL${skipLockedRows(engine)})`;

/** The due recipients of `emails` emails (`direct`: with their domains' destinations). */
export const siblingsClaim = (engine: Engine, slot: () => string, emails: number, direct: boolean): string =>
  claimText(
    slot,
    (slot) =>
      dueRows(
        engine,
        slot,
        (slot) => ` AND email_id IN (${Array.from({ length: emails }, slot).join(', ')})`,
      ),
    direct,
  );

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
export const CLAIMED_WITH_EMAILS = `${LOADED_EMAIL_COLUMNS}, ${[...CLAIMED_COLUMNS, 'destination'].map((column) => `claimed.${column} AS claimed_${column}`).join(', ')}`;

type ClaimedColumn = keyof ClaimedRow;
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
        destination: row.claimed_destination,
      }),
    )
    .sort((a, b) => a.seq - b.seq);
