// The plan and the time of a paced lane's part of a look (sending.claims.ts) behind a large backlog of
// another destination: whether the lane's rows are read by an index probe (migration 0047's
// `email_recipients_paced_ready`) or by the queue in order past the other destination's rows.
//
//   node bench/paced-lane-plan.ts                      # SQLite, 200,000 queued rows of another destination
//   node bench/paced-lane-plan.ts --backlog 1000000
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/paced-lane-plan.ts
//
// The rows are written by SQL (scratch-db.ts): the backlog's in queue order first, then the paced
// destination's behind it, all accepted for direct delivery (paced_host).
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import { placeholders } from '../src/db/sql-text.ts';
import { claimParameters, nextDueClaim } from '../src/modules/sending/sending.claims.ts';
import { openScratchDatabase } from './scratch-db.ts';

const { values: args } = parseArgs({
  options: {
    backlog: { type: 'string', default: '200000' },
    paced: { type: 'string', default: '50' },
  },
});
const backlog = Number(args.backlog);
const paced = Number(args.paced);
const scratch = await openScratchDatabase('paced');
const { db, engine } = scratch;
try {
  const insert = (from: number, count: number, host: string) =>
    sql`INSERT INTO email_recipients (id, email_id, project_id, position, type, address, host, status,
        ready_seq, created_at, updated_at, paced_host)
      SELECT 'rcpt_' || ${host} || n, 'msg_x', 'prj_x', 0, 'to', 'r' || n || '@' || ${host}, ${host}, 'queued',
        n, '2026-11-29T00:00:00.000Z', '2026-11-29T00:00:00.000Z', ${host}
      FROM ${engine === 'postgres' ? sql`generate_series(${from}::bigint, ${from + count - 1}::bigint) AS n` : sql`(WITH RECURSIVE s(n) AS (SELECT ${from} UNION ALL SELECT n + 1 FROM s WHERE n < ${from + count - 1}) SELECT n FROM s)`}`;
  const started = performance.now();
  await db.transaction().execute(async (trx) => {
    await insert(1, backlog, 'big.test').execute(trx);
    await insert(backlog + 1, paced, 'paced.test').execute(trx);
  });
  await sql`ANALYZE`.execute(db);
  console.log(
    `${engine}: ${backlog} queued rows of big.test, then ${paced} of paced.test (${Math.round(performance.now() - started)} ms to write)`,
  );

  // A look whose part over the queue leaves the paced lane's host out, and whose lane part takes 2 of it.
  const text = nextDueClaim(engine, placeholders(engine), { excluded: 0, lanes: [1] }, '', 1);
  const now = new Date('2026-11-29T12:00:00.000Z');
  const lease = { workerId: 'w1', now, until: new Date(now.getTime() + 60_000) };
  const parameters = [
    ...claimParameters(lease, 'paced.test', 'default', now.toISOString(), 0),
    now.toISOString(),
    'paced.test',
    'default',
    now.toISOString(),
    2,
  ];
  const explain = engine === 'postgres' ? 'EXPLAIN (ANALYZE, COSTS OFF)' : 'EXPLAIN QUERY PLAN';
  const { rows } = await db.executeQuery<Record<string, unknown>>({
    sql: `${explain} ${text}`,
    parameters,
    query: { kind: 'RawNode' } as never,
    queryId: { queryId: 'plan' } as never,
  });
  for (const row of rows)
    console.log(engine === 'postgres' ? row['QUERY PLAN'] : `${row.id} ${row.parent} ${row.detail}`);
  // The statement's time, run and rolled back, best of five.
  let best = Infinity;
  let claimed = 0;
  for (let round = 0; round < 5; round++) {
    await db
      .transaction()
      .execute(async (trx) => {
        const start = performance.now();
        const result = await trx.executeQuery<{ host: string }>({
          sql: text,
          parameters,
          query: { kind: 'RawNode' } as never,
          queryId: { queryId: 'claim' } as never,
        });
        best = Math.min(best, performance.now() - start);
        claimed = result.rows.length;
        throw new Error('rollback');
      })
      .catch((error: Error) => {
        if (error.message !== 'rollback') throw error;
      });
  }
  console.log(`claim: ${claimed} rows of paced.test, best of 5 ${best.toFixed(2)} ms`);
} finally {
  await scratch.remove();
}
