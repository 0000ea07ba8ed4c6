// Requests per second of the real API against bare Fastify serving the same JSON, on this machine.
//
//   npm run bench:api                     # 10 connections, 1 s warm-up + 5 s per target
//   npm run bench:api -- --rounds 3       # repeat and report medians (when other work shares the machine)
//   npm run bench:api -- --profile        # also CPU-profile the real server and summarise the profiles
//   npm run bench:api -- --only reads     # some pairs only (reads, writes, emails; comma-separated)
//   npm run bench:api -- --no-api-log     # the real servers with the API request log off (what it costs)
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:api   # a fresh PostgreSQL schema
//   npm run bench:api -- --json           # the report on stderr, the targets as JSON on stdout
//   npm run bench:api -- --one-real-server   # every real target on the reads' server (a smoke run's shortcut)
//
// The pairs: reads (`GET /v1/webhooks`, 20 webhooks, auth), writes (`POST /v1/webhooks`) and emails
// (`POST /v1/emails`, one recipient, accepted: validated and stored before the 202; no sending worker runs, so
// this is acceptance alone), each against bare Fastify answering the same JSON (parsing the same body); the
// emails against bare Fastify storing each one with one durable INSERT on the same engine before the 202
// (bench/insert-floor.ts: the floor issue 43 defines), with bare Fastify without the INSERT shown beside.
//
// Fairness: the server runs in a child process and autocannon in this one; with taskset and two or more
// CPUs each is pinned to a CPU of its own, so the load generator never takes the server's CPU. Bare and real
// run the same way, one fresh child at a time, and report how busy each side was: a server near 100 %
// and a client well under it means the figure is the server's, not the load generator's.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import autocannon, { type Result } from 'autocannon';
import { summarizeProfile } from './profile.ts';
import {
  type BenchEngine,
  type BenchReport,
  CREATE_BODY,
  type ChildMessage,
  emailMessage,
  humanOutput,
  type ParentMessage,
  WEBHOOK_COUNT,
  canPin,
  median,
} from './shared.ts';

const READ_AIM = 0.6;
const ACCEPT_AIM = 0.5;
const PAIRS = ['reads', 'writes', 'emails'] as const;
const SERVER_CPU = '0';
const CLIENT_CPU = '1';

