import { randomInt } from 'node:crypto';
import { type Kysely, type RawBuilder, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import type { Database } from '../../db/schema.ts';

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

const HEAD = sql<
  number | string | null
>`(SELECT MIN(ready_seq) FROM email_recipients WHERE ready_seq IS NOT NULL)`;

/** The position after which a project's new rows go: its last queued row's, or the head's if later. */
async function basePositions(
  db: Kysely<Database>,
  projectIds: readonly string[],
): Promise<Map<string, number>> {
  const head = await db
    .selectNoFrom(HEAD.as('head'))
    .executeTakeFirstOrThrow()
    .then((row) => Number(row.head ?? 0));
  const rows = await db
    .selectFrom('email_recipients')
    .select((eb) => ['project_id', eb.fn.max('ready_seq').as('last')])
    .where('ready_seq', 'is not', null)
    .where('project_id', 'in', [...projectIds])
    .groupBy('project_id')
    .execute();
  const last = new Map(rows.map((row) => [row.project_id, Number(row.last ?? 0)]));
  return new Map(projectIds.map((id) => [id, Math.max(head, last.get(id) ?? 0)]));
}

/**
 * The queue position of a project's `offset`-th newly accepted due row (from 0), as an expression to insert:
 * the positions are read in the INSERT itself rather than by a SELECT before it. Both engines evaluate the
 * subqueries once for the statement (they are not correlated), so the rows of one INSERT are consecutive.
 */
export function nextPosition(engine: Engine, projectId: string, offset: number): RawBuilder<number> {
  const greatest = engine === 'postgres' ? sql`GREATEST` : sql`MAX`;
  return sql<number>`(${greatest}(COALESCE(${HEAD}, 0), COALESCE((SELECT MAX(ready_seq) FROM email_recipients
    WHERE project_id = ${projectId} AND ready_seq IS NOT NULL), 0)) + ${offset + 1})`;
}

// Sends of one project spread their counting over this many rows, so they rarely wait on each other.
const QUOTA_SHARDS = 8;

/**
 * Counts `recipients` against the project's quota for `day` and, when `total` is asked for (only a limit
 * needs it), returns the day's total so far, this send included. Run it last in the transaction that stores
 * the emails: a refused or failed send counts nothing, and on PostgreSQL the count row stays locked only
 * until the commit right after. Concurrent sends there do not see each other's uncommitted counts, so the
 * limit can be passed by what is in flight at the moment it is reached.
 */
export async function countAgainstQuota(
  trx: Kysely<Database>,
  options: { projectId: string; day: string; recipients: number; total: boolean },
): Promise<number | undefined> {
  const shard = randomInt(QUOTA_SHARDS);
  // The day's total in the same statement: this shard's new count plus the other shards', which this
  // statement does not touch (one statement instead of an upsert and a SUM).
  const row = await trx
    .insertInto('send_quota')
    .values({ project_id: options.projectId, day: options.day, shard, used: options.recipients })
    .onConflict((conflict) =>
      conflict
        .columns(['project_id', 'day', 'shard'])
        .doUpdateSet({ used: sql<number>`send_quota.used + ${options.recipients}` }),
    )
    .$if(options.total, (query) =>
      query.returning((eb) => [
        'used',
        eb
          .selectFrom('send_quota as others')
          .select(sql<number | string | null>`SUM(others.used)`.as('sum'))
          .where('others.project_id', '=', options.projectId)
          .where('others.day', '=', options.day)
          .where('others.shard', '<>', shard)
          .as('others'),
      ]),
    )
    .executeTakeFirst();
  if (!options.total) return undefined;
  const counted = row as { used?: number | string; others?: number | string | null } | undefined;
  return Number(counted?.used ?? 0) + Number(counted?.others ?? 0);
}

/** Forgets daily counts older than `beforeDay` (YYYY-MM-DD). */
export async function pruneQuota(db: Kysely<Database>, beforeDay: string): Promise<void> {
  await db.deleteFrom('send_quota').where('day', '<', beforeDay).execute();
}

/**
 * Moves waiting rows that are now due (scheduled sends, retries) into the queue, at most `limit` at a time,
 * each project's after its own queued rows: a burst of scheduled sends queues behind other projects' fresh
 * sends rather than ahead of them. Without a transaction: a row another worker promoted first is skipped
 * (the update only takes rows still waiting).
 */
export async function promoteDue(
  db: Kysely<Database>,
  options: { now: string; limit: number },
): Promise<number> {
  const due = await db
    .selectFrom('email_recipients')
    .select(['id', 'project_id'])
    .where('wait_until', 'is not', null)
    .where('wait_until', '<=', options.now)
    .orderBy('wait_until')
    .limit(options.limit)
    .execute();
  if (due.length === 0) return 0;
  const next = await basePositions(db, [...new Set(due.map((row) => row.project_id))]);
  const cases = due.map((row) => {
    const position = next.get(row.project_id)! + 1;
    next.set(row.project_id, position);
    // Typed, or PostgreSQL reads the parameters of a CASE as text.
    return sql`WHEN ${row.id} THEN CAST(${position} AS BIGINT)`;
  });
  const result = await db
    .updateTable('email_recipients')
    .set({ wait_until: null, ready_seq: sql<number>`CASE id ${sql.join(cases, sql` `)} END` })
    .where(
      'id',
      'in',
      due.map((row) => row.id),
    )
    .where('wait_until', 'is not', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}
