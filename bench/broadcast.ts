// A broadcast to a large segment, in one run (issue 37 item 5): how fast its fan-out enqueues the copies
// (goal: 100 000 contacts within 10 s on SQLite) and with how much memory, the p99 of an unrelated
// POST /v1/emails while it runs (against the same requests before it), and the delivery rate of its copies to a
// local SMTP server against the single-send path's (the same number of POST /v1/emails sends).
//
//   npm run bench:broadcast -- [--postgres] [--contacts 100000] [--deliver 3000] [--dialect liquid|resend]
//                              [--probes on|off] [--checkpoints thread|inline]
import { parseArgs } from 'node:util';
import { SMTPServer } from 'smtp-server';
import { systemClock } from '../src/lib/clock.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { newId } from '../src/lib/ids.ts';
import { createBroadcastWorker } from '../src/modules/broadcasts/broadcasts.worker.ts';
import { createEngagementLinks } from '../src/modules/engagement/tokens.ts';
import { createSendingWorker } from '../src/modules/sending/sending.worker.ts';
import { createRelayTransport } from '../src/modules/sending/transports/relay.ts';
import { startBenchApp } from './app.ts';

const { values: args } = parseArgs({
  options: {
    postgres: { type: 'boolean', default: false },
    contacts: { type: 'string', default: '100000' },
    deliver: { type: 'string', default: '3000' },
    dialect: { type: 'string', default: 'liquid' },
    // `off`: no POST /v1/emails beside the fan-out, so its CPU time is the fan-out's own (a profile's too).
    probes: { type: 'string', default: 'on' },
    // `inline`: SQLite's log checkpointed by the commit that passes 1,000 pages, on the event loop (this
    // bench's figures before 2026-11-29, 07:00); by default from a thread, as `postwire serve` does.
    checkpoints: { type: 'string', default: 'thread' },
  },
});
const CONTACTS = Number(args.contacts);
const DELIVER = Number(args.deliver);
const PUBLIC_URL = 'https://mail.bench.test';
const databaseUrl = args.postgres
  ? (process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test')
  : undefined;

const bench = await startBenchApp({
  databaseUrl,
  config: { publicUrl: PUBLIC_URL, allowPrivateUrls: true, sendDailyLimit: 0 },
  backgroundCheckpoints: args.checkpoints !== 'inline',
});
const { db } = bench.database;
const headers = { authorization: `Bearer ${bench.key}`, 'content-type': 'application/json' };
const api = async (method: string, path: string, body?: unknown) => {
  const response = await fetch(`${bench.baseUrl}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const answer = (await response.json()) as Record<string, any>;
  if (response.status >= 300)
    throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(answer)}`);
  return answer;
};

// The audience, written straight to the tables in one transaction (what an import would leave).
process.stdout.write(`Seeding ${CONTACTS} contacts in one segment (${bench.database.engine})…\n`);
const segment = await api('POST', '/v1/segments', { name: 'Everyone' });
const now = new Date().toISOString();
await db.transaction().execute(async (trx) => {
  for (let start = 0; start < CONTACTS; start += 500) {
    const rows = Array.from({ length: Math.min(500, CONTACTS - start) }, (_, offset) => ({
      id: newId('con'),
      project_id: bench.projectId,
      email: `reader${start + offset}@bench.test`,
      first_name: `Reader${start + offset}`,
      last_name: null,
      unsubscribed: false,
      properties: '{}',
      created_at: now,
      updated_at: now,
    }));
    await trx.insertInto('contacts').values(rows).execute();
    await trx
      .insertInto('segment_contacts')
      .values(rows.map((row) => ({ segment_id: segment.id, contact_id: row.id, created_at: now })))
      .execute();
  }
});

const liquid = args.dialect === 'liquid';
const broadcast = await api('POST', '/v1/broadcasts', {
  from: 'news@bench.test',
  subject: liquid ? 'Hello {{ contact.first_name }}' : 'Hello',
  html: liquid
    ? '<p>Hi {{ contact.first_name }},</p><p>news.</p><p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'
    : '<p>Hi,</p><p>news.</p><p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>',
  text: liquid
    ? 'Hi {{ contact.first_name }}, news. {{ unsubscribe_url }}'
    : 'Hi, news. {{ unsubscribe_url }}',
  segment_id: segment.id,
});

/**
 * POST /v1/emails as an application sends them: one every 20 ms (at most 50 a second, one at a time), `count`
 * of them or until `until` says stop; each's latency in ms.
 */
async function probe(count: number, until?: () => boolean): Promise<number[]> {
  const latencies: number[] = [];
  for (let sent = 1; sent <= count && !(until?.() ?? false); sent += 1) {
    const started = performance.now();
    await api('POST', '/v1/emails', {
      from: 'app@bench.test',
      to: `user${sent}@app.test`,
      subject: 'Your code',
      text: '123456',
    });
    const took = performance.now() - started;
    latencies.push(took);
    if (took < 20) await new Promise((resolve) => setTimeout(resolve, 20 - took));
  }
  return latencies;
}
const p = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
};

