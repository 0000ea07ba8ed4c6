// The CPU the API logs add to each keyed request (issue 39): the hook's push onto the buffer, then, when the
// buffer is written, the excerpts of both bodies and the multi-row INSERT, per request, on this machine and
// engine. In-process and measured in CPU time (process.cpuUsage), so other work sharing the machine skews it
// less than a throughput figure; `npm run bench:api` shows the same cost in a whole request, with its noise.
//
//   node bench/api-logs.ts                      # SQLite in a temporary directory
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/api-logs.ts
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openDatabase } from '../src/db/connection.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { newId } from '../src/lib/ids.ts';
import { type ApiLogEntry, createApiLogRecorder } from '../src/modules/logs/log-recorder.ts';
import { createApiLogRepo } from '../src/modules/logs/logs.repo.ts';
import { benchSchemaName, emailMessage } from './shared.ts';

const REQUESTS = 20_000;
const dir = mkdtempSync(path.join(os.tmpdir(), 'postwire-api-logs-'));
const url = process.env.DATABASE_URL;
const database = await openDatabase(
  url ? { url, schema: benchSchemaName('bench_api_logs') } : { sqlitePath: path.join(dir, 'bench.db') },
);
try {
  await migrateToLatest(database.db);
  const projectId = newId('proj');
  await database.db
    .insertInto('projects')
    .values({ id: projectId, name: 'bench', is_default: false, created_at: new Date().toISOString() })
    .execute();
  const repo = createApiLogRepo(database.db, database.engine);
  // What the accepted-send bench's requests leave: its body, and the 202's answer as serialized.
  const entry = (i: number): ApiLogEntry => ({
    projectId,
    keyId: 'key_01jdbench0000000000000000',
    method: 'POST',
    path: '/v1/emails',
    status: 202,
    durationMs: 0.4,
    at: new Date(),
    userAgent: 'autocannon',
    requestBody: emailMessage(i),
    responseBody: JSON.stringify({
      object: 'email',
      id: newId('msg'),
      status: 'queued',
      to: [`user${i}@example.org`],
    }),
  });
  const entries = Array.from({ length: REQUESTS }, (_, i) => entry(i));

  for (const round of [1, 2, 3]) {
    const recorder = createApiLogRecorder({ repo });
    const pushStart = process.cpuUsage();
    for (const one of entries) recorder.record(one);
    const push = process.cpuUsage(pushStart);
    const writeStart = process.cpuUsage();
    const wall = performance.now();
    await recorder.flush();
    const write = process.cpuUsage(writeStart);
    const perRequest = (usage: NodeJS.CpuUsage) => (usage.user + usage.system) / REQUESTS;
    console.log(
      `round ${round}, ${database.engine}: ${REQUESTS} logs; push ${perRequest(push).toFixed(2)} µs CPU a request, ` +
        `excerpts and INSERT ${perRequest(write).toFixed(1)} µs CPU a request (batches of 100; ` +
        `${((performance.now() - wall) / (REQUESTS / 100)).toFixed(1)} ms wall a batch)`,
    );
  }
} finally {
  await database.close();
  rmSync(dir, { recursive: true, force: true });
}
