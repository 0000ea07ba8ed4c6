// Issue 38's "Done means" as figures: direct delivery, through a real DNS server, to two mail servers on
// loopback addresses of their own (port 25, as MX hosts are): one throttling like a large provider (a cap on
// connections at once refused with `421 4.7.0 Too many concurrent SMTP connections`, a cap per minute
// answered `421 4.7.28 … rate limited`, Gmail's text) and one that takes everything.
//
//   npm run bench:shaping                               # SQLite, 3 rounds of 500 unthrottled emails
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:shaping
//   npm run bench:shaping -- --open 1000 --throttled 600 --rounds 5 --speed 10
//   npm run bench:shaping -- --open 100 --throttled 100 --rounds 1     # a smoke run
//   npm run bench:shaping -- --workers 2    # two sending workers on the database, sharing the destinations
//   npm run bench:shaping -- --workers 2 --known    # the operator set the throttled server's caps as its limits
//   npm run bench:shaping -- --workers 2 --known --mapped    # its domain's destination known from an earlier run
//
// It prints: whether every message to both arrived (once); the throttled server's connections asked for at
// once after the first deferrals, against its cap; the deferrals as a share of its messages; the messages it
// took per minute against its cap; and the unthrottled destination's delivery time for a round of emails
// alone (before and after) and beside the throttled traffic, in wall time.
//
// Time: Postwire and the throttling server read one clock that runs `--speed` times faster than the wall
// (default 10: a minute of the per-minute cap is 6 s), so the throttled destination's suspensions,
// back-offs and increases happen while the unthrottled rounds run beside them. The unthrottled delivery
// times are wall time. The attempt timeout is on the wall (AbortSignal), so leases are made long on the
// clock (30 min) and the worker's poll short (100 ms), which stand in for the defaults a faster clock would
// shorten; with several workers, WORKER_DEAD_AFTER long (×speed) too.
//
// Everything runs in this one process (the app, the worker, both mail servers, the DNS server): the same in
// every round, so the comparison holds; its absolute rates are lower than bench:send's, which has the sink
// in a process of its own.
import { parseArgs } from 'node:util';
import { DEFAULTS } from '../src/config.ts';
import { createDns } from '../src/lib/dns.ts';
import type { Clock } from '../src/lib/clock.ts';
import { createNotifier } from '../src/queue/notifier.ts';
import { createDestinationShaping } from '../src/modules/destinations/shaping.ts';
import { createSendingWorker } from '../src/modules/sending/sending.worker.ts';
import { createDirectTransport } from '../src/modules/sending/transports/direct.ts';
import { startDnsServer } from '../test/helpers/dns.ts';
import { startThrottlingServer, type ThrottlingServer } from '../test/helpers/throttling-smtp.ts';
import { startBenchApp } from './app.ts';
import { median } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    open: { type: 'string', default: '500' },
    throttled: { type: 'string', default: '600' },
    rounds: { type: 'string', default: '3' },
    workers: { type: 'string', default: '1' },
    known: { type: 'boolean', default: false },
    mapped: { type: 'boolean', default: false },
    speed: { type: 'string', default: '10' },
    connections: { type: 'string', default: '2' },
    'per-minute': { type: 'string', default: '100' },
    'throttled-address': { type: 'string', default: '127.0.0.2' },
    'open-address': { type: 'string', default: '127.0.0.3' },
  },
});
const OPEN = Number(args.open);
const THROTTLED = Number(args.throttled);
const ROUNDS = Number(args.rounds);
const WORKERS = Number(args.workers);
const SPEED = Number(args.speed);
const CAP = { connections: Number(args.connections), perMinute: Number(args['per-minute']) };
const BATCH = 100;
const MINUTE = 60_000;

// The clock both sides read: the wall, `SPEED` times faster, from a fixed start.
const wallStart = performance.now();
const clockStart = Date.parse('2026-03-02T10:00:00.000Z');
const nowMs = () => clockStart + (performance.now() - wallStart) * SPEED;
const clock: Clock = { now: () => new Date(nowMs()) };

// With bench/statement-tally.ts preloaded, each phase's statements are tallied apart (warm-up, alone, beside,
// drain, alone-after): `<STATEMENT_TALLY_FILE>.<phase>`.
const mark = (phase: string) =>
  (globalThis as { statementTallyMark?: (phase: string) => void }).statementTallyMark?.(phase);

// Arrivals wake whoever waits for a count at a server (no polling in the timed part).
const waiters = new Set<() => void>();
const arrived = () => {
  for (const waiter of [...waiters]) waiter();
};
function whenReceived(server: ThrottlingServer, count: number, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (server.received.length < count) return;
      waiters.delete(check);
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      waiters.delete(check);
      reject(
        new Error(`${server.address}: ${server.received.length} of ${count} arrived in ${timeoutMs} ms`),
      );
    }, timeoutMs);
    waiters.add(check);
    check();
  });
}