let mark = performance.now();
const lap = (what: string) => {
  process.stderr.write(`${what}: ${((performance.now() - mark) / 1000).toFixed(1)} s\n`);
  mark = performance.now();
};
lap('seeded');
const before = await probe(200);
lap('probes before');

// The fan-out, with probes beside it and memory sampled.
const fanOut = createBroadcastWorker({
  database: bench.database,
  clock: systemClock,
  fanOut: bench.services.fanOut,
  notifier: bench.services.notifiers.broadcast,
  logger: {
    info: () => undefined,
    warn: () => undefined,
    error: (fields: unknown, message: string) =>
      process.stderr.write(`${message}: ${String((fields as { err?: unknown }).err)}\n`),
  } as never,
});
let peakRss = 0;
let peakHeap = 0;
const baseRss = process.memoryUsage().rss;
const sampler = setInterval(() => {
  const usage = process.memoryUsage();
  peakRss = Math.max(peakRss, usage.rss);
  peakHeap = Math.max(peakHeap, usage.heapUsed);
}, 50);
await fanOut.start();
const started = performance.now();
// CPU time of the whole process (every thread: the render pool's too, and the probes' requests): on a loaded
// machine the wall time says more about the other processes than about the fan-out.
const cpuBefore = process.cpuUsage();
// The event loop's thread alone: on an idle machine with a core for the render pool, the fan-out takes at
// least this long (the pool's renders overlap it).
const mainCpuBefore = process.threadCpuUsage();
await api('POST', `/v1/broadcasts/${broadcast.id}/send`, {});
let done = false;
const watching = (async () => {
  while (!done) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    const row = await db
      .selectFrom('broadcasts')
      .select('status')
      .where('id', '=', broadcast.id)
      .executeTakeFirst();
    if (row?.status === 'sent') done = true;
  }
})();
const during = args.probes === 'off' ? [] : await probe(Number.MAX_SAFE_INTEGER, () => done);
await watching;
const enqueueSeconds = (performance.now() - started) / 1000;
const cpuUsed = process.cpuUsage(cpuBefore);
const cpuSeconds = (cpuUsed.user + cpuUsed.system) / 1e6;
const mainCpuUsed = process.threadCpuUsage(mainCpuBefore);
const mainCpuSeconds = (mainCpuUsed.user + mainCpuUsed.system) / 1e6;
lap('fan-out');
clearInterval(sampler);
await fanOut.stop();
const copies = await db
  .selectFrom('emails')
  .select((eb) => eb.fn.countAll<number>().as('count'))
  .where('broadcast_id', '=', broadcast.id)
  .executeTakeFirstOrThrow();

// Delivery: the copies at the head of the bulk band, then as many single sends (the transactional band, claimed
// first), each to a local SMTP server that accepts everything.
// Counted apart by the recipient's domain: the copies go to bench.test, the probes and the single sends to
// app.test. The copies not yet delivered keep going out while the single sends do (in the bulk band, behind
// them): counted together, the single sends' rate would be the two's.
const received = { copies: 0, singles: 0 };
let target: { kind: keyof typeof received; count: number } | undefined;
let reached: (() => void) | undefined;
const kindOf = (address: string): keyof typeof received =>
  address.endsWith('@bench.test') ? 'copies' : 'singles';
const sink = new SMTPServer({
  logger: false,
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  onData(stream, session, callback) {
    stream.on('data', () => {});
    stream.on('end', () => {
      received[kindOf(session.envelope.rcptTo[0]?.address ?? '')] += 1;
      callback(null, 'Ok');
      if (target && received[target.kind] >= target.count) reached?.();
    });
  },
});
await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
const sinkAddress = sink.server.address();
const sinkPort = typeof sinkAddress === 'object' && sinkAddress ? sinkAddress.port : 0;
const sending = createSendingWorker({
  database: bench.database,
  clock: systemClock,
  events: bench.services.events,
  repositories: bench.services.repositories,
  transport: createRelayTransport({ url: `smtp://127.0.0.1:${sinkPort}`, connections: 8, timeoutMs: 10_000 }),
  settings: { schedule: [0, 1000], concurrency: 16, concurrencyPerHost: 16, timeoutMs: 10_000 },
  notifier: bench.services.notifiers.send,
  engagementLinks: createEngagementLinks({
    publicUrl: PUBLIC_URL,
    secretBox: createSecretBox(Buffer.alloc(32, 1)),
  }),
});
const until = (kind: keyof typeof received, count: number) =>
  new Promise<void>((resolve) => {
    target = { kind, count };
    reached = resolve;
    if (received[kind] >= count) resolve();
  });
