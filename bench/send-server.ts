// The Postwire side of bench/send.ts: the real app and a sending worker in one process (as `npm start`
// runs them), relaying to the sink with SMTP_URL, on a fresh SQLite file (or DATABASE_URL's PostgreSQL).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildApp } from '../src/app.ts';
import { openDatabase } from '../src/db/connection.ts';
import { migrateToLatest } from '../src/db/migrations.ts';
import { systemClock } from '../src/lib/clock.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createNotifier } from '../src/lib/notifier.ts';
import { createProjectRepo } from '../src/modules/projects/projects.repo.ts';
import { createProjectService } from '../src/modules/projects/projects.service.ts';
import { createSendingWorker } from '../src/modules/sending/sending.worker.ts';
import { createRelayTransport } from '../src/modules/sending/transports/relay.ts';

const [smtpPort, concurrency] = process.argv.slice(2).map(Number) as [number, number];
const databaseUrl = process.env.DATABASE_URL;
const dir = mkdtempSync(path.join(tmpdir(), 'postwire-bench-send-'));
const schema = `bench_${randomBytes(4).toString('hex')}`;
const database = await openDatabase(
  databaseUrl ? { url: databaseUrl, schema, poolSize: 20 } : { sqlitePath: path.join(dir, 'postwire.db') },
);
await migrateToLatest(database.db);

const sendNotifier = createNotifier();
const app = await buildApp({
  database,
  clock: systemClock,
  secretBox: createSecretBox(randomBytes(32)),
  resolver: async () => [],
  allowPrivateUrls: false,
  rateLimit: { limit: 0, windowMs: 60_000 },
  notifier: createNotifier(),
  sendNotifier,
  sendDailyLimit: 0,
});
await app.listen({ port: 0, host: '127.0.0.1' });
const worker = createSendingWorker({
  database,
  clock: systemClock,
  events: app.events,
  transport: createRelayTransport({
    url: `smtp://127.0.0.1:${smtpPort}`,
    connections: concurrency,
    timeoutMs: 30_000,
  }),
  settings: { schedule: [0, 1000, 5000], concurrency, concurrencyPerHost: concurrency, timeoutMs: 30_000 },
  notifier: sendNotifier,
});
await worker.start();

const projects = createProjectService({ repo: createProjectRepo(database.db), clock: systemClock });
const project = await projects.createProject('Bench');
const { plaintext: key } = await projects.createKey(project.id, 'bench');
const address = app.server.address();
process.send!({ type: 'ready', port: typeof address === 'object' && address ? address.port : 0, key });

process.on('message', async (message: { type: string }) => {
  if (message.type === 'cpu') {
    const usage = process.cpuUsage();
    process.send!({ type: 'cpu', micros: usage.user + usage.system });
    return;
  }
  if (message.type !== 'stop') return;
  await worker.stop();
  await app.close();
  if (databaseUrl) {
    await database.db.schema.dropSchema(schema).ifExists().cascade().execute();
  }
  await database.close();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
});
