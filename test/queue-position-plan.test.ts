import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import { nextPositionText } from '../src/modules/emails/fair-queue.repo.ts';
import { engineSkip, startTestApp } from './helpers/app.ts';
import { rowsRead } from './helpers/plan-reads.ts';

// Every accepted send reads its project's last queue position (fair-queue.repo.ts). On PostgreSQL a connection
// plans that statement once and keeps the plan; on a fresh install's tables, before autovacuum has analyzed
// them, every index that starts with the project was estimated at one row, and a connection could keep a plan
// that read every recipient the project ever had, in every send (bench/README.md, issue 43, sixth session:
// half of the accepting connections of a run, each send then 1–3 ms of PostgreSQL's CPU and growing). What a
// sender sees is the accepting rate; what is held here is its cause: the lookup, planned once for any project
// on tables without statistics, reads the queue's head and the project's last entry, not the project's
// queue or its history.

describe('the queue position of an accepted send (postgres)', { skip: engineSkip('postgres') }, () => {
  test('a project with 2,000 recipients sent and 2,000 queued: the plan reads two index entries', async () => {
    const app = await startTestApp('postgres');
    try {
      const send = (to: string) =>
        app.request('POST', '/v1/emails', {
          body: { from: 'news@example.com', to: [to], subject: 'Queued', text: 'Line one\nLine two\n' },
        });
      const db = app.database.handle.db;
      const plan = await db.connection().execute(async (connection) => {
        // Planned while the table is empty, and kept, as a pooled connection keeps its statements' plans.
        await sql`SET plan_cache_mode = force_generic_plan`.execute(connection);
        // As the accepting INSERT reads it: the project from each row it inserts (recipients.repo.ts).
        const fromRow = ['v.project_id', 'v.place'];
        const position = nextPositionText('postgres', () => fromRow.shift()!);
        const text = `SELECT ${position} AS next FROM (SELECT $1::text AS project_id, $2::bigint AS place) AS v`;
        await sql.raw(`PREPARE next_position(text, bigint) AS ${text}`).execute(connection);
        const next = () => sql<{ next: string }>`EXECUTE next_position(${sql.lit(app.projectId)}, 1)`;
        try {
          await next().execute(connection);
          const first = await send('first@example.org');
          assert.equal(first.status, 202, JSON.stringify(first.body));
          // The project's history (recipients already sent: out of the queue, as the sending worker leaves
          // them) and a backlog of 2,000 queued, written straight into the table, since no worker runs here.
          await sql`INSERT INTO email_recipients
              (id, email_id, project_id, position, type, address, host, status, attempts, ready_seq, created_at,
                updated_at)
            SELECT 'rcpt_backlog_' || g, ${first.body.id}, ${app.projectId}, g, 'to', 'h' || g || '@example.org',
              'example.org', CASE WHEN g <= 2000 THEN 'sent' ELSE 'queued' END, 0,
              CASE WHEN g <= 2000 THEN NULL ELSE g END, '2026-11-29T00:00:00.000Z', '2026-11-29T00:00:00.000Z'
            FROM generate_series(1, 4000) AS g`.execute(db);
          const second = await send('second@example.org');
          assert.equal(second.status, 202, JSON.stringify(second.body));
          const { rows: queued } = await sql<{
            last: string;
          }>`SELECT MAX(ready_seq) AS last FROM email_recipients
            WHERE project_id = ${app.projectId}`.execute(db);
          const { rows: position } = await next().execute(connection);
          assert.equal(Number(position[0]!.next), Number(queued[0]!.last) + 1);
          const { rows } = await sql<{ 'QUERY PLAN': Record<string, any>[] }>`EXPLAIN (ANALYZE, FORMAT JSON)
            ${next()}`.execute(connection);
          return rows[0]!['QUERY PLAN'][0]!.Plan as Record<string, any>;
        } finally {
          await sql`DEALLOCATE next_position`.execute(connection);
          await sql`RESET plan_cache_mode`.execute(connection);
        }
      });
      // The queue's head (its lowest position) and the project's last: one index entry each.
      assert.ok(rowsRead(plan, 'email_recipients') <= 2, JSON.stringify(plan, null, 1));
    } finally {
      await app.close();
    }
  });
});
