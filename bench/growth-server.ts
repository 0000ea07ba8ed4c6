// The server side of bench/growth.ts: the real app in a process of its own, on a fresh database it seeds in
// bulk (bench/seed.ts) before it says it is ready: one project's sent mail, and other projects beside it.
//
//   node bench/growth-server.ts <emails> <other projects> <emails per other project>   (DATABASE_URL: PostgreSQL)
import { sql } from 'kysely';
import { newId } from '../src/lib/ids.ts';
import { startBenchApp } from './app.ts';
import { databaseBytes, seedEmails, seedInOneTransaction } from './seed.ts';

/** Child → parent. */
export type GrowthChildMessage = {
  type: 'ready';
  port: number;
  key: string;
  webhookId: string;
  /** Emails in the database, every project's. */
  emails: number;
  bytes: number;
  seedSeconds: number;
};
/** Parent → child. */
export type GrowthParentMessage = { type: 'stop' };

/** The project's history ends a minute ago (what the benchmark sends comes after it) and spans 20 days. */
const HISTORY_MS = 20 * 86_400_000;

const [emails, projects, perProject] = process.argv.slice(2).map(Number) as [number, number, number];
const bench = await startBenchApp({
  databaseUrl: process.env.DATABASE_URL,
  schemaPrefix: 'growth',
  // No daily limit: the measured sends must all be accepted.
  config: { sendDailyLimit: 0 },
});
const { db } = bench.database;
const created = await bench.app.inject({
  method: 'POST',
  url: '/v1/webhooks',
  headers: { authorization: `Bearer ${bench.key}` },
  payload: {
    url: 'https://hooks.example.com/postwire/growth',
    events: ['email.sent', 'email.delivered', 'email.bounced', 'email.complained'],
  },
});
if (created.statusCode !== 201) throw new Error(`webhook: ${created.body}`);
const webhookId = (JSON.parse(created.body) as { data: { id: string } }).data.id;

const endMs = Date.now() - 60_000;
const started = performance.now();
await seedInOneTransaction(bench.database, async (trx) => {
  await seedEmails(trx, {
    projectId: bench.projectId,
    webhookId,
    count: emails,
    fromMs: endMs - HISTORY_MS,
    spanMs: HISTORY_MS,
    batch: 1,
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
        events: '["email.sent","email.delivered","email.bounced","email.complained"]',
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
      batch: 2 + index,
    });
  }
});
const seedSeconds = (performance.now() - started) / 1000;
const count = await sql<{ n: string | number }>`SELECT count(*) AS n FROM emails`.execute(db);

const address = bench.app.server.address();
process.send!({
  type: 'ready',
  port: typeof address === 'object' && address ? address.port : 0,
  key: bench.key,
  webhookId,
  emails: Number(count.rows[0]!.n),
  bytes: await databaseBytes(bench.database, bench.sqliteFile),
  seedSeconds,
} satisfies GrowthChildMessage);

process.on('message', (message: GrowthParentMessage) => {
  if (message.type !== 'stop') return;
  void (async () => {
    await bench.close();
    await bench.remove();
    process.exit(0);
  })();
});
