import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Fewer index entries written per webhook delivery. Two indexes no query reads: deliveries by project (the
// delivery log reads a webhook's or an event's deliveries, a project's go with its events) and attempts by
// webhook (a webhook's attempts go with its deliveries, through the attempts' delivery index). Every delivery
// and every attempt wrote an entry into each.
//
// On PostgreSQL the deliveries table also leaves 30 % of each page free. A claim changes only the lease
// columns, which no index holds, so its new row version can stay on the page as a heap-only tuple, with no
// new index entries; on a full page it went elsewhere and wrote an entry into each of the table's indexes
// (six of them, the two claim indexes included), as many again as the outcome's update writes. Claiming 4
// and finishing them, 5000 rows: 7 % of claims heap-only at the default fillfactor (100), 40 % at 80, 89 % at
// 70 (the outcomes' own new versions take room on the page too), for a heap about 30 % larger.
//
// And a delivery's latest attempt is kept in its own row (the last_* columns, with the attempt's id),
// written by the outcome's update that was written anyway; delivery_attempts holds the earlier attempts,
// each moved there by the update that replaces it. Most deliveries succeed at their first attempt, and
// then write no attempt row (nor its two index entries) at all. Deliveries from before this migration
// have no last_attempt_id: all their attempts are rows already.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.dropIndex('deliveries_project').execute();
    await db.schema.dropIndex('delivery_attempts_webhook').execute();
    // SQLite adds one column per statement.
    for (const [column, type] of [
      ['last_attempt_id', 'text'],
      ['last_duration_ms', 'integer'],
      ['last_attempt_error', 'text'],
      ['last_response_excerpt', 'text'],
    ] as const) {
      await db.schema.alterTable('deliveries').addColumn(column, type).execute();
    }
    if (db.getExecutor().adapter instanceof PostgresAdapter) {
      await sql`ALTER TABLE deliveries SET (fillfactor = 70)`.execute(db);
    }
  },
};
