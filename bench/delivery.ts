// Webhook deliveries per second through Postwire's delivery worker (outbox rows claimed, the secret opened,
// the body signed and POSTed, the attempt recorded) as a ratio to a bare node:http client POSTing the same
// signed bodies at the same concurrency to the same receiver; and the latency from emit to receipt at low
// load. On SQLite (a fresh temporary file) and on PostgreSQL (a fresh schema) when one is reachable.
//
//   npm run bench:delivery                          # both engines, under 3 minutes
//   npm run bench:delivery -- --rounds 3            # medians of 3 (when other work shares the machine)
//   npm run bench:delivery -- --only sqlite         # one engine (sqlite or postgres)
//   npm run bench:delivery -- --profile /tmp/prof   # CPU-profile the measured windows (worker and bare client)
//   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:delivery
//   npm run bench:delivery -- --json                # the report on stderr, the targets as JSON on stdout
//
// Method. Throughput: N events are emitted into the outbox first (nothing is running, their deliveries due a
// moment later), then one delivery worker starts; the clock runs from when they fall due (the worker is then
// running and idle, as a server's is when events come: its start is not timed) until the receiver has seen
// every delivery and the database shows every one succeeded, or for --cap seconds at most (the rate is then what had succeeded by then: the run stays
// bounded in time on a busy machine, and says "cap" when it happened). The bare client posts the very same bodies (read back from the outbox) with the same
// headers (webhook-id, webhook-timestamp, webhook-signature from the same signWithKeys, content-type,
// user-agent) at the concurrency the worker can really use: min(overall, webhooks × per endpoint).
// Latency: events emitted one at a time every 10–20 ms while a worker waits; receipt time is when the
// receiver's request handler ran, keyed by webhook-id, on a clock lined up with ours over IPC.
//
// Fairness on a small machine: the receiver runs in a child process of its own; this process runs the
// sender being measured, one at a time: the bare client or the worker (in process, as `postwire serve`
// runs it, so its CPU time is this process's). With taskset and two or more CPUs, the receiver is pinned
// to CPU 0 and this process to CPU 1, so the receiver never takes the sender's CPU (the `postwire worker`
// child of the cross-process latency run is left on both). PostgreSQL's own processes are not pinned: their CPU is
// part of the engine's cost and shows under "other cpu", with whatever else runs on the machine.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { DEFAULTS as CONFIG_DEFAULTS, loadConfig } from '../src/config.ts';
import { type DatabaseHandle, type Engine, openDatabase } from '../src/db/connection.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { inTransaction } from '../src/db/transaction.ts';
import { systemClock } from '../src/lib/clock.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { systemResolver } from '../src/lib/network-policy.ts';
import {
  createDeliveryWorker,
  defaultUserAgent,
  type DeliverySettings,
  deliverySettingsFromConfig,
  webhookPayload,
} from '../src/modules/deliveries/deliveries.worker.ts';
import { createNotifier } from '../src/queue/notifier.ts';
import type { WorkerLogger } from '../src/lib/worker-logger.ts';
import { signingKeyObject, signWithKeys } from '../src/modules/deliveries/signing.ts';
import { createEventService, type EventService } from '../src/modules/events/events.service.ts';
import { createProjectRepo } from '../src/modules/projects/projects.repo.ts';
import { createProjectService } from '../src/modules/projects/projects.service.ts';
import { createWebhookRepo } from '../src/modules/webhooks/webhooks.repo.ts';
import { createWebhookService } from '../src/modules/webhooks/webhooks.service.ts';
import type { ReceivedSample, ReceiverCommand, ReceiverReport } from './delivery-receiver.ts';
import { summarizeProfile } from './profile.ts';
import {
  type BenchReport,
  benchSchemaName,
  canPin,
  createWindowProfiler,
  findPostgres,
  humanOutput,
  type LatencyResult,
  type TargetResult,
  median,
} from './shared.ts';
import { createRepositories } from '../src/repositories.ts';
import { createDeliveryService } from '../src/modules/deliveries/deliveries.service.ts';

/** Deliveries per second, as a share of the bare client's, on both engines (issue 43: held at 0.7). */
const THROUGHPUT_AIM = 0.7;
const P99_TARGET_MS = 50;
const RECEIVER_CPU = '0';
const SENDER_CPU = '1';
/** The cross-process latency run's `postwire worker`: not pinned (see startCliWorker). */
const ALL_CPUS = '0-1';
/** The bare client's window gives up after this; a latency run after LATENCY_TIMEOUT_MS. */
const PHASE_TIMEOUT_MS = 60_000;
/** A worker starts this long before its deliveries fall due and its window opens (workerRun). */
const WORKER_START_LEAD_MS = 1500;
const LATENCY_TIMEOUT_MS = 30_000;

