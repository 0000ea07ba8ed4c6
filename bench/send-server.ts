// The Postwire side of bench/send.ts: the real app and a sending worker in one process (as `npm start`
// runs them), relaying to the sink with SMTP_URL, on a fresh SQLite file (or DATABASE_URL's PostgreSQL);
// with `direct` as its third argument, delivering directly instead, the sink being every domain's MX.
import { systemClock } from '../src/lib/clock.ts';
import { createNotifier } from '../src/queue/notifier.ts';
import { startBenchApp } from './app.ts';
import { createWindowProfiler } from './shared.ts';
import { createSendingWorker } from '../src/modules/sending/sending.worker.ts';
import { createRelayTransport } from '../src/modules/sending/transports/relay.ts';
import { createDirectTransport } from '../src/modules/sending/transports/direct.ts';

const [smtpPort, concurrency] = process.argv.slice(2).map(Number) as [number, number];
const direct = process.argv[4] === 'direct';
const databaseUrl = process.env.DATABASE_URL;
const sendNotifier = createNotifier();
const bench = await startBenchApp({
  databaseUrl,
  config: { sendDailyLimit: 0 },
  infra: { notifiers: { send: sendNotifier } },
});
const { app, database, key } = bench;
const worker = createSendingWorker({
  database,
  clock: systemClock,
  events: app.events,
  repositories: bench.services.repositories,
  transport: direct
    ? createDirectTransport({
        timeoutMs: 30_000,
        resolveMx: async () => [{ exchange: '127.0.0.1', priority: 10, port: smtpPort }],
        allowPrivateTargets: true,
      })
    : createRelayTransport({
        url: `smtp://127.0.0.1:${smtpPort}`,
        connections: concurrency,
        timeoutMs: 30_000,
      }),
  settings: { schedule: [0, 1000, 5000], concurrency, concurrencyPerHost: concurrency, timeoutMs: 30_000 },
  notifier: sendNotifier,
});
await worker.start();

const address = app.server.address();
process.send!({ type: 'ready', port: typeof address === 'object' && address ? address.port : 0, key });

// The parent went away (finished or gave up): nothing is left to serve.
process.on('disconnect', () => process.exit(0));

const profiler = createWindowProfiler();

process.on('message', async (message: { type: string; file?: string }) => {
  if (message.type === 'profile-start') return void (await profiler.start());
  if (message.type === 'profile-stop') {
    await profiler.stop(message.file!);
    process.send!({ type: 'profiled' });
    return;
  }
  if (message.type === 'cpu') {
    const usage = process.cpuUsage();
    process.send!({ type: 'cpu', micros: usage.user + usage.system });
    return;
  }
  if (message.type !== 'stop') return;
  await worker.stop();
  await bench.close();
  await bench.remove();
  process.exit(0);
});