const { values: args } = parseArgs({
  options: {
    connections: { type: 'string', default: '10' },
    duration: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '1' },
    profile: { type: 'boolean', default: false },
    // --statements <file>: every statement of each real server and its wall time (statement-tally.ts), start to
    // end, each server's tally in a file of its own (`<file>.<n>`), with the requests it answered.
    statements: { type: 'string' },
    // Some of reads, writes, emails (comma-separated): measure those pairs only, when iterating on one path.
    only: { type: 'string' },
    'no-pin': { type: 'boolean', default: false },
    // The real servers without the API request log (API_LOG_MAX_ROWS=0): what the log costs a request.
    'no-api-log': { type: 'boolean', default: false },
    // Every real target on one server, the reads' (each after the one before it, so the reads still list 20):
    // one real start fewer (migrations, setup and a process: 1–2 CPU-s here), for a smoke run
    // (`npm run bench -- --quick`) whose figures are not compared. Its later targets meet a server already
    // warmed by the earlier ones, which a measured run does not want.
    'one-real-server': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
const log = humanOutput(args.json);
const connections = Number(args.connections);
const duration = Number(args.duration);
const warmup = Number(args.warmup);
const rounds = Number(args.rounds);
const only = new Set(args.only?.split(',') ?? PAIRS);
for (const pair of only) {
  if (!(PAIRS as readonly string[]).includes(pair))
    throw new Error(`--only takes ${PAIRS.join(', ')}, not ${pair}`);
}
if (args['no-api-log']) process.env.BENCH_API_LOG = 'off';
const doReads = only.has('reads');
const doWrites = only.has('writes');
const doEmails = only.has('emails');
// The server children open DATABASE_URL's PostgreSQL when it is set (bench/app.ts), SQLite otherwise.
const engine: BenchEngine = process.env.DATABASE_URL ? 'postgres' : 'sqlite';
const here = path.dirname(fileURLToPath(import.meta.url));

// Read before pinning: once pinned, availableParallelism() counts only the CPU this process may use.
const cpuCount = os.availableParallelism();
const pin = canPin(Boolean(args['no-pin']));
// Every thread of this process, autocannon's included, on the CPU the server does not use.
if (pin) execFileSync('taskset', ['-a', '-p', '-c', CLIENT_CPU, String(process.pid)], { stdio: 'ignore' });

interface Server {
  child: ChildProcess;
  ready: Extract<ChildMessage, { type: 'ready' }>;
  cpuMicros(): Promise<number>;
  profile(action: 'start' | 'stop', file?: string): Promise<void>;
  stop(): Promise<void>;
}

let tallies = 0;
async function startServer(mode: 'real' | 'bare', payloads?: ParentMessage) {
  const tally =
    args.statements && mode === 'real' ? `${path.resolve(args.statements)}.${tallies++}` : undefined;
  const nodeArgs = [
    ...(tally ? ['--import', path.join(here, 'statement-tally.ts')] : []),
    path.join(here, 'server.ts'),
    mode,
  ];
  const options = {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'] as ('ignore' | 'inherit' | 'ipc')[],
    ...(tally ? { env: { ...process.env, STATEMENT_TALLY_FILE: tally } } : {}),
  };
  const child = pin
    ? spawn('taskset', ['-c', SERVER_CPU, process.execPath, ...nodeArgs], options)
    : spawn(process.execPath, nodeArgs, options);
  const next = <T extends ChildMessage['type']>(type: T) =>
    new Promise<Extract<ChildMessage, { type: T }>>((resolve, reject) => {
      const onMessage = (message: ChildMessage) => {
        if (message.type !== type) return;
        child.off('message', onMessage);
        child.off('exit', onExit);
        resolve(message as Extract<ChildMessage, { type: T }>);
      };
      const onExit = (code: number | null) => reject(new Error(`${mode} server exited (${code})`));
      child.on('message', onMessage);
      child.once('exit', onExit);
    });
  const ready = next('ready');
  if (payloads) child.send(payloads);
  const server: Server = {
    child,
    ready: await ready,
    async cpuMicros() {
      const answer = next('cpu');
      child.send({ type: 'cpu' } satisfies ParentMessage);
      return (await answer).micros;
    },
    async profile(action, file) {
      if (action === 'start') return void child.send({ type: 'profile-start' } satisfies ParentMessage);
      const answer = next('profiled');
      child.send({ type: 'profile-stop', file: file! } satisfies ParentMessage);
      await answer;
    },
    async stop() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ type: 'stop' } satisfies ParentMessage);
      await exited;
    },
  };
  return server;
}

/** Machine-wide CPU ticks (Linux): with the server's and our own share known, the rest is other work. */
function machineTicks(): { busy: number; total: number } | undefined {
  if (!existsSync('/proc/stat')) return undefined;
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: idle and iowait are free time; steal went to other VMs.
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: total - fields[3]! - fields[4]!, total };
}

interface Target {
  name: string;
  /** Default `/v1/webhooks`. */
  path?: string;
  method: 'GET' | 'POST';
  expect: number;
  headers: Record<string, string>;
  body?: string;
}

interface Row {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  bad: number;
  serverCpu: number;
  clientCpu: number;
  /** Server CPU time per answered request: unlike req/s, barely moved by other work on the machine. */
  serverMicros: number;
  /** CPUs' worth of time used by everything else on the machine (other processes, steal) meanwhile. */
  otherCpu: number;
}

/**
 * autocannon's interval between samples, in ms, for a window of these seconds: it ends a run at the first
 * sample after the window, so a window of 0.2 s sampled every second (its default) lasted a second. The
 * figures read here (requests and the run's real duration, latencies, status codes) do not depend on it.
 */
const sampleEvery = (seconds: number) => (Number.isInteger(seconds) ? 1000 : 100);

