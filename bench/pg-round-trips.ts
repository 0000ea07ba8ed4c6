// PostgreSQL: what each kind of statement on the read path costs, on both sides of the socket: the client's
// CPU (this process) and the server backend's (its /proc stat, found by application_name), per statement, in
// CPU time, so other work on the machine skews it little. The statements: the cache stamps' read, and the
// API request log's batch of reads' logs (the same page, its answer stored once) at a few batch sizes.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/pg-round-trips.ts [--calls 2000]
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { type ApiLogEntry, createApiLogRecorder } from '../src/modules/logs/log-recorder.ts';
import { createApiLogRepo } from '../src/modules/logs/logs.repo.ts';
import { startBenchApp } from './app.ts';
import { DEFAULT_POSTGRES_URL } from './shared.ts';

const { values: args } = parseArgs({ options: { calls: { type: 'string', default: '2000' } } });
const CALLS = Number(args.calls);
const base = process.env.DATABASE_URL ?? DEFAULT_POSTGRES_URL;
const name = `postwire-round-trips-${process.pid}`;
const url = `${base}${base.includes('?') ? '&' : '?'}application_name=${name}`;

const bench = await startBenchApp({
  databaseUrl: url,
  schemaPrefix: 'bench_round_trips',
  config: { apiLogMaxRows: 0 },
});
const watcher = new pg.Client({ connectionString: base });
await watcher.connect();
/** The CPU, in µs, that this process's backends have used so far. */
async function backendMicros(): Promise<number> {
  const { rows } = await watcher.query<{ pid: number }>(
    'select pid from pg_stat_activity where application_name = $1',
    [name],
  );
  let ticks = 0;
  for (const { pid } of rows) {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks * 10_000;
}
async function measure(label: string, calls: number, perCall: number, run: () => Promise<void>) {
  await run();
  const backendBefore = await backendMicros();
  const client = process.cpuUsage();
  const wall = performance.now();
  for (let i = 0; i < calls; i++) await run();
  const used = process.cpuUsage(client);
  const backend = (await backendMicros()) - backendBefore;
  const per = (micros: number) => (micros / calls).toFixed(0).padStart(6);
  console.log(
    `${label.padEnd(44)} client ${per(used.user + used.system)} µs  backend ${per(backend)} µs  wall ${per((performance.now() - wall) * 1000)} µs a statement` +
      (perCall > 1
        ? `; per log: client ${((used.user + used.system) / calls / perCall).toFixed(1)}, backend ${(backend / calls / perCall).toFixed(1)} µs`
        : ''),
  );
}
try {
  const { db } = bench.database;
  await measure('cache stamps read', CALLS, 1, async () => {
    await db.selectFrom('cache_stamps').select(['scope', 'version']).execute();
  });
  const list = JSON.stringify({
    object: 'list',
    data: Array.from({ length: 20 }, (_, i) => ({
      id: `wh_${i}`,
      url: `https://example.com/hook/${i}`,
      events: ['email.sent'],
    })),
  });
  const repo = createApiLogRepo(db, bench.database.engine);
  const entry = (): ApiLogEntry => ({
    projectId: bench.projectId,
    keyId: 'key_01jdbench0000000000000000',
    method: 'GET',
    path: '/v1/webhooks',
    status: 200,
    durationMs: 0.4,
    at: new Date(),
    userAgent: 'autocannon',
    requestBody: undefined,
    responseBody: list,
  });
  for (const size of [10, 30, 100, 300, 1000]) {
    const recorder = createApiLogRecorder({ repo, writing: { maxBatch: size } });
    const calls = Math.max(20, Math.round((CALLS * 10) / size / 4));
    await measure(`log batch of ${size} reads`, calls, size, async () => {
      for (let i = 0; i < size; i++) recorder.record(entry());
      await recorder.flush();
    });
  }
} finally {
  await watcher.end();
  await bench.close();
  await bench.remove();
}
