import type { InsertQueryBuilder, InsertResult, Kysely, QueryCreator } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inChunks, valuesList } from '../../db/sql-text.ts';
import type { Transaction } from '../../db/transaction.ts';

// email_stats_daily: one count per project, tag ('' for every email), UTC day and metric. Counts are added
// in the transaction that records what they count (the event's, see countEvents), so they are exact; the
// stats route then reads at most days × metrics rows of a primary-key range instead of scanning events.

export const METRICS = [
  'sent',
  'delivered',
  'delivery_delayed',
  'bounced',
  'bounced_hard',
  'bounced_soft',
  'bounced_policy',
  'bounced_undetermined',
  'failed',
  'complained',
  'suppressed',
  'unsubscribed',
  'opened',
  'clicked',
  'unique_opens',
  'unique_opens_automated',
  'unique_clicks',
  'unique_clicks_automated',
] as const;
export type Metric = (typeof METRICS)[number];

export interface Increment {
  projectId: string;
  /** YYYY-MM-DD, UTC. */
  day: string;
  /** The email's tags: each `name:value` gets its own count, next to the project-wide one. */
  tags: Record<string, string>;
  metric: Metric;
}

/**
 * A write of another table that goes in the same round trip as the counts (PostgreSQL): a data-modifying
 * common table expression of the first statement, or alone when there is nothing to count.
 */
export type Alongside<T extends keyof Database> = InsertQueryBuilder<Database, T, InsertResult>;

const COUNT_COLUMNS = ['project_id', 'tag', 'day', 'metric', 'count'] as const;
interface CountRow {
  project_id: string;
  tag: string;
  day: string;
  metric: string;
  count: number;
}

/**
 * The increments summed per row (each tag of an email has its own count beside the project-wide one), in key
 * order: one order for every writer, so two transactions adding to the same rows never wait for each other
 * in a cycle.
 */
function countRows(increments: readonly Increment[]): CountRow[] {
  const sums = new Map<string, CountRow>();
  for (const increment of increments) {
    const tags = ['', ...Object.entries(increment.tags ?? {}).map(([name, value]) => `${name}:${value}`)];
    for (const tag of tags) {
      const id = `${increment.projectId}\u0000${tag}\u0000${increment.day}\u0000${increment.metric}`;
      const row = sums.get(id);
      if (row) row.count += 1;
      else
        sums.set(id, {
          project_id: increment.projectId,
          tag,
          day: increment.day,
          metric: increment.metric,
          count: 1,
        });
    }
  }
  return [...sums.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, row]) => row);
}

/** The metrics an event adds to (the unique opens and clicks are counted by the engagement module). */
export function metricsOfEvent(kind: string, data: Record<string, unknown>): Metric[] {
  switch (kind) {
    case 'email.sent':
      return ['sent'];
    case 'email.delivered':
      return ['delivered'];
    case 'email.delivery_delayed':
      return ['delivery_delayed'];
    case 'email.failed':
      return ['failed'];
    case 'email.complained':
      return ['complained'];
    case 'email.suppressed':
      return ['suppressed'];
    case 'email.unsubscribed':
      return ['unsubscribed'];
    case 'email.opened':
      return ['opened'];
    case 'email.clicked':
      return ['clicked'];
    case 'email.bounced': {
      const type = (data.bounce as { type?: unknown } | undefined)?.type;
      const byType: Metric | undefined =
        type === 'hard' || type === 'soft' || type === 'policy' || type === 'undetermined'
          ? `bounced_${type}`
          : undefined;
      return byType ? ['bounced', byType] : ['bounced'];
    }
    default:
      return [];
  }
}

/**
 * The counts the reputation breaker judges a sending domain on are kept per From domain too, under the tag
 * `@from:<domain>`: a name no tag of a send can have (TAG_PATTERN), which the stats route's filter never
 * matches. Only these metrics, so an outcome adds one row per metric it counts, not one per metric there is.
 */
export const FROM_DOMAIN_TAG = '@from';
export const REPUTATION_METRICS: readonly Metric[] = ['sent', 'bounced', 'bounced_hard', 'complained'];

/** The domain of an event's `from` (`Name <a@b.example>` or `a@b.example`), lowercased; undefined if none. */
export function fromDomainOf(from: unknown): string | undefined {
  if (typeof from !== 'string') return undefined;
  const match = /@([^@<>\s]+)>?\s*$/.exec(from);
  return match ? match[1]!.toLowerCase() : undefined;
}