async function measure(server: Server, target: Target, profileFile?: string): Promise<Row> {
  const options = {
    url: `http://127.0.0.1:${server.ready.port}${target.path ?? '/v1/webhooks'}`,
    method: target.method,
    headers: target.headers,
    connections,
    ...(target.body !== undefined ? { body: target.body } : {}),
  };
  const warm: Result = await autocannon({ ...options, duration: warmup, sampleInt: sampleEvery(warmup) });
  if (profileFile) await server.profile('start');
  const serverBefore = await server.cpuMicros();
  const clientBefore = process.cpuUsage();
  const machineBefore = machineTicks();
  const startedAt = performance.now();
  const result: Result = await autocannon({ ...options, duration, sampleInt: sampleEvery(duration) });
  const wallMicros = (performance.now() - startedAt) * 1000;
  if (profileFile) await server.profile('stop', profileFile);
  const serverCpu = ((await server.cpuMicros()) - serverBefore) / wallMicros;
  const client = process.cpuUsage(clientBefore);
  const clientCpu = (client.user + client.system) / wallMicros;
  const machineAfter = machineTicks();
  const machineCpu =
    machineBefore && machineAfter
      ? ((machineAfter.busy - machineBefore.busy) / (machineAfter.total - machineBefore.total)) * cpuCount
      : Number.NaN;
  const expected = result.statusCodeStats[target.expect]?.count ?? 0;
  if (args.statements && target.name.startsWith('real')) {
    log(
      `${target.name}: ${warm.requests.total + result.requests.total} requests (warm-up included) in the tally`,
    );
  }
  return {
    name: target.name,
    rps: result.requests.total / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    // Anything but the expected status (and any socket error) means the figure is not the one asked for.
    bad: result.requests.total - Number(expected) + result.errors,
    serverCpu,
    clientCpu,
    serverMicros: (serverCpu * wallMicros) / result.requests.total,
    otherCpu: Math.max(0, machineCpu - serverCpu - clientCpu),
  };
}

const json = { 'content-type': 'application/json' };
const createBody = JSON.stringify(CREATE_BODY);
const emailBody = JSON.stringify(emailMessage(1));

/** The real servers' SQLite files, deleted at the end (the bare server reads the first one). */
const databases: string[] = [];
const keep = (database: string | undefined) => database !== undefined && databases.push(database);
let sqlChecked = false;

async function round(profileDir?: string): Promise<Row[]> {
  const profileFile = (name: string) =>
    profileDir ? path.join(profileDir, `${name}.cpuprofile`) : undefined;
  const rows: Row[] = [];

  // Real reads: a fresh database with WEBHOOK_COUNT webhooks, listed with a valid key.
  const reads = await startServer('real');
  const auth = { authorization: `Bearer ${reads.ready.key}` };
  const payloads: ParentMessage = {
    type: 'payloads',
    list: reads.ready.list!,
    created: reads.ready.created!,
    accepted: reads.ready.accepted!,
    database: reads.ready.database,
    projectId: reads.ready.projectId!,
  };
  if (doReads) {
    rows.push(
      await measure(
        reads,
        { name: 'real  GET  /v1/webhooks', method: 'GET', expect: 200, headers: auth },
        profileFile('real-read'),
      ),
    );
  }
  if (!args['one-real-server']) await stopReal(reads);

  // The ceiling: the same bytes from plain Fastify, no auth, no database.
  const bare = await startServer('bare', payloads);
  if (doReads) {
    rows.push(
      await measure(bare, { name: 'bare  GET  /v1/webhooks', method: 'GET', expect: 200, headers: {} }),
    );
  }
  // bare+sql runs the query on node:sqlite: SQLite only.
  if (doReads && engine === 'sqlite') {
    if (!sqlChecked) {
      sqlChecked = true;
      const answer = await fetch(`http://127.0.0.1:${bare.ready.port}/sql/webhooks`).then((r) => r.text());
      if (answer !== payloads.list) log('note: the bare+sql answer differs from the real list body');
    }
    rows.push(
      await measure(bare, {
        name: 'bare+sql GET /v1/webhooks',
        path: '/sql/webhooks',
        method: 'GET',
        expect: 200,
        headers: {},
      }),
    );
  }
  if (doWrites) {
    rows.push(
      await measure(bare, {
        name: 'bare  POST /v1/webhooks',
        method: 'POST',
        expect: 201,
        headers: json,
        body: createBody,
      }),
    );
  }
  if (doEmails) {
    // No INSERT: what the HTTP side alone costs (shown, not a target's baseline).
    rows.push(
      await measure(bare, {
        name: 'bare  POST /v1/emails',
        path: '/v1/emails',
        method: 'POST',
        expect: 202,
        headers: json,
        body: emailBody,
      }),
    );
    // The accepted send's floor (issue 43): the same with one durable INSERT on this engine before the 202.
    rows.push(
      await measure(bare, {
        name: 'bare+insert POST /v1/emails',
        path: '/floor/emails',
        method: 'POST',
        expect: 202,
        headers: json,
        body: emailBody,
      }),
    );
  }
  await bare.stop();

  /**
   * One target on a real server with a fresh database of its own (so the reads above always listed 20), or with
   * --one-real-server on the reads' server, whose reads are measured by then.
   */
  const onFreshServer = async (target: (server: Server) => Target, profile: string) => {
    const server = args['one-real-server'] ? reads : await startServer('real');
    rows.push(await measure(server, target(server), profileFile(profile)));
    if (server !== reads) await stopReal(server);
  };
  if (doWrites) {
    await onFreshServer(
      (server) => ({
        name: 'real  POST /v1/webhooks',
        method: 'POST',
        expect: 201,
        headers: { ...json, authorization: `Bearer ${server.ready.key}` },
        body: createBody,
      }),
      'real-write',
    );
  }
  // Sends with no sending worker: each one validated and stored before its 202.
  if (doEmails) {
    await onFreshServer(
      (server) => ({
        name: 'real  POST /v1/emails',
        path: '/v1/emails',
        method: 'POST',
        expect: 202,
        headers: { ...json, authorization: `Bearer ${server.ready.key}` },
        body: emailBody,
      }),
      'real-send',
    );
  }
  if (args['one-real-server']) await stopReal(reads);
  return rows;
}