const { values: args } = parseArgs({
  options: {
    // Events for the 1-webhook runs, events for the fan-out runs (each to every webhook), and how many webhooks.
    events: { type: 'string', default: '5000' },
    'fanout-events': { type: 'string', default: '1000' },
    webhooks: { type: 'string', default: '10' },
    latency: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '1' },
    // `sqlite` or `postgres`.
    only: { type: 'string' },
    // A worker's throughput window ends after this many seconds even if deliveries remain (the rate is then
    // what succeeded within it), so the whole run stays within a few minutes on a slow or busy machine.
    cap: { type: 'string', default: '12' },
    // Skip the run with per-endpoint concurrency raised to the overall limit (1 webhook); or add one for the fan-out.
    'no-ceiling': { type: 'boolean', default: false },
    'fanout-ceiling': { type: 'boolean', default: false },
    // A directory: CPU profiles of the worker's measured throughput windows, summarised at the end.
    profile: { type: 'string' },
    'no-pin': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
const log = humanOutput(args.json);
const EVENTS = Number(args.events);
const FANOUT_EVENTS = Number(args['fanout-events']);
const WEBHOOKS = Number(args.webhooks);
const LATENCY_EVENTS = Number(args.latency);
/** Delivered before the latency is measured (see latency()). */
const LATENCY_WARMUP_EVENTS = 20;
const ROUNDS = Number(args.rounds);
const CAP_MS = Number(args.cap) * 1000;
if (args.only !== undefined && args.only !== 'sqlite' && args.only !== 'postgres') {
  throw new Error(`--only takes sqlite or postgres, not ${args.only}`);
}
// Bounded in count: the run is meant to take minutes, not to fill a disk.
for (const [name, value, max] of [
  ['--events', EVENTS, 50_000],
  ['--fanout-events', FANOUT_EVENTS, 10_000],
  ['--webhooks', WEBHOOKS, 64],
  ['--latency', LATENCY_EVENTS, 2000],
  ['--rounds', ROUNDS, 5],
  ['--cap', CAP_MS / 1000, 60],
] as const) {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new Error(`${name} takes a whole number from 1 to ${max}, not ${value}`);
  }
}
/** The whole run never outlives this (a safety net: the default run takes about two minutes). */
const RUN_LIMIT_MS = (120 + 120 * ROUNDS) * 1000;
/** The `postwire worker` child while one runs, so giving up does not leave it behind. */
let cliWorker: ChildProcess | undefined;
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');

setTimeout(() => {
  console.error(`bench:delivery did not finish within ${RUN_LIMIT_MS / 1000} s; giving up`);
  cliWorker?.kill('SIGKILL');
  process.exit(1);
}, RUN_LIMIT_MS).unref();

/** Wall-clock milliseconds with sub-millisecond precision (the receiver's clock is the same, up to an offset). */
const wallNow = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------------------
// CPU pinning and accounting (as bench/api.ts does it).

// Read before pinning: once pinned, availableParallelism() counts only the CPU this process may use.
const cpuCount = os.availableParallelism();
const pin = canPin(Boolean(args['no-pin']));
if (pin) execFileSync('taskset', ['-a', '-p', '-c', SENDER_CPU, String(process.pid)], { stdio: 'ignore' });

/** Machine-wide CPU ticks (Linux): with the sender's and the receiver's share known, the rest is other work. */
function machineTicks(): { busy: number; total: number } | undefined {
  if (!existsSync('/proc/stat')) return undefined;
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: total - fields[3]! - fields[4]!, total };
}

// ---------------------------------------------------------------------------------------------------------
// The receiver child.

interface Receiver {
  port: number;
  send(command: ReceiverCommand): void;
  /** The next report of a type; undefined if none comes within `timeoutMs`. */
  next<T extends ReceiverReport['type']>(
    type: T,
    timeoutMs?: number,
  ): Promise<Extract<ReceiverReport, { type: T }> | undefined>;
  cpuMicros(): Promise<number>;
  /** Receiver clock minus ours, from the quickest of a few IPC round trips. */
  clockOffset(): Promise<number>;
  stop(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const file = path.join(here, 'delivery-receiver.ts');
  const options = { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] as ('ignore' | 'inherit' | 'ipc')[] };
  const child = pin
    ? spawn('taskset', ['-c', RECEIVER_CPU, process.execPath, file], options)
    : spawn(process.execPath, [file], options);
  const next = <T extends ReceiverReport['type']>(type: T, timeoutMs = 10_000) =>
    new Promise<Extract<ReceiverReport, { type: T }> | undefined>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        child.off('message', onMessage);
        child.off('exit', onExit);
      };
      const onMessage = (report: ReceiverReport) => {
        if (report.type !== type) return;
        done();
        resolve(report as Extract<ReceiverReport, { type: T }>);
      };
      const onExit = (code: number | null) => {
        done();
        reject(new Error(`the receiver exited (${code})`));
      };
      const timer = setTimeout(() => {
        done();
        resolve(undefined);
      }, timeoutMs);
      child.on('message', onMessage);
      child.once('exit', onExit);
    });
  const ready = await next('ready');
  if (!ready) throw new Error('the receiver did not start');
  const send = (command: ReceiverCommand) => child.send(command);
  return {
    port: ready.port,
    send,
    next,
    async cpuMicros() {
      const answer = next('cpu');
      send({ type: 'cpu' });
      return (await answer)!.micros;
    },
    async clockOffset() {
      let best = { rtt: Infinity, offset: 0 };
      for (let i = 0; i < 10; i += 1) {
        const answer = next('clock');
        const sent = wallNow();
        send({ type: 'clock' });
        const { now } = (await answer)!;
        const back = wallNow();
        if (back - sent < best.rtt) best = { rtt: back - sent, offset: now - (sent + back) / 2 };
      }
      return best.offset;
    },
    async stop() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      send({ type: 'stop' });
      await exited;
    },
  };
}

// ---------------------------------------------------------------------------------------------------------
// Databases.

interface BenchDatabase {
  engine: Engine;
  handle: DatabaseHandle;
  /** What a `postwire worker` child needs to open the same database. */
  env: Record<string, string>;
  drop(): Promise<void>;
}