/** What the events add to the daily counts, on `at`'s day. */
export function eventIncrements(
  events: ReadonlyArray<{ projectId: string; kind: string; data: Record<string, unknown> }>,
  at: string,
): Increment[] {
  const day = at.slice(0, 10);
  const increments: Increment[] = [];
  for (const event of events) {
    const given = event.data.tags;
    const tags = typeof given === 'object' && given !== null ? (given as Record<string, string>) : {};
    let withDomain: Record<string, string> | undefined;
    for (const metric of metricsOfEvent(event.kind, event.data)) {
      if (REPUTATION_METRICS.includes(metric)) {
        const domain = fromDomainOf(event.data.from);
        withDomain ??= domain === undefined ? tags : { ...tags, [FROM_DOMAIN_TAG]: domain };
        increments.push({ projectId: event.projectId, day, tags: withDomain, metric });
      } else increments.push({ projectId: event.projectId, day, tags, metric });
    }
  }
  return increments;
}

/**
 * PostgreSQL: the counts' upsert as a data-modifying part of another statement's WITH, named `name`, adding
 * the counts only when `guard` (an SQL condition on that statement's other parts) holds; its placeholders
 * from `param`. Empty when there is nothing to count.
 */
function addCountsWhere(
  name: string,
  increments: readonly Increment[],
  param: (value: unknown) => string,
  guard: string,
): string {
  const rows = countRows(increments);
  if (rows.length === 0) return '';
  const columns = COUNT_COLUMNS.join(', ');
  return `${name} AS (INSERT INTO email_stats_daily (${columns}) SELECT ${columns}
    FROM (${valuesList(COUNT_COLUMNS, rows, param, { count: 'bigint' })}) AS c (${columns}) WHERE ${guard}
    ON CONFLICT (project_id, tag, day, metric) DO UPDATE SET count = email_stats_daily.count + excluded.count)`;
}

/**
 * Adds the increments in `transaction` (the one that records what they count), summed per row first and
 * written in key order; with `alongside`, that write too.
 */
async function addCounts<T extends keyof Database>(
  increments: readonly Increment[],
  transaction: Transaction,
  alongside?: Alongside<T>,
): Promise<void> {
  const db = transaction.db;
  if (increments.length === 0) {
    await alongside?.execute();
    return;
  }
  const rows = countRows(increments);
  const upsert = (creator: Pick<QueryCreator<Database>, 'insertInto'>, chunk: typeof rows) =>
    creator
      .insertInto('email_stats_daily')
      .values(chunk)
      .onConflict((conflict) =>
        conflict
          .columns(['project_id', 'tag', 'day', 'metric'])
          .doUpdateSet((eb) => ({ count: eb('email_stats_daily.count', '+', eb.ref('excluded.count')) })),
      )
      .execute();
  // The other write rides with the first statement.
  await inChunks(rows, 200, (chunk, first) =>
    upsert(first && alongside ? db.with('alongside', () => alongside) : db, chunk),
  );
}

/**
 * The daily counts: written in the transactions that record what they count (addCounts, countEvents, and on
 * PostgreSQL addCountsWhere as a part of the events' statement), read by the stats route.
 */
export function createStatsRepo(db: Kysely<Database>) {
  return {
    addCounts,
    addCountsWhere,

    /** The events' counts, in the transaction that stores them (`alongside`: as addCounts). */
    countEvents<T extends keyof Database>(
      events: ReadonlyArray<{ projectId: string; kind: string; data: Record<string, unknown> }>,
      at: string,
      transaction: Transaction,
      alongside?: Alongside<T>,
    ): Promise<void> {
      return addCounts(eventIncrements(events, at), transaction, alongside);
    },

    /** Sums per day and metric for one tag ('' for all) between two days, inclusive. */
    async readCounts(query: {
      projectId: string;
      tag: string;
      since: string;
      until: string;
    }): Promise<Array<{ day: string; metric: string; count: number }>> {
      const rows = await db
        .selectFrom('email_stats_daily')
        .select(['day', 'metric', 'count'])
        .where('project_id', '=', query.projectId)
        .where('tag', '=', query.tag)
        .where('day', '>=', query.since)
        .where('day', '<=', query.until)
        .execute();
      return rows.map((row) => ({ day: row.day, metric: row.metric, count: Number(row.count) }));
    },
  };
}

export type StatsRepo = ReturnType<typeof createStatsRepo>;