/** The process's CPU seconds (every thread) since `from`. */
const cpuSince = (from: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(from);
  return (used.user + used.system) / 1e6;
};

// The probes' emails go first (the transactional band): they are counted before the broadcast's copies.
const probes = before.length + during.length;
await sending.start();
await until('singles', probes);
/** The next DELIVER copies to arrive: their rate and CPU per copy. */
async function copiesDelivered() {
  const from = performance.now();
  const cpu = process.cpuUsage();
  await until('copies', received.copies + DELIVER);
  return {
    rate: DELIVER / ((performance.now() - from) / 1000),
    cpuMs: (cpuSince(cpu) * 1000) / DELIVER,
  };
}
const firstCopies = await copiesDelivered();
/**
 * DELIVER single sends of `content` (POST /v1/emails/batch, 100 at a time) until all have arrived: their rate
 * and CPU per message (their acceptance included). The copies left go on beside them, behind them in the bulk
 * band: how many, and their CPU is in the figure too.
 */
let singlesSent = 0;
async function singleSends(content: Record<string, unknown>) {
  const from = performance.now();
  const cpu = process.cpuUsage();
  const copiesBefore = received.copies;
  for (let batch = 0; batch < DELIVER / 100; batch += 1) {
    await api(
      'POST',
      '/v1/emails/batch',
      Array.from({ length: 100 }, () => {
        singlesSent += 1;
        return { from: 'app@bench.test', to: `single${singlesSent}@app.test`, ...content };
      }),
    );
  }
  await until('singles', probes + singlesSent);
  const rate = DELIVER / ((performance.now() - from) / 1000);
  const beside = received.copies - copiesBefore;
  return { rate, beside, cpuMs: (cpuSince(cpu) * 1000) / (DELIVER + beside) };
}
// As an application's: short, text only. Then as a copy is: the html and text a copy has after its
// personalization, with its one-click unsubscribe (the same per-recipient link and headers).
const plain = await singleSends({ subject: 'Single', text: 'one' });
const copyLike = await singleSends({
  subject: 'Hello Reader1',
  html: '<p>Hi Reader1,</p><p>news.</p><p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>',
  text: 'Hi Reader1, news. {{ unsubscribe_url }}',
  unsubscribe: true,
});
// The copies again, after the single sends: against the first figure, what the time after the fan-out
// (its log, its tables just written) had to do with their rate.
const againCopies = await copiesDelivered();
await sending.stop();
await new Promise<void>((resolve) => sink.close(() => resolve()));

const mb = (bytes: number) => (bytes / 1048576).toFixed(0);
process.stdout.write(
  [
    `engine ${bench.database.engine}, dialect ${args.dialect}, ${CONTACTS} contacts`,
    `fan-out: ${copies.count} copies enqueued in ${enqueueSeconds.toFixed(1)} s (${Math.round(Number(copies.count) / enqueueSeconds)}/s), ${cpuSeconds.toFixed(1)} s of CPU (${mainCpuSeconds.toFixed(1)} s on the event loop's thread)`,
    `memory during the fan-out: peak RSS ${mb(peakRss)} MB (${mb(baseRss)} MB before), peak heap ${mb(peakHeap)} MB`,
    `POST /v1/emails p50/p99: before ${p(before, 0.5).toFixed(1)}/${p(before, 0.99).toFixed(1)} ms; during the fan-out ${p(during, 0.5).toFixed(1)}/${p(during, 0.99).toFixed(1)} ms (${during.length} requests)`,
    `delivery to a local SMTP server (${DELIVER} each), per second and CPU per message:`,
    `  broadcast copies ${firstCopies.rate.toFixed(0)}/s, ${firstCopies.cpuMs.toFixed(2)} ms`,
    `  single sends, text only ${plain.rate.toFixed(0)}/s, ${plain.cpuMs.toFixed(2)} ms (accepting them included; ${plain.beside} copies beside them)`,
    `  single sends as a copy is (html, text, one-click unsubscribe) ${copyLike.rate.toFixed(0)}/s, ${copyLike.cpuMs.toFixed(2)} ms (${copyLike.beside} copies beside them)`,
    `  broadcast copies again, after the single sends ${againCopies.rate.toFixed(0)}/s, ${againCopies.cpuMs.toFixed(2)} ms`,
    '',
  ].join('\n'),
);
await bench.close();
await bench.remove();