async function stopReal(server: Server) {
  await server.stop();
  keep(server.ready.database);
}

function table(rows: Row[]): string {
  const header = [
    'target',
    'req/s',
    'p50 ms',
    'p99 ms',
    'bad',
    'server µs/req',
    'server cpu',
    'client cpu',
    'other cpu',
  ];
  const lines = rows.map((row) => [
    row.name,
    row.rps.toFixed(0),
    // autocannon measures latency in whole milliseconds.
    row.p50 < 1 ? '<1' : row.p50.toFixed(0),
    row.p99 < 1 ? '<1' : row.p99.toFixed(0),
    String(row.bad),
    row.serverMicros.toFixed(0),
    `${(100 * row.serverCpu).toFixed(0)} %`,
    `${(100 * row.clientCpu).toFixed(0)} %`,
    Number.isNaN(row.otherCpu) ? '?' : `${(100 * row.otherCpu).toFixed(0)} %`,
  ]);
  const widths = header.map((title, i) => Math.max(title.length, ...lines.map((line) => line[i]!.length)));
  const format = (cells: string[]) =>
    cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  return [format(header), ...lines.map(format)].join('\n');
}

const load = () =>
  os
    .loadavg()
    .map((n) => n.toFixed(2))
    .join(' ');
log(
  `node ${process.version}, ${cpuCount} CPUs (${os.cpus()[0]?.model ?? '?'}), ${engine}, ` +
    `${connections} connections, ${warmup} s warm-up + ${duration} s per target, ${rounds} round(s), ` +
    (pin ? `server pinned to CPU ${SERVER_CPU}, load generator to CPU ${CLIENT_CPU}` : 'no CPU pinning') +
    `; load average before: ${load()}`,
);
log(
  `GET lists ${WEBHOOK_COUNT} webhooks with a valid key (rate limit off); POST /v1/webhooks creates one ` +
    '(https URL, secret); POST /v1/emails sends one email to one recipient (a daily limit never reached, no worker).',
);

const profileDir = args.profile ? mkdtempSync(path.join(os.tmpdir(), 'postwire-profile-')) : undefined;
if (profileDir)
  log(`Profiling the real server's measured windows into ${profileDir}; figures carry profiler overhead.`);

const results: Row[][] = [];
for (let i = 0; i < rounds; i++) {
  const rows = await round(profileDir && i === 0 ? profileDir : undefined);
  results.push(rows);
  if (rounds > 1) log(`\nround ${i + 1}\n${table(rows)}`);
}