async function openBenchDatabase(engine: Engine, url?: string): Promise<BenchDatabase> {
  if (engine === 'postgres') {
    const schema = benchSchemaName();
    // The pool size `postwire serve` and `postwire worker` use (openConfiguredDatabase's default), and their
    // statistics kept up with the tables' growth.
    const handle = await openDatabase({ url: url!, schema, keepStatistics: true });
    await migrateToLatest(handle.db);
    const separator = url!.includes('?') ? '&' : '?';
    return {
      engine,
      handle,
      env: { DATABASE_URL: `${url}${separator}options=${encodeURIComponent(`-c search_path=${schema}`)}` },
      async drop() {
        await sql.raw(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).execute(handle.db);
        await handle.close();
      },
    };
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'postwire-bench-delivery-'));
  // Checkpoints on a thread of their own, as every Postwire process opens the file (openConfiguredDatabase):
  // inline, the commit that passes 1,000 pages of log copies them into the file and fsyncs it on the worker's
  // event loop. The thread's CPU is this process's, so it still counts in the worker's.
  const handle = await openDatabase({
    sqlitePath: path.join(dir, 'postwire.db'),
    backgroundCheckpoints: true,
  });
  await migrateToLatest(handle.db);
  return {
    engine,
    handle,
    env: { POSTWIRE_DATA_DIR: dir },
    async drop() {
      await handle.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------------------------------------------------
// Projects, webhooks and the outbox.

const DEFAULTS: DeliverySettings = deliverySettingsFromConfig(loadConfig({}));
const USER_AGENT = defaultUserAgent();
const ENCRYPTION_KEY = randomBytes(32);
const secretBox = createSecretBox(ENCRYPTION_KEY);
const SECRET = `whsec_${randomBytes(24).toString('base64')}`;
// The bare client makes its HMAC key once, as the worker does (it keeps keys by webhook secret).
const SECRET_KEY = signingKeyObject(SECRET);
const notifier = createNotifier();

interface Setup {
  database: BenchDatabase;
  events: EventService;
  receiver: Receiver;
}

/** A project of its own with `count` webhooks on the receiver, all subscribed to email.delivered. */
async function createProject(setup: Setup, label: string, count: number): Promise<string> {
  const { db } = setup.database.handle;
  const project = await createProjectService({
    db: db,
    repo: createProjectRepo(db),
    clock: systemClock,
  }).createProject(`bench ${label}`);
  const webhooks = createWebhookService({
    repo: createWebhookRepo(db),
    clock: systemClock,
    secretBox,
    resolver: systemResolver,
    allowPrivateUrls: true,
    secretRotationWindowMs: CONFIG_DEFAULTS.webhookSecretRotationWindowMs,
  });
  for (let i = 0; i < count; i += 1) {
    const record = await webhooks.prepareCreate(project.id, {
      url: `http://127.0.0.1:${setup.receiver.port}/hooks/${label}/${i}`,
      events: ['email.delivered'],
      secret: SECRET,
    });
    await inTransaction(db, (transaction) => webhooks.create(transaction, record));
  }
  return project.id;
}

/** A typical event: what an email.delivered carries. */
const eventData = (i: number) => ({
  email_id: `msg_bench${String(i).padStart(8, '0')}`,
  from: 'Acme Receipts <receipts@acme.example>',
  to: [`user${i}@example.org`],
  subject: `Your receipt #${i}`,
  tags: { category: 'receipt' },
});

/** Runs `count` tasks with at most `limit` at once. */
async function pool(count: number, limit: number, task: (index: number) => Promise<void>): Promise<void> {
  let nextIndex = 0;
  const runners = Array.from({ length: Math.min(limit, count) }, async () => {
    while (nextIndex < count) await task(nextIndex++);
  });
  await Promise.all(runners);
}

async function fillOutbox(setup: Setup, projectId: string, count: number): Promise<void> {
  // Emits are independent transactions; on PostgreSQL a few at once fill the outbox sooner.
  const parallel = setup.database.engine === 'postgres' ? 8 : 1;
  await pool(count, parallel, async (i) => {
    await setup.events.emit(projectId, 'email.delivered', eventData(i));
  });
}

interface Outgoing {
  url: URL;
  id: string;
  body: string;
}

/** The project's pending deliveries as the worker will send them: url, webhook-id and the exact body. */
async function readOutbox(setup: Setup, projectId: string): Promise<Outgoing[]> {
  const rows = await setup.database.handle.db
    .selectFrom('deliveries as d')
    .innerJoin('events as e', 'e.id', 'd.event_id')
    .innerJoin('webhooks as w', 'w.id', 'd.webhook_id')
    .select(['e.id', 'e.type', 'e.data', 'e.created_at', 'w.url'])
    .where('d.project_id', '=', projectId)
    .where('d.status', '=', 'pending')
    .orderBy('d.id')
    .execute();
  return rows.map((row) => ({
    url: new URL(row.url),
    id: row.id,
    body: webhookPayload({
      eventId: row.id,
      eventType: row.type,
      eventCreatedAt: row.created_at,
      eventData: row.data,
    }),
  }));
}

async function deliveryCounts(setup: Setup, projectId: string) {
  const { db } = setup.database.handle;
  const succeeded = await db
    .selectFrom('deliveries')
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .where('project_id', '=', projectId)
    .where('status', '=', 'succeeded')
    .executeTakeFirstOrThrow();
  // The attempts in the log, and those the deliveries' rows keep (each row its latest: migration 0020).
  const logged = await db
    .selectFrom('delivery_attempts')
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .where('project_id', '=', projectId)
    .executeTakeFirstOrThrow();
  const kept = await db
    .selectFrom('deliveries')
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .where('project_id', '=', projectId)
    .where('last_attempt_id', 'is not', null)
    .executeTakeFirstOrThrow();
  return { succeeded: Number(succeeded.n), attempts: Number(logged.n) + Number(kept.n) };
}

/**
 * Deliveries still pending in the whole database: the due index answers it from pending rows alone, so it is
 * cheap to poll while the worker runs. Earlier runs leave none pending, so these are the current run's.
 */
async function pendingCount(setup: Setup): Promise<number> {
  const row = await setup.database.handle.db
    .selectFrom('deliveries')
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .where('status', '=', 'pending')
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** What the workers logged as warnings and errors (a failed outcome write, say): shown after the tables. */
const workerProblems = new Map<string, number>();
const workerLogger: WorkerLogger = {
  info() {},
  warn(object, message) {
    const error = (object as { err?: unknown }).err;
    const key = `${message}${error ? `: ${String(error)}` : ''}`;
    workerProblems.set(key, (workerProblems.get(key) ?? 0) + 1);
  },
  error(object, message) {
    workerLogger.warn(object, message);
  },
};

// ---------------------------------------------------------------------------------------------------------
// Measuring a throughput window.

interface Row {
  engine: Engine;
  run: string;
  target: string | undefined;
  sender: 'bare' | 'worker';
  concurrency: number;
  /** Deliveries in the outbox (bare: requests to make). */
  deliveries: number;
  /** Deliveries done within the window: all of them, unless the worker's run was capped. */
  delivered: number;
  /** From the start to every delivery done (bare: every response back; worker: every row succeeded). */
  seconds: number;
  /** Requests per second the receiver saw, from the start to its last request (or to the cap). */
  receivedRate: number;
  /** The most connections the receiver had open at once: the concurrency the sender really reached. */
  peakConnections: number;
  senderCpu: number;
  senderMicros: number;
  receiverCpu: number;
  otherCpu: number;
  /** Requests that did not go as expected: duplicated, retried, not 2xx, or missing after an uncapped run. */
  bad: number;
  capped: boolean;
  sample: ReceivedSample | null;
}

type WindowFigures = Omit<
  Row,
  'engine' | 'run' | 'target' | 'sender' | 'concurrency' | 'deliveries' | 'bad' | 'sample'
>;

/**
 * Runs `start` with the receiver expecting `target` requests; once they have arrived (or `capMs` has passed),
 * `finish` says when every delivery was done and how many were. Accounts the CPU of both sides and of the
 * machine meanwhile.
 */
async function window(
  receiver: Receiver,
  target: number,
  capMs: number,
  start: () => Promise<unknown>,
  finish: (reached: boolean) => Promise<{ at: number; delivered: number }>,
  opensAt?: number,
): Promise<WindowFigures & { count: number; distinct: number; sample: ReceivedSample | null }> {
  // The previous sender's connections are closed by now, so the peak counts this sender's only.
  await sleep(100);
  receiver.send({ type: 'phase', target, record: false });
  const offset = await receiver.clockOffset();
  const receiverBefore = await receiver.cpuMicros();
  const reached = receiver.next('reached', capMs);
  // A worker already running: the window opens when its deliveries fall due (workerRun).
  if (opensAt !== undefined) await sleep(Math.max(0, opensAt - wallNow()));
  const senderBefore = process.cpuUsage();
  const machineBefore = machineTicks();
  const startedAt = wallNow();
  await start();
  const arrival = await reached;
  const done = await finish(arrival !== undefined);
  const endedAt = wallNow();
  const sender = process.cpuUsage(senderBefore);
  const machineAfter = machineTicks();
  const receiverMicros = (await receiver.cpuMicros()) - receiverBefore;
  const collectedAnswer = receiver.next('collected');
  receiver.send({ type: 'collect' });
  const collected = (await collectedAnswer)!;

  const wallMicros = (endedAt - startedAt) * 1000;
  const senderCpu = (sender.user + sender.system) / wallMicros;
  const receiverCpu = receiverMicros / wallMicros;
  const machineCpu =
    machineBefore && machineAfter
      ? ((machineAfter.busy - machineBefore.busy) / (machineAfter.total - machineBefore.total)) * cpuCount
      : Number.NaN;
  const receivedSeconds = ((arrival ? arrival.at - offset : done.at) - startedAt) / 1000;
  return {
    delivered: done.delivered,
    seconds: (done.at - startedAt) / 1000,
    receivedRate: collected.count / receivedSeconds,
    peakConnections: collected.peakConnections,
    senderCpu,
    senderMicros: (sender.user + sender.system) / Math.max(1, collected.count),
    receiverCpu,
    otherCpu: Math.max(0, machineCpu - senderCpu - receiverCpu),
    capped: !arrival,
    count: collected.count,
    distinct: collected.distinct,
    sample: collected.sample,
  };
}

/** The bare client: node:http with a keep-alive agent, the same signed requests, `concurrency` at once. */
async function bareRun(receiver: Receiver, items: Outgoing[], concurrency: number, label: string) {
  const agent = new http.Agent({ keepAlive: true });
  let answered = 0;
  let failures = 0;
  const post = (item: Outgoing) =>
    new Promise<void>((resolve) => {
      const timestamp = Math.floor(Date.now() / 1000);
      const request = http.request(
        {
          host: item.url.hostname,
          port: item.url.port,
          path: item.url.pathname,
          method: 'POST',
          agent,
          headers: {
            'content-type': 'application/json',
            'user-agent': USER_AGENT,
            'webhook-id': item.id,
            'webhook-timestamp': String(timestamp),
            'webhook-signature': signWithKeys([SECRET_KEY], item.id, timestamp, item.body),
            'content-length': String(Buffer.byteLength(item.body)),
          },
        },
        (response) => {
          if (response.statusCode === 204) answered += 1;
          else failures += 1;
          response.resume();
          response.on('end', resolve);
        },
      );
      request.on('error', () => {
        failures += 1;
        resolve();
      });
      request.end(item.body);
    });
  let all: Promise<number> | undefined;
  // Profiled as the worker is (--profile), so that the two can be compared function by function.
  const profileFile = profileFileFor(`${label}-bare`);
  if (profileFile) await profiler.start();
  const figures = await window(
    receiver,
    items.length,
    PHASE_TIMEOUT_MS,
    async () => {
      all = pool(items.length, concurrency, (i) => post(items[i]!)).then(() => wallNow());
    },
    async () => ({ at: await all!, delivered: answered }),
  );
  if (profileFile) await stopProfiler(profileFile);
  agent.destroy();
  const bad = failures + (items.length - figures.distinct) + (figures.count - figures.distinct);
  return { ...figures, capped: false, bad };
}

const profiler = createWindowProfiler();
const profiles: string[] = [];
if (args.profile) mkdirSync(args.profile, { recursive: true });
/** Where a measured window's profile goes (--profile); the warm-ups are not profiled. */
const profileFileFor = (label: string) =>
  // A warm-up's profile would show start-up (JIT, first connections), not the engine.
  args.profile && !label.includes('warmup') ? path.join(args.profile, `${label}.cpuprofile`) : undefined;
async function stopProfiler(file: string): Promise<void> {
  await profiler.stop(file);
  profiles.push(file);
}

/**
 * One delivery worker on the filled outbox, timed until every delivery has succeeded in the database, or
 * for CAP_MS at most (the rate is then what succeeded within the cap).
 */
async function workerRun(setup: Setup, projectId: string, count: number, perEndpoint: number, label: string) {
  const worker = createDeliveryWorker({
    database: setup.database.handle,
    webhooks: createWebhookRepo(setup.database.handle.db),
    clock: systemClock,
    secretBox,
    resolver: systemResolver,
    allowPrivateUrls: true,
    settings: { ...DEFAULTS, concurrencyPerEndpoint: perEndpoint },
    notifier,
    logger: workerLogger,
  });
  // The worker is running when the window opens, as `postwire serve`'s is when events come: its start (its
  // pool's first connections, LISTEN and the heartbeat on PostgreSQL, its first look finding nothing due) is
  // not a cost of the deliveries, and the bare client has none. So the outbox's deliveries fall due a moment
  // after the worker has started, and the window opens then; the bare client's opens at its first request.
  const dueAt = wallNow() + WORKER_START_LEAD_MS;
  await setup.database.handle.db
    .updateTable('deliveries')
    .set({ next_attempt_at: new Date(dueAt).toISOString() })
    .where('project_id', '=', projectId)
    .where('status', '=', 'pending')
    .execute();
  await worker.start();
  if (wallNow() > dueAt - 100) log(`  (the worker took over ${WORKER_START_LEAD_MS - 100} ms to start)`);
  const profileFile = profileFileFor(label);
  if (profileFile) await profiler.start();
  const figures = await window(
    setup.receiver,
    count,
    CAP_MS,
    async () => undefined,
    async (reached) => {
      if (!reached) {
        const { succeeded } = await deliveryCounts(setup, projectId);
        return { at: wallNow(), delivered: succeeded };
      }
      // The receiver has seen everything; each outcome is written right after its response. (On SQLite each
      // poll runs on the worker's own thread, so it polls a cheap query, only for this short tail.)
      const deadline = performance.now() + 10_000;
      for (;;) {
        const pending = await pendingCount(setup);
        if (pending === 0 || performance.now() > deadline)
          return { at: wallNow(), delivered: count - pending };
        await sleep(5);
      }
    },
    dueAt,
  );
  if (profileFile) await stopProfiler(profileFile);
  await worker.stop();
  const { succeeded, attempts } = await deliveryCounts(setup, projectId);
  const missing = figures.capped ? 0 : count - succeeded;
  const bad = missing + (attempts - succeeded) + (figures.count - figures.distinct);
  // What a capped run left must not be delivered in the next window (by the next worker) and count there.
  await setup.database.handle.db
    .deleteFrom('deliveries')
    .where('project_id', '=', projectId)
    .where('status', '=', 'pending')
    .execute();
  return { ...figures, bad };
}

interface Scenario {
  name: string;
  /** The name of the target (issue 12) this run measures, if it is one. */
  target?: string;
  webhooks: number;
  events: number;
  perEndpoint: number;
}

async function throughput(setup: Setup, scenario: Scenario, label: string): Promise<Row[]> {
  const projectId = await createProject(setup, label, scenario.webhooks);
  await fillOutbox(setup, projectId, scenario.events);
  const items = await readOutbox(setup, projectId);
  const deliveries = scenario.webhooks * scenario.events;
  if (items.length !== deliveries)
    throw new Error(`expected ${deliveries} deliveries, found ${items.length}`);
  // What the worker can really have in flight: per endpoint × webhooks, within the overall limit.
  const concurrency = Math.min(DEFAULTS.concurrency, scenario.webhooks * scenario.perEndpoint);
  const base = {
    engine: setup.database.engine,
    run: scenario.name,
    target: scenario.target,
    concurrency,
    deliveries,
  };
  const bare = await bareRun(setup.receiver, items, concurrency, `${setup.database.engine}-${label}`);
  const engine = await workerRun(
    setup,
    projectId,
    deliveries,
    scenario.perEndpoint,
    `${setup.database.engine}-${label}`,
  );
  return [
    { ...base, sender: 'bare', ...bare },
    { ...base, sender: 'worker', ...engine },
  ];
}

// ---------------------------------------------------------------------------------------------------------
// Latency at low load.

interface LatencyRow {
  engine: Engine;
  worker: string;
  events: number;
  received: number;
  emitP50: number;
  p50: number;
  p99: number;
  max: number;
}

const percentile = (sorted: number[], p: number) =>
  sorted.length === 0
    ? Number.NaN
    : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;

/** `postwire worker` in a child process on the same database; resolves once it has said it started. */
async function startCliWorker(database: BenchDatabase): Promise<ChildProcess> {
  // On every CPU, as a worker process of its own would run: the pin this process inherits would have it
  // share one CPU with this process, whose pauses (a collection of the heap the throughput runs left) then
  // held the worker's deliveries back by tens of milliseconds.
  const command = pin ? ['taskset', '-c', ALL_CPUS, process.execPath] : [process.execPath];
  const child = spawn(command[0]!, [...command.slice(1), path.join(root, 'src', 'cli.ts'), 'worker'], {
    cwd: root,
    env: {
      ...process.env,
      ...database.env,
      POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
      POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY.toString('hex'),
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`postwire worker did not start:\n${output}`));
    }, 20_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (output.includes('Postwire worker started')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`postwire worker exited (${code}):\n${output}`));
    });
  });
  // Its log is pino's JSON lines: warnings and errors are reported with the in-process worker's.
  let partial = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n');
    partial = lines.pop()!;
    for (const line of lines) {
      try {
        const entry = JSON.parse(line) as { level?: number; msg?: string; err?: { message?: string } };
        if ((entry.level ?? 0) >= 40) {
          workerLogger.warn({ err: entry.err?.message }, `postwire worker: ${entry.msg ?? line}`);
        }
      } catch {
        // Not a log line.
      }
    }
  });
  return child;
}

