// The server side of bench/growth.ts: the real app in a process of its own, on a fresh database it seeds
// in bulk (bench/seed.ts): first a small project, then, on the parent's word, the large history beneath it
// and the other projects beside it. Both sizes are measured against this one process.
//
//   node bench/growth-server.ts <emails> <small> <projects> <emails per other project>   (DATABASE_URL: PostgreSQL)
import { sql } from 'kysely';
import { newId } from '../src/lib/ids.ts';
import { startBenchApp } from './app.ts';
import { databaseBytes, seedEmails, seedInOneTransaction, type SeedTarget } from './seed.ts';

/** Child → parent. */
export type GrowthChildMessage =
  | { type: 'ready'; port: number; key: string; webhookId: string; emails: number; seconds: number }
  | { type: 'grown'; emails: number; seconds: number; bytes: number }
  | { type: 'cpu'; micros: number };
/** Parent → child. */
export type GrowthParentMessage = { type: 'grow' } | { type: 'cpu' } | { type: 'stop' };

/** The big project's history ends a minute ago (what the benchmark sends comes after it) and spans 20 days. */
const HISTORY_MS = 20 * 86_400_000;

const [emails, small, projects, perProject] = process.argv.slice(2).map(Number) as [
  number,
  number,
  number,
  number,
];
const send = (message: GrowthChildMessage) => process.send!(message);
const bench = await startBenchApp({
  databaseUrl: process.env.DATABASE_URL,
  schemaPrefix: 'growth',
  // No daily limit: the measured sends must all be accepted.
  deps: { sendDailyLimit: 0 },
});
const target: SeedTarget = bench.database;
const endMs = Date.now() - 60_000;
const stepMs = HISTORY_MS / emails;

const created = await bench.app.inject({
  method: 'POST',
  url: '/v1/webhooks',
  headers: { authorization: `Bearer ${bench.key}` },
  payload: {
    url: 'https://hooks.example.com/postwire/growth',
    events: ['email.sent', 'email.delivered', 'email.bounced'],
  },
});
if (created.statusCode !== 201) throw new Error(`webhook: ${created.body}`);
const webhookId = (JSON.parse(created.body) as { data: { id: string } }).data.id;

/** Emails in the database, every project's. */
async function countEmails(): Promise<number> {
  const result = await sql<{ n: string | number }>`SELECT count(*) AS n FROM emails`.execute(
    bench.database.db,
  );
  return Number(result.rows[0]!.n);
}

/** Seconds `seed` takes, in one transaction (see seedInOneTransaction). */
async function timed(seed: (trx: SeedTarget) => Promise<void>): Promise<number> {
  const started = performance.now();
  await seedInOneTransaction(target, seed);
  return (performance.now() - started) / 1000;
}

// The small size: the newest `small` emails of the history.
const smallSeconds = await timed((trx) =>
  seedEmails(trx, {
    projectId: bench.projectId,
    webhookId,
    count: small,
    fromMs: endMs - small * stepMs,
    spanMs: small * stepMs,
    batch: 1,
  }),
);

const address = bench.app.server.address();
send({
  type: 'ready',
  port: typeof address === 'object' && address ? address.port : 0,
  key: bench.key,
  webhookId,
  emails: await countEmails(),
  seconds: smallSeconds,
});

/** The rest of the big project's history, older than the small part, and the other projects beside it. */
async function grow(trx: SeedTarget): Promise<void> {
  await seedEmails(trx, {
    projectId: bench.projectId,
    webhookId,
    count: emails - small,
    fromMs: endMs - emails * stepMs,
    spanMs: (emails - small) * stepMs,
    batch: 2,
  });
  const now = new Date().toISOString();
  for (let index = 0; index < projects; index++) {
    const projectId = newId('proj');
    const otherWebhookId = newId('wh');
    await trx.db
      .insertInto('projects')
      .values({ id: projectId, name: `Other ${index}`, is_default: false, created_at: now })
      .execute();
    await trx.db
      .insertInto('webhooks')
      .values({
        id: otherWebhookId,
        project_id: projectId,
        url: `https://hooks.example.com/postwire/other/${index}`,
        enabled: true,
        events: '["email.sent","email.delivered","email.bounced"]',
        secret_sealed: null,
        created_at: now,
        updated_at: now,
      })
      .execute();
    await seedEmails(trx, {
      projectId,
      webhookId: otherWebhookId,
      count: perProject,
      fromMs: endMs - HISTORY_MS,
      spanMs: HISTORY_MS,
      batch: 3 + index,
    });
  }
}

process.on('message', (message: GrowthParentMessage) => {
  void (async () => {
    if (message.type === 'cpu') {
      const usage = process.cpuUsage();
      send({ type: 'cpu', micros: usage.user + usage.system });
    }
    if (message.type === 'grow') {
      const seconds = await timed(grow);
      const bytes = await databaseBytes(target, bench.sqliteFile);
      send({ type: 'grown', emails: await countEmails(), seconds, bytes });
    }
    if (message.type === 'stop') {
      await bench.close();
      await bench.remove();
      process.exit(0);
    }
  })().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
});
