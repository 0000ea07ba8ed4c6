// What a 40 MiB message costs everyone else: the API's latency (p50, p99, max of GET /v1/webhooks asked every
// 5 ms by a probe of its own, test/helpers/latency-probe.ts) and the server's peak resident memory while
// messages of just under SUBMISSION_MAX_BYTES are submitted over SMTP, stored, built, DKIM-signed and kept
// (capture) or sent to a relay, or received by the inbound listener (INBOUND_MAX_BYTES raised to 40 MiB),
// stored, read and authenticated (received), or sent through `POST /v1/emails` with an attachment of just under
// the 40 MiB the API takes (api: a 53 MiB JSON body, captured), one after another, by `postwire serve` with its
// workers (`node src/main.ts`).
//
//   npm run bench:large-messages                           # SQLite and PostgreSQL; capture, relay, received, api; 2 each
//   npm run bench:large-messages -- --only sqlite --messages 3
//   npm run bench:large-messages -- --root ../old-checkout --modes capture,relay   # another checkout (before/after)
//   npm run bench:large-messages -- --node-options='--cpu-prof --cpu-prof-dir=/tmp/profiles'   # the server's
//   npm run bench:large-messages -- --idle 20   # the probe asks the idle server first (default 10 s; 0: not)
//   npm run bench:large-messages -- --load-priority normal   # the senders and the relay's sink at the bench's priority
//
// The senders and the relay's sink (bench/large-messages-load.ts) run on a thread at the lowest CPU priority by
// default: they stand for clients and a receiving host on other machines, and would otherwise take one of the two
// cores from the server they measure.
//
// The longest turn is the most CPU time one turn of the server's event loop took while they flowed (its own
// thread's CPU: test/helpers/turn-cpu.ts): what the server itself held every request for, however busy the
// machine. The idle figures are the machine's floor: a p99 of 50 ms while messages flow means little where the idle
// server already shows one of 40.
import { spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';
import pg from 'pg';
import { startLatencyProbe } from '../test/helpers/latency-probe.ts';
import { freePort } from '../test/helpers/process.ts';
import type { FromLoad, LoadMode, LoadTarget, ToLoad } from './large-messages-load.ts';
import { benchSchemaName, findPostgres, stopChild } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '2' },
    only: { type: 'string' },
    modes: { type: 'string', default: 'capture,relay,received,api' },
    root: { type: 'string' },
    idle: { type: 'string', default: '10' },
    'load-priority': { type: 'string', default: 'lowest' },
    'node-options': { type: 'string' },
    'postgres-url': { type: 'string' },
  },
});
const MESSAGES = Number(args.messages);
const LOW_PRIORITY_LOAD = args['load-priority'] !== 'normal';
const TURN_CPU_IMPORT = `--import ${new URL('../test/helpers/turn-cpu.ts', import.meta.url).href}`;
/** Seconds the probe asks the idle server first: the machine's own floor, to read the figures against. */
const IDLE_SECONDS = Number(args.idle);
const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(args.root ?? path.resolve(here, '..'));
const KEY = 'pw_bench_large_messages_key_0123456789';

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const privatePem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))]!;
const rssMb = (pid: number) => {
  try {
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
  } catch {
    return 0;
  }
};

/** The load's thread (bench/large-messages-load.ts): its sink's port, then messages built and sent on request. */
async function startLoad() {
  const worker = new Worker(new URL('./large-messages-load.ts', import.meta.url), {
    workerData: { lowPriority: LOW_PRIORITY_LOAD },
  });
  // The thread answers each request in turn (one at a time), so answers are matched to requests in order.
  const waiting: Array<{ resolve(message: FromLoad): void; reject(error: Error): void }> = [];
  worker.on('message', (message: FromLoad) => {
    const request = waiting.shift();
    if ('failed' in message) request?.reject(new Error(message.failed));
    else request?.resolve(message);
  });
  worker.on('error', (error) => waiting.splice(0).forEach((request) => request.reject(error)));
  const next = () => new Promise<FromLoad>((resolve, reject) => waiting.push({ resolve, reject }));
  const ask = (message: LoadTarget | ToLoad) => {
    const answer = next();
    worker.postMessage(message);
    return answer;
  };
  const { sinkPort } = (await next()) as { sinkPort: number };
  return {
    sinkPort,
    prepare: (target: LoadTarget) => ask(target),
    send: async (index: number) => ((await ask({ send: index })) as { id: string }).id,
    async close() {
      await ask({ close: true });
      await worker.terminate();
    },
  };
}

interface Database {
  env: Record<string, string>;
  drop(): Promise<void>;
}

async function openDatabase(engine: 'sqlite' | 'postgres', url: string | undefined): Promise<Database> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'postwire-bench-large-'));
  if (engine === 'sqlite') {
    return { env: { POSTWIRE_DATA_DIR: dataDir }, drop: async () => rmSync(dataDir, { recursive: true }) };
  }
  const schema = benchSchemaName();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`CREATE SCHEMA ${schema}`);
  const separator = url!.includes('?') ? '&' : '?';
  return {
    env: {
      POSTWIRE_DATA_DIR: dataDir,
      DATABASE_URL: `${url}${separator}options=${encodeURIComponent(`-c search_path=${schema}`)}`,
    },
    async drop() {
      await client.query(`DROP SCHEMA ${schema} CASCADE`);
      await client.end();
      rmSync(dataDir, { recursive: true });
    },
  };
}