const dns = await startDnsServer();
dns.add('throttled.test', { type: 'MX', exchange: 'mx.throttled.test', priority: 10 });
dns.add('mx.throttled.test', { type: 'A', address: args['throttled-address'] });
dns.add('open.test', { type: 'MX', exchange: 'mx.open.test', priority: 10 });
dns.add('mx.open.test', { type: 'A', address: args['open-address'] });
/** When (on the clock) each message arrived at the throttled server: its intake per minute. */
const throttledArrivals: number[] = [];
const throttled = await startThrottlingServer({
  address: args['throttled-address'],
  now: nowMs,
  ...CAP,
  onReceived: () => {
    throttledArrivals.push(nowMs());
    arrived();
  },
});
const open = await startThrottlingServer({ address: args['open-address'], now: nowMs, onReceived: arrived });

const sendNotifier = createNotifier();
const databaseUrl = process.env.DATABASE_URL;
const bench = await startBenchApp({
  databaseUrl,
  // Accepted for direct delivery, as MAIL_TRANSPORT=direct accepts: the paced lanes' index (migration 0047).
  config: { sendDailyLimit: 0, mailTransport: 'direct' },
  infra: { clock, notifiers: { send: sendNotifier } },
  schemaPrefix: 'shaping',
});
// The operator knows the throttled destination's caps (an override, as PUT /v1/destinations/overrides sets):
// its limits from the start, so no refusal has to teach them.
const KNOWN = {
  pattern: 'mx.throttled.test',
  limits: { connections: CAP.connections, perMinute: CAP.perMinute },
};
if (args.known) {
  await bench.services.repositories.destinations.saveOverride(KNOWN, clock.now().toISOString());
}
// An earlier run sent to the throttled domain: the database maps it to its destination (destination_domains),
// whose row (`destinations`) it left as a first delivery writes it, with the limits of now.
if (args.mapped) {
  const at = clock.now();
  const earlier = createDestinationShaping({ overrides: args.known ? [KNOWN] : [] });
  earlier.learn('throttled.test', ['mx.throttled.test'], at.getTime());
  const { destinations } = bench.services.repositories;
  await destinations.saveDomain('throttled.test', 'mx.throttled.test', at.toISOString());
  await destinations.saveStates(earlier.takeWrites(at.getTime()));
}
const resolver = createDns({ servers: [dns.address] });
const newWorker = () =>
  createSendingWorker({
    database: bench.database,
    clock,
    events: bench.app.events,
    repositories: bench.services.repositories,
    transport: createDirectTransport({
      timeoutMs: 15_000,
      resolveMx: resolver.resolveMx,
      lookup: resolver.resolveAddresses,
      allowPrivateTargets: true,
      port: 25,
    }),
    // SEND_CONCURRENCY and SEND_CONCURRENCY_PER_HOST at their defaults (16, 4): twice the throttled cap.
    settings: {
      schedule: [0, 60_000, 300_000, 900_000],
      concurrency: 16,
      concurrencyPerHost: 4,
      timeoutMs: 15_000,
      leaseMs: 30 * MINUTE,
      pollIntervalMs: 100,
    },
    notifier: sendNotifier,
    // Several: WORKER_DEAD_AFTER's default on the wall, as the leases, so that a worker busy for a moment is
    // not taken for dead by the other (one alone: as before, the default on the clock).
    deadAfterMs: WORKERS > 1 ? SPEED * DEFAULTS.workerDeadAfterMs : undefined,
  });
// Each with its own transport (its own connections), as worker processes have.
const workers = Array.from({ length: WORKERS }, newWorker);
for (const worker of workers) await worker.start();

const headers = { authorization: `Bearer ${bench.key}`, 'content-type': 'application/json' };
async function send(domain: string, from: number, count: number): Promise<void> {
  for (let at = 0; at < count; at += BATCH) {
    const body = Array.from({ length: Math.min(BATCH, count - at) }, (_, i) => ({
      from: 'Bench <bench@example.com>',
      to: `u${from + at + i}@${domain}`,
      subject: `Receipt #${from + at + i}`,
      text: `Thanks for your order ${from + at + i}.`,
    }));
    const response = await fetch(`${bench.baseUrl}/v1/emails/batch`, {
      method: 'POST',
      headers,
      body: JSON.stringify(body),
    });
    if (response.status !== 202)
      throw new Error(`batch answered ${response.status}: ${await response.text()}`);
    await response.arrayBuffer();
  }
}

let openSent = 0;
/** One round: OPEN emails to the unthrottled destination, accepted in batches, timed to the last arrival. */
async function openRound(): Promise<number> {
  const target = open.received.length + OPEN;
  const started = performance.now();
  await send('open.test', openSent, OPEN);
  openSent += OPEN;
  await whenReceived(open, target, 120_000);
  return performance.now() - started;
}

