import { type Kysely, sql } from 'kysely';
import type { Database } from '../schema.ts';

// PostgreSQL plans a named statement once per connection and keeps the plan until the statistics of a table
// it reads change (ANALYZE). Autovacuum analyzes a table once a tenth of it has changed, but looks at most
// once a minute (autovacuum_naptime): on a fresh install the queue's tables grow from nothing to thousands of
// rows within that minute, and the plans every pooled connection made while they were nearly empty, where a
// sequential scan or a read of every matching row cost the same as an index probe, are kept as they grow (the
// sending worker's claims and outcomes joined their rows to the whole table, read in full every time:
// bench/README.md, issue 43, sixth session). So a serving process analyzes a table of its schema once it holds
// twice the rows it held at its last analysis (and at least MIN_ROWS), checking every CHECK_EVERY_MS: the plans
// then follow a table's growth within a factor of two, in about log2(rows / MIN_ROWS) analyses, after which
// autovacuum's tenth comes first. Growth, not changes: a table of a few rows updated by every send (the daily
// counts) never qualifies.

/** How often a process looks for a table that has outgrown its statistics. */
export const STATISTICS_CHECK_MS = 2000;
/** Below this many rows no plan's choice costs enough to matter. */
export const STATISTICS_MIN_ROWS = 1000;

export interface StatisticsKeeper {
  /** Analyzes the table of the schema that has most outgrown its statistics, if one has; its name. */
  checkNow(): Promise<string | undefined>;
  /** Stops checking, after the check under way. */
  stop(): Promise<void>;
}

export function startStatisticsKeeper(
  db: Kysely<Database>,
  { everyMs = STATISTICS_CHECK_MS }: { everyMs?: number } = {},
): StatisticsKeeper {
  let running: Promise<string | undefined> | undefined;
  const checkNow = () =>
    (running ??= (async () => {
      try {
        // reltuples is -1 for a table never analyzed; the live rows are the statistics collector's count, read
        // for the schema's tables only (pg_stat_user_tables reads them for every table of the database).
        const { rows } = await sql<{ table: string }>`SELECT c.relname AS table FROM pg_class AS c
          WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
            AND c.relkind = 'r' AND pg_stat_get_live_tuples(c.oid) >= GREATEST(${STATISTICS_MIN_ROWS}, 2 * c.reltuples)
          ORDER BY pg_stat_get_live_tuples(c.oid) / GREATEST(c.reltuples, 1) DESC LIMIT 1`.execute(db);
        const table = rows[0]?.table;
        if (table !== undefined) await sql`ANALYZE ${sql.id(table)}`.execute(db);
        return table;
      } finally {
        running = undefined;
      }
    })());
  // A failed look (the database away) is tried again at the next one.
  const timer = setInterval(() => void checkNow().catch(() => undefined), everyMs);
  timer.unref();
  return {
    checkNow,
    stop: async () => {
      clearInterval(timer);
      await running?.catch(() => undefined);
    },
  };
}