async function latency(setup: Setup, mode: 'in-process' | 'separate process'): Promise<LatencyRow> {
  const projectId = await createProject(setup, `latency-${mode === 'in-process' ? 'in' : 'out'}`, 1);
  let stopWorker: () => Promise<void>;
  if (mode === 'in-process') {
    const worker = createDeliveryWorker({
      database: setup.database.handle,
      webhooks: createWebhookRepo(setup.database.handle.db),
      clock: systemClock,
      secretBox,
      resolver: systemResolver,
      allowPrivateUrls: true,
      settings: DEFAULTS,
      notifier,
      logger: workerLogger,
    });
    await worker.start();
    stopWorker = () => worker.stop();
  } else {
    const child = await startCliWorker(setup.database);
    cliWorker = child;
    stopWorker = async () => {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
      cliWorker = undefined;
    };
  }
  try {
    const { receiver } = setup;
    // Warm-up, not measured: a fresh `postwire worker` opens its pool's connections and compiles its code on
    // its first deliveries (the first two took 30–45 ms), which the in-process worker did during the
    // throughput runs. Both are measured warm.
    receiver.send({ type: 'phase', target: LATENCY_WARMUP_EVENTS, record: false });
    const warm = receiver.next('reached', LATENCY_TIMEOUT_MS);
    for (let i = 0; i < LATENCY_WARMUP_EVENTS; i += 1) {
      await setup.events.emit(projectId, 'email.delivered', eventData(i));
      await sleep(10);
    }
    await warm;
    const offset = await receiver.clockOffset();
    receiver.send({ type: 'phase', target: LATENCY_EVENTS, record: true });
    const reached = receiver.next('reached', LATENCY_TIMEOUT_MS);
    const emittedAt = new Map<string, number>();
    const emitMs: number[] = [];
    const deadline = performance.now() + LATENCY_TIMEOUT_MS;
    for (let i = 0; i < LATENCY_EVENTS && performance.now() < deadline; i += 1) {
      const at = wallNow();
      const event = await setup.events.emit(projectId, 'email.delivered', eventData(i));
      emittedAt.set(event.id, at);
      emitMs.push(wallNow() - at);
      // One event every 10–20 ms, spread evenly over the range.
      await sleep(10 + ((i * 7) % 11));
    }
    await reached;
    const answer = receiver.next('collected');
    receiver.send({ type: 'collect' });
    const collected = (await answer)!;
    const latencies = collected.arrivals
      .filter(([id]) => emittedAt.has(id))
      .map(([id, at]) => at - offset - emittedAt.get(id)!)
      .sort((a, b) => a - b);
    emitMs.sort((a, b) => a - b);
    return {
      engine: setup.database.engine,
      worker: mode === 'in-process' ? 'in-process (notifier)' : 'postwire worker (LISTEN/NOTIFY)',
      events: emittedAt.size,
      received: latencies.length,
      emitP50: percentile(emitMs, 50),
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: latencies.at(-1) ?? Number.NaN,
    };
  } finally {
    await stopWorker();
  }
}