async function measure(engine: 'sqlite' | 'postgres', mode: LoadMode, pgUrl: string | undefined) {
  const database = await openDatabase(engine, pgUrl);
  const load = await startLoad();
  const submissionPort = await freePort();
  const inboundPort = await freePort();
  const child = spawn(process.execPath, ['src/main.ts'], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      // The server reports each turn of its event loop that computed for over 20 ms (its thread's CPU time).
      NODE_OPTIONS: [TURN_CPU_IMPORT, args['node-options'] ?? ''].join(' ').trim(),
      ...database.env,
      PORT: '0',
      LOG_FORMAT: 'json',
      POSTWIRE_BOOTSTRAP_KEY: KEY,
      POSTWIRE_RATE_LIMIT: '0',
      SUBMISSION_PORT: String(submissionPort),
      SUBMISSION_ALLOW_PLAIN_LOOPBACK: 'true',
      DKIM_DOMAIN: 'acme.example',
      DKIM_SELECTOR: 'big',
      DKIM_PRIVATE_KEY: privatePem,
      ...(mode === 'relay'
        ? { MAIL_TRANSPORT: 'relay', SMTP_URL: `smtp://127.0.0.1:${load.sinkPort}` }
        : { MAIL_TRANSPORT: 'capture' }),
      // Received mail: acme.test verifies without DNS in capture mode.
      ...(mode === 'received'
        ? {
            INBOUND_MX_HOST: 'mx.acme.test',
            INBOUND_SMTP_PORT: String(inboundPort),
            INBOUND_MAX_BYTES: String(40 * 1024 * 1024),
          }
        : {}),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let longestTurnCpuMs = 0;
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the server exited with ${code}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const turn = /"msg":"turn cpu","turnCpuMs":([\d.]+)/.exec(line);
      if (turn) longestTurnCpuMs = Math.max(longestTurnCpuMs, Number(turn[1]));
      const found = /"url":"(http:[^"]+)"/.exec(line);
      if (found && /listening/i.test(line)) resolve(found[1]!);
    });
  });
  const pid = child.pid!;
  const idleRss = rssMb(pid);
  let peakRss = idleRss;
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, rssMb(pid))), 20);
  const api = async (method: string, route: string, body?: unknown) => {
    const response = await fetch(`${url}/v1${route}`, {
      method,
      headers: { authorization: `Bearer ${KEY}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return (await response.json()) as Record<string, any>;
  };
  if (mode === 'received') {
    await api('POST', '/domains', { name: 'acme.test', receiving: true });
    await api('POST', '/domains/acme.test/verify');
    await api('POST', '/inbound-routes', { match: 'reports@acme.test', action: 'store' });
  }
  // Built before the probe starts: encoding 40 MiB would compete with the server for the cores.
  const to = mode === 'received' ? 'reports@acme.test' : 'reader@example.org';
  await load.prepare({
    mode,
    url,
    key: KEY,
    smtpPort: mode === 'received' ? inboundPort : submissionPort,
    to,
    messages: MESSAGES,
  });
  let idle: number[] = [];
  if (IDLE_SECONDS > 0) {
    const idleProbe = await startLatencyProbe(`${url}/v1/webhooks`, KEY);
    await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
    idle = await idleProbe.stop();
  }
  const probe = await startLatencyProbe(`${url}/v1/webhooks`, KEY);
  longestTurnCpuMs = 0;
  const started = performance.now();
  let latencies: number[];
  try {
    for (let i = 0; i < MESSAGES; i++) {
      const id = await load.send(i);
      const done = async () =>
        mode === 'received'
          ? (await api('GET', '/received-emails')).data.length > i
          : ['sent', 'delivered'].includes((await api('GET', `/emails/${id}`)).status);
      while (!(await done())) await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    latencies = await probe.stop();
    clearInterval(sampler);
    await stopChild(child, () => child.kill('SIGTERM'));
    await load.close();
    await database.drop();
  }
  return {
    engine,
    mode,
    seconds: (performance.now() - started) / 1000,
    requests: latencies.length,
    idle:
      idle.length > 0
        ? { p50: percentile(idle, 50), p99: percentile(idle, 99), max: Math.max(...idle) }
        : undefined,
    longestTurnCpuMs,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: Math.max(...latencies),
    idleRss,
    peakRss,
  };
}

const engines: Array<'sqlite' | 'postgres'> = [];
if (args.only !== 'postgres') engines.push('sqlite');
let pgUrl: string | undefined;
if (args.only !== 'sqlite') {
  const found = await findPostgres(args['postgres-url'] ?? process.env.TEST_DATABASE_URL);
  if ('url' in found) {
    engines.push('postgres');
    pgUrl = found.url;
  } else console.log(`PostgreSQL skipped: ${found.skip}`);
}
console.log(
  `${MESSAGES} messages of 39.9 MiB each (api: a 40 MiB attachment), one after another; the server at ${root}; ` +
    `the load at ${LOW_PRIORITY_LOAD ? 'the lowest' : 'normal'} priority`,
);
console.log(
  `engine     mode     time     GET /v1/webhooks p50 / p99 / max while they flow (idle ${IDLE_SECONDS} s before)   longest turn (CPU)   RSS idle → peak`,
);
const figures = (f: { p50: number; p99: number; max: number }) =>
  `${f.p50.toFixed(1)} / ${f.p99.toFixed(1)} / ${f.max.toFixed(1)} ms`;
for (const engine of engines) {
  for (const mode of args.modes!.split(',') as LoadMode[]) {
    const r = await measure(engine, mode, pgUrl);
    console.log(
      `${r.engine.padEnd(10)} ${r.mode.padEnd(8)} ${r.seconds.toFixed(1).padStart(5)} s  ` +
        `${r.requests} requests: ${figures(r)}`.padEnd(42) +
        (r.idle ? ` (idle: ${figures(r.idle)})`.padEnd(34) : '') +
        `  ${r.longestTurnCpuMs.toFixed(0).padStart(4)} ms` +
        `  ${r.idleRss.toFixed(0)} → ${r.peakRss.toFixed(0)} MB`,
    );
  }
}
