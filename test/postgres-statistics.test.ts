import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import { startStatisticsKeeper } from '../src/db/engine/postgres-statistics.ts';
import { engineSkip, startTestApp } from './helpers/app.ts';
import { rowsRead } from './helpers/plan-reads.ts';

// PostgreSQL keeps a connection's plan of a named statement until the statistics of a table it reads change,
// and autovacuum looks at most once a minute: plans made on a fresh install's empty tables (a sequential scan
// cost the same as an index probe there) were kept while the tables grew to thousands of rows, read in full by
// the sending worker's every claim and outcome (bench/README.md, issue 43, sixth session). A serving process
// analyzes a table once it holds twice the rows of its last analysis (src/db/engine/postgres-statistics.ts).

const IDS = Array.from({ length: 15 }, (_, index) => `rcpt_grown_${index * 200 + 7}`);

describe('planner statistics kept up with growth (postgres)', { skip: engineSkip('postgres') }, () => {
  test("a statement planned on the empty table reads 15 rows by index once the table's growth is analyzed", async () => {
    const app = await startTestApp('postgres');
    const keeper = startStatisticsKeeper(app.database.handle.db, { everyMs: 3_600_000 });
    try {
      const db = app.database.handle.db;
      const plans = await db.connection().execute(async (connection) => {
        // Planned once while the table is empty and kept, as each pooled connection keeps its named statements'.
        await sql`SET plan_cache_mode = force_generic_plan`.execute(connection);
        const values = IDS.map((_, index) => `($${index + 1}::text)`).join(', ');
        await sql
          .raw(
            `PREPARE by_ids AS SELECT r.id, r.status FROM email_recipients AS r
              JOIN (VALUES ${values}) AS v (id) ON r.id = v.id`,
          )
          .execute(connection);
        const byIds = sql`EXECUTE by_ids(${sql.join(IDS.map((id) => sql.lit(id)))})`;
        try {
          assert.deepEqual((await byIds.execute(connection)).rows, []);
          const sent = await app.request('POST', '/v1/emails', {
            body: {
              from: 'news@example.com',
              to: ['first@example.org'],
              subject: 'One',
              text: 'Line one\nLine two\n',
            },
          });
          assert.equal(sent.status, 202, JSON.stringify(sent.body));
          // 4,000 recipients written at once (a broadcast's worth), from this connection, whose statistics are
          // then sent to the collector when it next goes idle.
          await sql`INSERT INTO email_recipients
              (id, email_id, project_id, position, type, address, host, status, attempts, created_at, updated_at)
            SELECT 'rcpt_grown_' || g, ${sent.body.id}, ${app.projectId}, g, 'to', 'g' || g || '@example.org',
              'example.org', 'sent', 1, '2026-11-29T00:00:00.000Z', '2026-11-29T00:00:00.000Z'
            FROM generate_series(0, 3999) AS g`.execute(connection);
          await sql`SELECT pg_stat_force_next_flush()`.execute(connection);
          const plan = async () => {
            const { rows } = await sql<{ 'QUERY PLAN': Record<string, any>[] }>`EXPLAIN (ANALYZE, FORMAT JSON)
              ${byIds}`.execute(connection);
            return rows[0]!['QUERY PLAN'][0]!.Plan as Record<string, any>;
          };
          const before = await plan();
          assert.equal((await keeper.checkNow()) ?? null, 'email_recipients');
          // Nothing else has grown past its statistics.
          assert.equal((await keeper.checkNow()) ?? null, null);
          const after = await plan();
          assert.equal((await byIds.execute(connection)).rows.length, 15);
          return { before, after };
        } finally {
          await sql`DEALLOCATE by_ids`.execute(connection);
          await sql`RESET plan_cache_mode`.execute(connection);
        }
      });
      // The plan made on the empty table read all 4,001 rows; the plan made after the analysis, the 15 asked for.
      assert.ok(rowsRead(plans.before, 'email_recipients') > 4000, JSON.stringify(plans.before));
      assert.equal(rowsRead(plans.after, 'email_recipients'), 15, JSON.stringify(plans.after));
    } finally {
      await keeper.stop();
      await app.close();
    }
  });
});
