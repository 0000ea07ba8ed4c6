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
//
// The longest turn is the most CPU time one turn of the server's event loop took while they flowed (its own
// thread's CPU: test/helpers/turn-cpu.ts): what the server itself held every request for, however busy the
// machine. The idle figures are the machine's floor: a p99 of 50 ms while messages flow means little where the idle
// server already shows one of 40.
import { spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import nodemailer from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer';
import pg from 'pg';
import { SMTPServer } from 'smtp-server';
import { startLatencyProbe } from '../test/helpers/latency-probe.ts';
import { freePort } from '../test/helpers/process.ts';
import { benchSchemaName, findPostgres, stopChild } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '2' },
    only: { type: 'string' },
    modes: { type: 'string', default: 'capture,relay,received,api' },
    root: { type: 'string' },
    idle: { type: 'string', default: '10' },
    'node-options': { type: 'string' },
    'postgres-url': { type: 'string' },
  },
});
const MESSAGES = Number(args.messages);
const TURN_CPU_IMPORT = `--import ${new URL('../test/helpers/turn-cpu.ts', import.meta.url).href}`;
/** Seconds the probe asks the idle server first: the machine's own floor, to read the figures against. */
const IDLE_SECONDS = Number(args.idle);
const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(args.root ?? path.resolve(here, '..'));
const KEY = 'pw_bench_large_messages_key_0123456789';
/** The attachment's size: with base64 and the rest, the message is just under 40 MiB. */
const ATTACHMENT_BYTES = 29 * 1024 * 1024;
/** An API send's attachment: just under the 40 MiB of files an email may carry (MAX_ATTACHMENT_BYTES). */
const API_ATTACHMENT_BYTES = 40 * 1024 * 1024 - 64 * 1024;

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const privatePem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const attachment = randomBytes(ATTACHMENT_BYTES);
const apiAttachment = randomBytes(API_ATTACHMENT_BYTES);
const text = Array.from({ length: 2000 }, (_, line) => `Line ${line} of the figures — Grüße`).join('\n');

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))]!;
const rssMb = (pid: number) => {
  try {
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
  } catch {
    return 0;
  }
};

/** A relay that takes every message and keeps nothing. */
async function startSink(): Promise<{ port: number; close(): Promise<void> }> {
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    size: 64 * 1024 * 1024,
    onData(stream, _session, callback) {
      stream.on('data', () => {});
      stream.on('end', () => callback());
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.server.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    close: () => new Promise((resolve) => server.close(() => resolve())),
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

type Mode = 'capture' | 'relay' | 'received' | 'api';

async function measure(engine: 'sqlite' | 'postgres', mode: Mode, pgUrl: string | undefined) {
  const database = await openDatabase(engine, pgUrl);
  const sink = await startSink();
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
        ? { MAIL_TRANSPORT: 'relay', SMTP_URL: `smtp://127.0.0.1:${sink.port}` }
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
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    ignoreTLS: true,
    ...(mode === 'received'
      ? { port: inboundPort }
      : { port: submissionPort, auth: { user: 'bench', pass: KEY } }),
  });
  // Built before the probe starts: encoding 40 MiB here would compete with the server for the cores.
  const to = mode === 'received' ? 'reports@acme.test' : 'reader@example.org';
  const messages: Buffer[] = [];
  const sends: string[] = [];
  for (let i = 0; i < MESSAGES; i++) {
    if (mode === 'api') {
      sends.push(
        JSON.stringify({
          from: 'Acme <hello@acme.example>',
          to: [to],
          subject: `Figures ${i}`,
          text,
          html: `<p>${text.replace(/\n/g, '</p><p>')}</p>`,
          attachments: [{ filename: 'figures.bin', content: apiAttachment.toString('base64') }],
        }),
      );
      continue;
    }
    messages.push(
      await new MailComposer({
        from: 'Acme <hello@acme.example>',
        to,
        subject: `Figures ${i}`,
        text,
        html: `<p>${text.replace(/\n/g, '</p><p>')}</p>`,
        attachments: [{ filename: 'figures.bin', content: attachment }],
      })
        .compile()
        .build(),
    );
  }
  const submit = async (raw: Buffer) => {
    const info = await transport.sendMail({ envelope: { from: 'hello@acme.example', to: [to] }, raw });
    return /queued as ((?:msg|inb)_[0-9a-z]+)/.exec(info.response)![1]!;
  };
  const sendOverApi = async (body: string) => {
    const response = await fetch(`${url}/v1/emails`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body,
    });
    const answer = (await response.json()) as { id?: string };
    if (response.status !== 202)
      throw new Error(`the send answered ${response.status}: ${JSON.stringify(answer)}`);
    return answer.id!;
  };
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
      const id = mode === 'api' ? await sendOverApi(sends[i]!) : await submit(messages[i]!);
      const done = async () =>
        mode === 'received'
          ? (await api('GET', '/received-emails')).data.length > i
          : ['sent', 'delivered'].includes((await api('GET', `/emails/${id}`)).status);
      while (!(await done())) await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    latencies = await probe.stop();
    clearInterval(sampler);
    transport.close();
    await stopChild(child, () => child.kill('SIGTERM'));
    await sink.close();
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
  `${MESSAGES} messages of 39.9 MiB each (api: a 40 MiB attachment), one after another; the server at ${root}`,
);
console.log(
  `engine     mode     time     GET /v1/webhooks p50 / p99 / max while they flow (idle ${IDLE_SECONDS} s before)   longest turn (CPU)   RSS idle → peak`,
);
const figures = (f: { p50: number; p99: number; max: number }) =>
  `${f.p50.toFixed(1)} / ${f.p99.toFixed(1)} / ${f.max.toFixed(1)} ms`;
for (const engine of engines) {
  for (const mode of args.modes!.split(',') as Mode[]) {
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