// ---------------------------------------------------------------------------------------------------------
// One engine.

/** Both senders must send the same header names, and both signatures must verify with standardwebhooks. */
function checkSamples(bare: ReceivedSample | null, worker: ReceivedSample | null): string {
  if (!bare || !worker) return 'no sample to compare';
  const names = (sample: ReceivedSample) => Object.keys(sample.headers).sort().join(',');
  const problems: string[] = [];
  if (names(bare) !== names(worker))
    problems.push(`headers differ: bare ${names(bare)} / worker ${names(worker)}`);
  for (const [who, sample] of [
    ['bare', bare],
    ['worker', worker],
  ] as const) {
    try {
      new Webhook(SECRET.slice('whsec_'.length)).verify(sample.body, sample.headers);
    } catch (error) {
      problems.push(`${who} signature does not verify (${String(error)})`);
    }
  }
  return problems.length
    ? problems.join('; ')
    : `same headers (${names(worker)}), both signatures verify with standardwebhooks`;
}

async function runEngine(engine: Engine, receiver: Receiver, url?: string) {
  const database = await openBenchDatabase(engine, url);
  const repositories = createRepositories(database.handle);
  const setup: Setup = {
    database,
    receiver,
    events: createEventService({
      db: database.handle.db,
      engine,
      clock: systemClock,
      notifier,
      repo: repositories.events,
      deliveryRepo: repositories.deliveries,
      deliveries: createDeliveryService({ repo: repositories.deliveries, engine, notifier }),
      webhooks: repositories.webhooks,
      stats: repositories.stats,
    }),
  };
  const per = DEFAULTS.concurrencyPerEndpoint;
  const ceiling = DEFAULTS.concurrency;
  const scenarios: Scenario[] = [
    {
      name: `1 webhook, ${DEFAULTS.concurrency}/${per}`,
      target: 'webhook deliveries (1 webhook)',
      webhooks: 1,
      events: EVENTS,
      perEndpoint: per,
    },
    {
      name: `${WEBHOOKS} webhooks fan-out, ${DEFAULTS.concurrency}/${per}`,
      target: `webhook deliveries (${WEBHOOKS} webhooks fan-out)`,
      webhooks: WEBHOOKS,
      events: FANOUT_EVENTS,
      perEndpoint: per,
    },
  ];
  // The engine's ceiling: per-endpoint concurrency raised to the overall limit, so one webhook can use it all.
  if (!args['no-ceiling']) {
    scenarios.push({
      name: `1 webhook, ${ceiling}/${ceiling} (ceiling)`,
      webhooks: 1,
      events: EVENTS,
      perEndpoint: ceiling,
    });
  }
  if (args['fanout-ceiling']) {
    scenarios.push({
      name: `${WEBHOOKS} webhooks fan-out, ${ceiling}/${ceiling} (ceiling)`,
      webhooks: WEBHOOKS,
      events: FANOUT_EVENTS,
      perEndpoint: ceiling,
    });
  }
  try {
    // Warm-up (not reported): JIT, prepared statements and connection pools on both sides. Every scenario
    // once at half its size: with a single short warm-up the bare client went on speeding up over the
    // rounds (fan-out 12.4k/s in round 1, 22.7k/s in round 2) while the worker had already settled, so
    // round 1's ratios flattered the worker.
    for (const [index, scenario] of scenarios.entries()) {
      await throughput(setup, { ...scenario, events: Math.ceil(scenario.events / 2) }, `s${index}-warmup`);
    }

    const rounds: Row[][] = [];
    let check = '';
    for (let round = 0; round < ROUNDS; round += 1) {
      const rows: Row[] = [];
      for (const [index, scenario] of scenarios.entries()) {
        const [bare, worker] = await throughput(setup, scenario, `r${round}s${index}`);
        rows.push(bare!, worker!);
        if (!check) check = checkSamples(bare!.sample, worker!.sample);
        log(
          `  ${engine} ${scenario.name}: bare ${rate(bare!).toFixed(0)}/s, worker ${rate(worker!).toFixed(0)}/s` +
            `${ROUNDS > 1 ? ` (round ${round + 1})` : ''}`,
        );
      }
      rounds.push(rows);
    }
    const latencies = [await latency(setup, 'in-process')];
    if (engine === 'postgres') latencies.push(await latency(setup, 'separate process'));
    for (const row of latencies) {
      log(`  ${engine} latency, ${row.worker}: p50 ${ms(row.p50)} ms, p99 ${ms(row.p99)} ms`);
    }
    return { rows: medianRows(rounds), latencies, check };
  } finally {
    await database.drop();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Output.

const rate = (row: Row) => row.delivered / row.seconds;
const ms = (n: number) => (Number.isNaN(n) ? '-' : n < 10 ? n.toFixed(1) : n.toFixed(0));

function medianRows(rounds: Row[][]): Row[] {
  return rounds[0]!.map((row, i) => {
    const all = rounds.map((rows) => rows[i]!);
    const of = (field: keyof WindowFigures) => median(all.map((r) => Number(r[field])));
    return {
      ...row,
      delivered: of('delivered'),
      seconds: of('seconds'),
      receivedRate: of('receivedRate'),
      peakConnections: of('peakConnections'),
      senderCpu: of('senderCpu'),
      senderMicros: of('senderMicros'),
      receiverCpu: of('receiverCpu'),
      otherCpu: of('otherCpu'),
      bad: all.reduce((sum, r) => sum + r.bad, 0),
      capped: all.some((r) => r.capped),
    };
  });
}

function table(header: string[], lines: string[][], left = 2): string {
  const widths = header.map((title, i) => Math.max(title.length, ...lines.map((line) => line[i]!.length)));
  const format = (cells: string[]) =>
    cells.map((cell, i) => (i < left ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  return [format(header), ...lines.map(format)].join('\n');
}

function throughputTable(rows: Row[]): string {
  const pct = (n: number) => (Number.isNaN(n) ? '?' : `${(100 * n).toFixed(0)} %`);
  const lines = rows.map((row) => {
    const bare = rows.find((r) => r.sender === 'bare' && r.engine === row.engine && r.run === row.run)!;
    return [
      row.engine,
      `${row.run}: ${row.sender === 'bare' ? 'bare client' : 'worker'}`,
      String(row.concurrency),
      String(row.peakConnections),
      row.capped ? `${row.delivered} of ${row.deliveries}` : String(row.deliveries),
      `${row.seconds.toFixed(2)}${row.capped ? ' (cap)' : ''}`,
      rate(row).toFixed(0),
      row.receivedRate.toFixed(0),
      row.sender === 'bare' ? '' : (rate(row) / rate(bare)).toFixed(2),
      row.senderMicros.toFixed(0),
      pct(row.senderCpu),
      pct(row.receiverCpu),
      pct(row.otherCpu),
      String(row.bad),
    ];
  });
  return table(
    [
      'engine',
      'run: sender',
      'conc',
      'peak conns',
      'deliveries',
      'seconds',
      'done/s',
      'received/s',
      'vs bare',
      'sender µs/dlv',
      'sender cpu',
      'recv cpu',
      'other cpu',
      'bad',
    ],
    lines,
  );
}

function latencyTable(rows: LatencyRow[]): string {
  return table(
    ['engine', 'worker', 'events', 'received', 'emit p50 ms', 'p50 ms', 'p99 ms', 'max ms'],
    rows.map((row) => [
      row.engine,
      row.worker,
      String(row.events),
      String(row.received),
      ms(row.emitP50),
      ms(row.p50),
      ms(row.p99),
      ms(row.max),
    ]),
  );
}

// ---------------------------------------------------------------------------------------------------------
// Main.

const load = () =>
  os
    .loadavg()
    .map((n) => n.toFixed(2))
    .join(' ');
log(
  `node ${process.version}, ${cpuCount} CPUs (${os.cpus()[0]?.model ?? '?'}), ${ROUNDS} round(s); ` +
    (pin
      ? `receiver pinned to CPU ${RECEIVER_CPU}, this process (bare client or worker) to CPU ${SENDER_CPU}`
      : 'no CPU pinning') +
    `; load average before: ${load()}`,
);
log(
  `worker settings: the defaults (concurrency ${DEFAULTS.concurrency} overall / ${DEFAULTS.concurrencyPerEndpoint} ` +
    `per endpoint, timeout ${DEFAULTS.timeoutMs} ms); the bare client runs at the concurrency the worker can use. ` +
    `Throughput: ${EVENTS} events to 1 webhook, ${FANOUT_EVENTS} events × ${WEBHOOKS} webhooks, each worker ` +
    `window capped at ${CAP_MS / 1000} s; ` +
    `latency: ${LATENCY_EVENTS} events, one every 10–20 ms, after ${LATENCY_WARMUP_EVENTS} unmeasured.`,
);
if (args.profile)
  log(
    `Profiling the measured windows (the worker's, and the bare client's as *-bare) into ${args.profile}; figures carry profiler overhead.`,
  );

const engines: Array<{ engine: Engine; url?: string }> = [];
const notes: string[] = [];
if (args.only !== 'postgres') engines.push({ engine: 'sqlite' });
if (args.only !== 'sqlite') {
  const found = await findPostgres(process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL);
  if ('url' in found) engines.push({ engine: 'postgres', url: found.url });
  else notes.push(`PostgreSQL skipped: ${found.skip}.`);
}

const receiver = await startReceiver();
const rows: Row[] = [];
const latencies: LatencyRow[] = [];
const checks: string[] = [];
try {
  for (const { engine, url } of engines) {
    const started = performance.now();
    log(`${engine}${url ? ` (${url.replace(/\/\/[^@/]*@/, '//…@')})` : ''}:`);
    const result = await runEngine(engine, receiver, url);
    rows.push(...result.rows);
    latencies.push(...result.latencies);
    checks.push(`${engine}: ${result.check}`);
    log(`  (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
} finally {
  await receiver.stop();
}

log(`\nthroughput${ROUNDS > 1 ? ` (median of ${ROUNDS} rounds)` : ''}`);
log(throughputTable(rows));
log(
  'conc: the concurrency the worker can use (overall / per endpoint × webhooks) and the bare client runs at; ' +
    'peak conns: the most connections the receiver had open at once (what the sender really had in flight); ' +
    'done/s: until every response was back (bare) or every delivery was recorded succeeded in the database ' +
    `(worker; "cap": the window ended after ${CAP_MS / 1000} s and counts what had succeeded); received/s: ` +
    "as the receiver saw the requests arrive; sender µs/dlv: this process's CPU time per request (PostgreSQL's " +
    'own CPU is not in it; it shows under other cpu, with any other work on the machine).',
);
log(`\nlatency from emit to receipt (low load)`);
log(latencyTable(latencies));
log(`\nchecks: ${checks.join(' · ')}`);

log(`\nagainst the aims`);
for (const row of rows.filter((r) => r.sender === 'worker')) {
  const bare = rows.find((r) => r.sender === 'bare' && r.engine === row.engine && r.run === row.run)!;
  const ratio = rate(row) / rate(bare);
  log(
    `  ${row.engine.padEnd(8)} ${row.run.padEnd(40)} worker/bare ${ratio.toFixed(2)}  ` +
      `(aim ≥ ${THROUGHPUT_AIM}: ${ratio >= THROUGHPUT_AIM ? 'met' : 'NOT met'})`,
  );
}
for (const row of latencies) {
  log(
    `  ${row.engine.padEnd(8)} ${row.worker.padEnd(40)} p99 ${ms(row.p99)} ms  ` +
      `(target < ${P99_TARGET_MS} ms: ${row.p99 < P99_TARGET_MS && row.received === row.events ? 'met' : 'NOT met'})`,
  );
}
const warnings = [...notes];
for (const [problem, times] of workerProblems) warnings.push(`the worker logged ${times} × ${problem}`);
log(`load average after: ${load()} (other work on this machine skews the figures; re-run if noisy)`);
const busiest = Math.max(0, ...rows.map((row) => row.otherCpu));
if (busiest > 0.3) {
  warnings.push(
    `other work used up to ${(100 * busiest).toFixed(0)} % of a CPU during a measurement (PostgreSQL's ` +
      'own share included); re-run when the machine is quiet or with --rounds 3.',
  );
}
if (rows.some((row) => row.bad > 0)) warnings.push('some deliveries did not go as expected (see bad).');
for (const warning of warnings) log(`WARNING: ${warning}`);
for (const file of profiles) log(`\n${summarizeProfile(file)}`);

if (args.json) {
  const targets: TargetResult[] = rows
    .filter((row) => row.sender === 'worker' && row.target !== undefined)
    .map((row) => {
      const bare = rows.find((r) => r.sender === 'bare' && r.engine === row.engine && r.run === row.run)!;
      return {
        target: row.target!,
        engine: row.engine,
        postwire: rate(row),
        bare: rate(bare),
        ratio: rate(row) / rate(bare),
        cpuRatio: bare.senderMicros / row.senderMicros,
        aim: THROUGHPUT_AIM,
        warnings: [
          ...(row.capped
            ? [`capped at ${CAP_MS / 1000} s: ${row.delivered} of ${row.deliveries} delivered`]
            : []),
          ...(row.bad + bare.bad > 0 ? [`${row.bad + bare.bad} bad`] : []),
        ],
      };
    });
  const latencyResults: LatencyResult[] = latencies.map((row) => ({
    engine: row.engine,
    worker: row.worker,
    events: row.events,
    received: row.received,
    p99Ms: row.p99,
    aimMs: P99_TARGET_MS,
  }));
  const report: BenchReport = { bench: 'delivery', targets, latencies: latencyResults, warnings };
  console.log(JSON.stringify(report));
}