const engine = databaseUrl ? 'postgres' : 'sqlite';
console.log(
  `${engine}: ${ROUNDS} round(s) of ${OPEN} emails to the unthrottled destination, alone and beside ` +
    `${THROTTLED} to one capped at ${CAP.connections} connections and ${CAP.perMinute}/min; clock ×${SPEED}; ` +
    `${WORKERS} sending worker(s)${args.known ? ', its caps set as its limits' : ''}` +
    `${args.mapped ? ', its domain mapped by an earlier run' : ''}`,
);

// Warm the process (JIT, schemas, the destinations learned) before anything is timed.
await send('open.test', 1_000_000, 200);
await whenReceived(open, 200, 120_000);
mark('warm-up');

const alone: number[] = [];
const beside: number[] = [];
for (let round = 0; round < ROUNDS; round += 1) alone.push(await openRound());
mark('alone');

// The throttled traffic: all of it queued first, then the unthrottled rounds beside it while it drains.
const throttledStartedAt = nowMs();
await send('throttled.test', 0, THROTTLED);
for (let round = 0; round < ROUNDS; round += 1) {
  beside.push(await openRound());
  if (throttled.received.length >= THROTTLED) {
    console.log(`(the throttled mail was all delivered by the end of round ${round + 1} beside it)`);
  }
}
const besideEndedAt = nowMs();
mark('beside');
const received = throttled.received.length;
await whenReceived(throttled, THROTTLED, 30 * MINUTE);
const drainedAt = nowMs();
mark('drain');
for (let round = 0; round < ROUNDS; round += 1) alone.push(await openRound());
mark('alone-after');

// The figures.
const unique = new Set(throttled.received);
const openUnique = new Set(open.received);
const firstDeferral = Math.min(
  throttled.refusedConnections[0] ?? Infinity,
  throttled.refusedMessages[0] ?? Infinity,
);
// "After the first deferrals": from a minute of the clock past the first one (the burst that found the caps).
const settled = firstDeferral + MINUTE;
const later = throttled.attempts.filter((attempt) => attempt.at >= settled);
const perMinute = new Map<number, number>();
for (const at of throttledArrivals)
  perMinute.set(Math.floor(at / MINUTE), (perMinute.get(Math.floor(at / MINUTE)) ?? 0) + 1);
const deferrals = throttled.refusedConnections.length + throttled.refusedMessages.length;
const minutes = (drainedAt - throttledStartedAt) / MINUTE;
const ms = (n: number) => `${n.toFixed(0)} ms`;
console.log('');
console.log(
  `all arrived: unthrottled ${openUnique.size} of ${openSent + 200} (${open.received.length - openUnique.size} twice), ` +
    `throttled ${unique.size} of ${THROTTLED} (${throttled.received.length - unique.size} twice)`,
);
console.log(
  `throttled connections asked for at once: at most ${Math.max(0, ...throttled.attempts.map((a) => a.atOnce))} ` +
    `in all, at most ${Math.max(0, ...later.map((a) => a.atOnce))} from a minute after the first deferral ` +
    `(cap ${CAP.connections}); connections refused ${throttled.refusedConnections.length}, ` +
    `${throttled.refusedConnections.filter((at) => at >= settled).length} of them after that minute`,
);
console.log(
  `deferrals: ${deferrals} for ${THROTTLED} messages (${((100 * deferrals) / THROTTLED).toFixed(1)} %): ` +
    `${throttled.refusedConnections.length} connections, ${throttled.refusedMessages.length} messages over the minute's cap`,
);
console.log(
  `throttled mail drained in ${minutes.toFixed(1)} min of the clock: ${(THROTTLED / minutes).toFixed(0)}/min ` +
    `on average against a cap of ${CAP.perMinute}/min, at most ${Math.max(0, ...perMinute.values())} in a minute ` +
    `(by minute: ${[...perMinute.values()].join(' ')}); ${received} had arrived when the rounds beside it ended ` +
    `(${((besideEndedAt - throttledStartedAt) / MINUTE).toFixed(1)} min)`,
);
const mpc = throttled.messagesPerConnection.concat(open.messagesPerConnection);
console.log(
  `messages per connection: ${(mpc.reduce((a, b) => a + b, 0) / Math.max(1, mpc.length)).toFixed(2)}`,
);
console.log(
  `unthrottled, ${OPEN} emails a round (wall): alone ${alone.map(ms).join(', ')} (median ${ms(median(alone))}); ` +
    `beside the throttled ${beside.map(ms).join(', ')} (median ${ms(median(beside))}); ` +
    `ratio beside ÷ alone ${(median(beside) / median(alone)).toFixed(2)}`,
);

for (const worker of workers) await worker.stop();
await bench.close();
await bench.remove();
await throttled.close();
await open.close();
await dns.close();
