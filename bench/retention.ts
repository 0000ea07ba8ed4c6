// Retention beside the work it must not hold up: webhook deliveries per second drained from the outbox, once
// alone and once while the pruner deletes a large backlog of old events as the workers do (their batch size
// and duty cycle), in one run.
// The aim: with pruning, at least 0.8 of the rate without.
//
//   npm run bench:retention -- [--postgres] [--old 1000000] [--deliveries 3000]
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { systemClock } from '../src/lib/clock.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createDeliveryWorker } from '../src/modules/deliveries/deliveries.worker.ts';
import { createRetention, WORKER_DUTY_CYCLE } from '../src/modules/retention/retention.ts';
import { startBenchApp } from './app.ts';
import { seedEvents, seedInOneTransaction } from './seed.ts';
import { createWebhookRepo } from '../src/modules/webhooks/webhooks.repo.ts';
import { createRepositories } from '../src/repositories.ts';

const { values: args } = parseArgs({
  options: {
    postgres: { type: 'boolean', default: false },
    old: { type: 'string', default: '1000000' },
    deliveries: { type: 'string', default: '3000' },
  },
});
const OLD_ROWS = Number(args.old);
const DELIVERIES = Number(args.deliveries);
const DAY = 86_400_000;
const databaseUrl = args.postgres
  ? (process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test')
  : undefined;

const bench = await startBenchApp({ databaseUrl, config: { allowPrivateUrls: true } });
let received = 0;
const receiver = createServer((request, response) => {
  request.resume();
  request.on('end', () => {
    received += 1;
    response.end('ok');
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const address = receiver.address();
const port = typeof address === 'object' && address ? address.port : 0;

const created = await bench.app.inject({
  method: 'POST',
  url: '/v1/webhooks',
  headers: { authorization: `Bearer ${bench.key}`, 'content-type': 'application/json' },
  payload: { url: `http://127.0.0.1:${port}/hook`, events: ['email.delivered'] },
});
if (created.statusCode !== 201) throw new Error(`webhook: ${created.body}`);

process.stdout.write(`Seeding ${OLD_ROWS} events 40 days old (${bench.database.engine})…\n`);
// One a millisecond, from 40 days ago: older than the 30 days kept, and none waits for a delivery.
await seedInOneTransaction(bench.database, (trx) =>
  seedEvents(trx, {
    projectId: bench.projectId,
    count: OLD_ROWS,
    fromMs: Date.now() - 40 * DAY,
    spanMs: OLD_ROWS,
    batch: 1,
  }),
);

/** Fills the outbox with `count` deliveries, then times a delivery worker draining it. */
async function drain(count: number): Promise<number> {
  for (let i = 0; i < count; i++) {
    await bench.app.events.emit(bench.projectId, 'email.delivered', {
      email_id: `msg_${i}`,
      recipient: 'a@b.c',
    });
  }
  const target = received + count;
  const worker = createDeliveryWorker({
    database: bench.database,
    webhooks: createWebhookRepo(bench.database.db),
    clock: systemClock,
    secretBox: createSecretBox(randomBytes(32)),
    resolver: async () => [],
    allowPrivateUrls: true,
    settings: {
      timeoutMs: 5000,
      schedule: [0, 1000],
      jitter: 0,
      concurrency: 64,
      concurrencyPerEndpoint: 16,
      disableAfterMs: DAY,
    },
  });
  const started = performance.now();
  await worker.start();
  while (received < target) await new Promise((resolve) => setTimeout(resolve, 5));
  const seconds = (performance.now() - started) / 1000;
  await worker.stop();
  return count / seconds;
}

await drain(200); // warm-up: JIT, connections
const alone = await drain(DELIVERIES);

const retention = createRetention({
  repositories: createRepositories(bench.database),
  clock: systemClock,
  retentionMs: 30 * DAY,
});
const pruning = retention.prune({ dutyCycle: WORKER_DUTY_CYCLE });
const beside = await drain(DELIVERIES);
// The pruner goes on for as long as the backlog lasts; the measurement is the drain beside it.
await retention.stop();
await pruning;
const left = (await retention.dryRun()).find((t) => t.table === 'events')!.rows;
const pruned = OLD_ROWS - left;
process.stdout.write(
  [
    '',
    `| engine | old events | deliveries/s alone | deliveries/s while pruning | ratio (aim ≥ 0.8) | old events pruned meanwhile |`,
    `| --- | --- | --- | --- | --- | --- |`,
    `| ${bench.database.engine} | ${OLD_ROWS} | ${alone.toFixed(0)} | ${beside.toFixed(0)} | ${(beside / alone).toFixed(2)} | ${pruned} |`,
    '',
  ].join('\n'),
);

await new Promise<void>((resolve) => receiver.close(() => resolve()));
await bench.close();
await bench.remove();
process.exit(0);
