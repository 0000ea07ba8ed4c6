import { randomInt } from 'node:crypto';
import { CompiledQuery, type Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { greatestOf } from '../../db/engine/sql.ts';
import { columnArrays, placeholders, textsByShape, unnestedRows } from '../../db/sql-text.ts';
import type { Engine } from '../../db/connection.ts';
import type { Transaction } from '../../db/transaction.ts';

// Fair claiming across projects, as start-time fair queueing on one column. Every due recipient row carries
// `ready_seq`, its place in the queue, and workers claim the lowest first. A project's new rows are numbered
// after its own rows still in the queue, but never before the queue's head. So a project that queues
// 100 000 messages numbers them head+1 … head+100 000, and a project that queues 10 a moment later numbers
// them head+1 … head+10: they go out next, interleaved with the big backlog instead of after it. One
// project cannot starve another, and a lone project gets the full rate.
//
// Positions come from the rows themselves (two index lookups), not from a per-project counter row: such a
// row is written by every send of the project and, on PostgreSQL, makes each send wait for the previous
// one's commit. Two sends of one project at the same moment may get the same positions; ties are harmless.

// Two bands. A broadcast's copies (bulk) are numbered from BULK_BAND up, every other email's (transactional)
// below it: a claim takes the lowest positions first, so a password reset queued while a 100 000-copy
// broadcast goes out is claimed before the broadcast's next copy, whatever the project. Within each band the
// fairness above holds; each band's head and each project's last row are read within the band.

/** Where the bulk band's positions start (2^52: every position stays an exact JavaScript number). */
export const BULK_BAND = 2 ** 52;

/** Which band a row is numbered in. */
export type QueueBand = 'transactional' | 'bulk';

const inBand = (band: QueueBand) =>
  band === 'bulk' ? `ready_seq >= ${BULK_BAND}` : `ready_seq IS NOT NULL AND ready_seq < ${BULK_BAND}`;

// The head and a project's last position are each the first entry of an index in order (`ORDER BY … LIMIT 1`),
// not MIN and MAX: PostgreSQL may answer an aggregate by reading every entry that matches, and on tables with no
// statistics yet (a fresh install, until autovacuum analyzes them) it estimated that at one row, the same cost
// as the probe; a connection that planned then kept the read of the project's whole queue in every send
// (bench/README.md, issue 43, sixth session; test/queue-position-plan.test.ts). A first entry in order has
// no such plan.

/** A band's head: the lowest position of a row in it (the sending queue promotes after it too). */
export const queueHeadText = (band: QueueBand): string =>
  `(SELECT ready_seq FROM email_recipients WHERE ${inBand(band)} ORDER BY ready_seq LIMIT 1)`;

/** The transactional band's head. */
export const QUEUE_HEAD_TEXT = queueHeadText('transactional');

/**
 * The queue position of a project's newly accepted due row, as SQL text for an INSERT's values, with two
 * parameters (`slot` makes their placeholders): the project's id, then the row's place among the project's
 * due rows of its band in the statement, from 1. The positions are read in the INSERT itself rather than by a
 * SELECT before it. Both engines evaluate the subqueries once for the statement, before inserting (they are
 * not correlated, and SQLite computes the values of an INSERT that reads its own table before writing any),
 * so the rows of one INSERT are consecutive.
 */
export function nextPositionText(
  engine: Engine,
  slot: () => string,
  band: QueueBand = 'transactional',
): string {
  const base = band === 'bulk' ? BULK_BAND : 0;
  const projectLast = `COALESCE((SELECT ready_seq FROM email_recipients
    WHERE project_id = ${slot()} AND ${inBand(band)} ORDER BY ready_seq DESC LIMIT 1), ${base})`;
  return `(${greatestOf(engine, `COALESCE(${queueHeadText(band)}, ${base})`, projectLast)} + ${slot()})`;
}

// Sends of one project spread their counting over this many rows, so they rarely wait on each other.
const QUOTA_SHARDS = 8;

/** A count row's columns as the counting statement takes them. */
const COUNT_COLUMNS = ['project_id', 'day', 'shard', 'used'] as const;

/** Recipients to count against a project's quota for a day (YYYY-MM-DD). */
export interface QuotaCount {
  projectId: string;
  day: string;
  recipients: number;
}

/** A project's total for a day once counted, this statement's recipients included. */
export interface QuotaTotal extends QuotaCount {
  total: number;
}

/**
 * Counts recipients against their projects' quotas, one statement for all the projects and days given (each
 * once), and, when `totals` is asked for (only a limit needs them), returns each day's total so far. Run it
 * last in the transaction that stores the emails: a refused or failed send counts nothing, and on PostgreSQL
 * the count rows stay locked only until the commit right after. Concurrent sends there do not see each
 * other's uncommitted counts, so the limit can be passed by what is in flight at the moment it is reached.
 */
/** The day's count in a count row's other shards (0 when it has none), as SQL text on `send_quota`. */
const OTHER_SHARDS = `COALESCE((SELECT SUM(others.used) FROM send_quota AS others
  WHERE others.project_id = send_quota.project_id AND others.day = send_quota.day
    AND others.shard <> send_quota.shard), 0)`;

/** Counts sends against the daily quota, in `transaction`: the accepting write's. */
export function createQuotaCounter(engine: Engine) {
  /** A VALUES list's rows of counts (project, day, shard, recipients), their placeholders from `slot`. */
  const countRows = (rows: number, slot: () => string) =>
    Array.from({ length: rows }, () => `(${slot()}, ${slot()}, ${slot()}, ${slot()})`).join(', ');
  // The day's total in the same statement: this shard's new count plus the other shards', which this
  // statement does not touch (one statement instead of an upsert and a SUM).
  const text = textsByShape((shape) => {
    const [rows, totals] = shape.split(':');
    return `INSERT INTO send_quota (project_id, day, shard, used) VALUES ${countRows(Number(rows), placeholders(engine))}
      ON CONFLICT (project_id, day, shard) DO UPDATE SET used = send_quota.used + excluded.used${
        totals === 'totals' ? ` RETURNING project_id, day, used, ${OTHER_SHARDS} AS others` : ''
      }`;
  });
  // PostgreSQL: the count made only where it keeps the day's total within the limit (the last parameter), so
  // that a statement can refuse it with nothing written: a new shard row only if the day's total so far (as
  // the statement sees it) leaves room, an existing one only if its newest version (locked, waited for if
  // another transaction holds it) with the other shards leaves room; and only when a further condition holds
  // (an earlier part's guard), if one is given. Only the counts made are returned. The counts come as one
  // array per column (unnestedRows), so the text is the same for any number of them. `shape`: whether there
  // is a limit, the further condition.
  const countedOnlyText = textsByShape((shape) => {
    const [limited, onlyWhen] = shape.split('\n');
    const limit = limited === 'limit' ? `CAST($${COUNT_COLUMNS.length + 1} AS integer)` : undefined;
    const conditions = [
      ...(limit
        ? [
            `v.used + COALESCE((SELECT SUM(counted.used) FROM send_quota AS counted
        WHERE counted.project_id = v.project_id AND counted.day = v.day), 0) <= ${limit}`,
          ]
        : []),
      ...(onlyWhen ? [onlyWhen] : []),
    ];
    return `INSERT INTO send_quota (project_id, day, shard, used)
      SELECT v.project_id, v.day, v.shard, v.used
      FROM ${unnestedRows(COUNT_COLUMNS, { shard: 'integer', used: 'integer' })}
      WHERE ${conditions.join(' AND ')}
      ON CONFLICT (project_id, day, shard) DO UPDATE SET used = send_quota.used + excluded.used${
        limit ? `\n      WHERE send_quota.used + excluded.used + ${OTHER_SHARDS} <= ${limit}` : ''
      }
      RETURNING project_id, day, used, ${OTHER_SHARDS} AS others`;
  });
  /**
   * The statement counting `counts` (one shard for it), its placeholders numbered from the first; with
   * `withinLimit` (PostgreSQL), one that counts only what stays within it and returns the counts made; with
   * `onlyWhen` (PostgreSQL, SQL text without parameters: an earlier part's guard), one that counts only when
   * it holds too and returns the counts made.
   */
  const statement = (
    counts: readonly QuotaCount[],
    totals: boolean,
    withinLimit?: number,
    onlyWhen?: string,
  ): CompiledQuery => {
    // One shard for the statement: a row is written once per statement (PostgreSQL refuses a second).
    const shard = randomInt(QUOTA_SHARDS);
    const parameters = counts.flatMap((count) => [count.projectId, count.day, shard, count.recipients]);
    if (withinLimit !== undefined || onlyWhen !== undefined) {
      const shape = `${withinLimit !== undefined ? 'limit' : ''}\n${onlyWhen ?? ''}`;
      const rows = counts.map((count) => ({
        project_id: count.projectId,
        day: count.day,
        shard,
        used: count.recipients,
      }));
      return CompiledQuery.raw(countedOnlyText(shape), [
        ...columnArrays(COUNT_COLUMNS, rows),
        ...(withinLimit !== undefined ? [withinLimit] : []),
      ]);
    }
    return CompiledQuery.raw(text(`${counts.length}:${totals ? 'totals' : 'none'}`), parameters);
  };
  /** What the statement returns, as each count's total (when `totals` was asked for). */
  const totalsOf = (counts: readonly QuotaCount[], rows: readonly QuotaRow[]): QuotaTotal[] =>
    rows.map((row) => ({
      // Rows of counts made (a guard's row of nulls is the caller's to handle first).
      projectId: row.project_id!,
      day: row.day,
      recipients: counts.find((count) => count.projectId === row.project_id && count.day === row.day)!
        .recipients,
      total: Number(row.used) + Number(row.others ?? 0),
    }));
  return {
    statement,
    totalsOf,
    async count(
      counts: readonly QuotaCount[],
      totals: boolean,
      transaction: Transaction,
    ): Promise<QuotaTotal[]> {
      if (counts.length === 0) return [];
      const { rows } = await transaction.db.executeQuery<QuotaRow>(statement(counts, totals));
      return totalsOf(counts, rows);
    },
  };
}

/** A count row as the counting statement returns it with totals. */
export interface QuotaRow {
  /** Null in the row that says a guard found something (countsMadeIn). */
  project_id: string | null;
  day: string;
  used: number | string;
  others: number | string | null;
}

/** The quota day (YYYY-MM-DD, UTC) a send accepted at `createdAt` (ISO 8601) is counted on. */
export const quotaDay = (createdAt: string): string => createdAt.slice(0, 10);

/** The daily limit's rule: a day's total (this send included) past `limit` is refused; 0 is no limit. */
export const overDailyLimit = (total: number, limit: number): boolean => limit > 0 && total > limit;

/**
 * The counts a within-limit counting statement made, when it is the part `part` of a joined statement; with
 * `guard` (an earlier part, a query the count was made only without an answer to), also one row of nulls when
 * the guard found any row.
 */
export const countsMadeIn = (part: string, guard?: string): CompiledQuery =>
  CompiledQuery.raw(
    `SELECT project_id, day, used, others FROM ${part}${
      guard ? ` UNION ALL (SELECT NULL, NULL, NULL, NULL FROM ${guard} LIMIT 1)` : ''
    }`,
    [],
  );

/** The counts a within-limit counting statement made, when it is the first part of a joined statement. */
export const FIRST_PART_COUNTS = countsMadeIn('part0');
/** The same when the first part is a guard (countsMadeIn) and the count the second. */
export const GUARDED_COUNTS = countsMadeIn('part1', 'part0');

/** Recipients counted against a project's daily limit on `day` (YYYY-MM-DD) so far, through `db`. */
export async function quotaUsed(db: Kysely<Database>, projectId: string, day: string): Promise<number> {
  const row = await db
    .selectFrom('send_quota')
    .select((eb) => eb.fn.sum<number | string | null>('used').as('used'))
    .where('project_id', '=', projectId)
    .where('day', '=', day)
    .executeTakeFirst();
  return Number(row?.used ?? 0);
}