const summary = results[0]!.map((row, i) => {
  const all = results.map((rows) => rows[i]!);
  return {
    ...row,
    rps: median(all.map((r) => r.rps)),
    p50: median(all.map((r) => r.p50)),
    p99: median(all.map((r) => r.p99)),
    bad: all.reduce((sum, r) => sum + r.bad, 0),
    serverCpu: median(all.map((r) => r.serverCpu)),
    clientCpu: median(all.map((r) => r.clientCpu)),
    serverMicros: median(all.map((r) => r.serverMicros)),
    otherCpu: median(all.map((r) => r.otherCpu)),
  };
});
const row = (name: string) => summary.find((candidate) => candidate.name === name);
const ratio = (real: string, bare: string, of: (row: Row) => number) => {
  const [r, b] = [row(real), row(bare)];
  return r && b ? of(r) / of(b) : Number.NaN;
};
const READ = ['real  GET  /v1/webhooks', 'bare  GET  /v1/webhooks'] as const;
const WRITE = ['real  POST /v1/webhooks', 'bare  POST /v1/webhooks'] as const;
const SEND = ['real  POST /v1/emails', 'bare+insert POST /v1/emails'] as const;
const SEND_HTTP = ['real  POST /v1/emails', 'bare  POST /v1/emails'] as const;
const readRatio = ratio(...READ, (r) => r.rps);
const writeRatio = ratio(...WRITE, (r) => r.rps);
const sendRatio = ratio(...SEND, (r) => r.rps);
// The same ratio from CPU cost: what one core would give each side if nothing else ran on the machine.
const capacity = (r: Row) => 1 / r.serverMicros;
const show = (n: number) => (Number.isNaN(n) ? '-' : n.toFixed(2));
const verdict = (measured: boolean, value: number, aim: number) =>
  measured ? `: ${value >= aim ? 'met' : 'NOT met'}` : '';

log(`\n${rounds > 1 ? `median of ${rounds} rounds` : 'results'}`);
log(table(summary));
log(
  `\nreal/bare  reads ${show(readRatio)}  writes ${show(writeRatio)}  emails ${show(sendRatio)}  ` +
    `(aim ≥ ${READ_AIM} on reads${verdict(doReads, readRatio, READ_AIM)}, ` +
    `≥ ${ACCEPT_AIM} on emails accepted${verdict(doEmails, sendRatio, ACCEPT_AIM)})`,
);
if (doEmails) {
  log(
    `emails against bare+insert (Fastify + one durable INSERT on ${engine}: the target's floor) ` +
      `${show(sendRatio)}; against bare Fastify with no INSERT ${show(ratio(...SEND_HTTP, (r) => r.rps))}`,
  );
}
if (engine === 'sqlite') {
  log(
    `real/bare+sql reads ${show(ratio(READ[0], 'bare+sql GET /v1/webhooks', (r) => r.rps))}  ` +
      '(bare+sql: the same query on node:sqlite with a prepared statement, no auth, no Kysely)',
  );
}
log(
  `real/bare by server CPU per request  reads ${show(ratio(...READ, capacity))}  ` +
    `writes ${show(ratio(...WRITE, capacity))}  emails ${show(ratio(...SEND, capacity))}  ` +
    '(holds up better when other work shares the machine)',
);
log(`load average after: ${load()} (other work on this machine skews the figures; re-run if noisy)`);
const warnings: string[] = [];
const busiest = Math.max(...summary.map((row) => row.otherCpu));
if (busiest > 0.2) {
  warnings.push(
    `other work used up to ${(100 * busiest).toFixed(0)} % of a CPU during a measurement; ` +
      'the figures (and the ratios) are unreliable, re-run when the machine is quiet or with --rounds 3.',
  );
}
if (summary.some((row) => row.bad > 0)) warnings.push('some requests did not answer as expected.');
for (const warning of warnings) log(`WARNING: ${warning}`);

for (const database of databases) rmSync(path.dirname(database), { recursive: true, force: true });

if (profileDir) {
  for (const file of readdirSync(profileDir).sort()) {
    log(`\n${summarizeProfile(path.join(profileDir, file))}`);
  }
}

if (args.json) {
  const target = (name: string, [real, bare]: readonly [string, string], aim: number) => {
    const [r, b] = [row(real)!, row(bare)!];
    return {
      target: name,
      engine,
      postwire: r.rps,
      bare: b.rps,
      ratio: r.rps / b.rps,
      cpuRatio: b.serverMicros / r.serverMicros,
      aim,
      warnings: [r, b].filter((side) => side.bad > 0).map((side) => `${side.name}: ${side.bad} bad`),
    };
  };
  const report: BenchReport = {
    bench: 'api',
    targets: [
      ...(doReads ? [target(`GET /v1/webhooks (${WEBHOOK_COUNT} webhooks, auth)`, READ, READ_AIM)] : []),
      ...(doEmails ? [target('POST /v1/emails accepted (auth, 1 recipient)', SEND, ACCEPT_AIM)] : []),
    ],
    latencies: [],
    warnings,
  };
  console.log(JSON.stringify(report));
}
