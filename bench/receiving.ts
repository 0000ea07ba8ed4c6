// Received messages per second through Postwire, SMTP in to `email.received` webhook out, against a bare
// smtp-server that only stores the bytes (issue 26).
//
//   npm run bench:receiving                                    # 600 messages, 4 connections, SQLite
//   npm run bench:receiving -- --messages 1000 --connections 8 --rounds 3
//   npm run bench:receiving -- --profile /tmp/prof             # CPU profiles of the Postwire process's threads
//   npm run bench:receiving -- --statements /tmp/sql.txt       # its SQLite statements: calls and wall time
//   npm run bench:receiving -- --postgres                      # Postwire on PostgreSQL (DATABASE_URL, else
//                                                              # the local test database), in a schema of its own
//
// Both sides get the same messages from the same client at the same concurrency: nodemailer's SMTP pool, N
// connections sending their share of the messages one after another, each message prepared before the clock
// starts (a ~36 KB multipart message: text, html and a 16 KB PDF attachment, DKIM-signed by customer.example,
// whose key, SPF and DMARC policy this bench's DNS server publishes, so Postwire's authentication does real
// work: SPF pass, DKIM pass, DMARC pass).
//
// - The bare server (bench/receiving-bare.ts): smtp-server, every recipient accepted, each message collected
//   into one Buffer and written with one INSERT into a node:sqlite table (WAL, synchronous NORMAL: the
//   pragmas of Postwire's SQLite engine) before its 250. It stays on SQLite with --postgres.
// - Postwire: `postwire serve` as an operator runs it (API, workers and the inbound listener in one
//   process), INBOUND_MX_HOST set, a verified receiving domain (its DKIM and MX answered by the DNS server),
//   a route `support@acme.test` → webhook, and a webhook for `email.received` pointed at a bare HTTP
//   receiver in this process. INBOUND_MESSAGES_PER_MINUTE is raised out of the way (its default, 120 a
//   minute per client address, is the limit meant for the internet, and this bench is one address).
//
// Measured for Postwire: (a) accepted: messages / seconds until the last 250; (b) end to end: messages /
// seconds until the last `email.received` arrived at the receiver. For the bare server: messages / seconds
// until the last 250. The ratios are Postwire ÷ bare. CPU per message is read from /proc (every thread of
// the server process: parse and authentication threads included). Memory: the server's resident set before
// the window, the most seen while it ran (sampled every 50 ms) and its peak since start (VmHWM).
//
// Pinning (taskset, two CPUs or more): the server measured, every thread of it, on CPU 1; this process (the
// SMTP client, the DNS server and the webhook receiver) on CPU 0. PostgreSQL's own processes are not pinned.
import { execFileSync, fork, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { DatabaseSync } from 'node:sqlite';
import nodemailer from 'nodemailer';
import pg from 'pg';
import { startDnsServer } from '../test/helpers/dns.ts';
import { freePort } from '../test/helpers/process.ts';
import { benchSchemaName, canPin, DEFAULT_POSTGRES_URL, median, stopChild } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '600' },
    connections: { type: 'string', default: '4' },
    'warm-up': { type: 'string', default: '60' },
    rounds: { type: 'string', default: '1' },
    postgres: { type: 'boolean', default: false },
    'no-pin': { type: 'boolean', default: false },
    profile: { type: 'string' },
    statements: { type: 'string' },
  },
});
const MESSAGES = Number(args.messages);
const CONNECTIONS = Number(args.connections);
const WARM_UP = Number(args['warm-up']);
const ROUNDS = Number(args.rounds);
const POSTGRES_URL = args.postgres ? (process.env.DATABASE_URL ?? DEFAULT_POSTGRES_URL) : undefined;
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');

const SERVER_CPU = '1';
const CLIENT_CPU = '0';
const cpuCount = os.availableParallelism();
const pin = canPin(Boolean(args['no-pin']));
if (pin) execFileSync('taskset', ['-a', '-p', '-c', CLIENT_CPU, String(process.pid)], { stdio: 'ignore' });

const KEY = 'pw_bench_receiving_key_0123456789';
const SECRET = 'whsec_' + Buffer.alloc(24, 5).toString('base64');
const MX_HOST = 'mx.postwire.test';
const DOMAIN = 'acme.test';
const RECIPIENT = `support@${DOMAIN}`;
const SENDER_DOMAIN = 'customer.example';
const SELECTOR = 'mail2026';
const MB = 1024 * 1024;

// --- The DNS the server asks: the sender's DKIM key, SPF and DMARC; the receiving domain's records later.
const dns = await startDnsServer();
const senderKeys = generateKeyPairSync('rsa', { modulusLength: 2048 });
dns.add(`${SELECTOR}._domainkey.${SENDER_DOMAIN}`, {
  type: 'TXT',
  text: `v=DKIM1; k=rsa; p=${senderKeys.publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`,
});
dns.add(SENDER_DOMAIN, { type: 'TXT', text: 'v=spf1 ip4:127.0.0.1 -all' });
dns.add(`_dmarc.${SENDER_DOMAIN}`, { type: 'TXT', text: 'v=DMARC1; p=reject' });

// --- The messages, built and signed before any clock starts: the same bytes go to both servers.
const PDF = randomBytes(16 * 1024);
const PARAGRAPH =
  'Thanks for the quick turnaround on the order. The parcel arrived this morning, well packed, and everything ' +
  'on the packing list was there except the spare cable, which I think is back-ordered. Could you confirm?';
async function buildMessages(count: number, tag: string): Promise<Buffer[]> {
  const composer = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'windows' });
  const privateKey = senderKeys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const messages: Buffer[] = [];
  for (let i = 0; i < count; i += 1) {
    const info = await composer.sendMail({
      from: 'Zoë Customer <zoe@customer.example>',
      to: `Acme Support <${RECIPIENT}>`,
      replyTo: 'replies@customer.example',
      subject: `Order ${tag}-${i}: arrived, one question`,
      messageId: `<${tag}-${i}.${randomBytes(6).toString('hex')}@customer.example>`,
      text: `Hello,\n\n${`${PARAGRAPH}\n\n`.repeat(8)}Zoë\n`,
      html: `<p>Hello,</p>${`<p>${PARAGRAPH} <b>Order ${i}</b>.</p>\n`.repeat(40)}<p>Zoë</p>`,
      attachments: [{ filename: `invoice-${i}.pdf`, content: PDF, contentType: 'application/pdf' }],
      dkim: { domainName: SENDER_DOMAIN, keySelector: SELECTOR, privateKey },
    });
    messages.push(info.message as Buffer);
  }
  return messages;
}

// --- The webhook receiver: counts `email.received` deliveries, keeps the first for the checks.
let receivedCount = 0;
let receivedTarget = Infinity;
let onTarget: (() => void) | undefined;
let firstReceived: string | undefined;
let lastReceivedAt = 0;
const receiver = createServer((request: IncomingMessage, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    response.writeHead(204).end();
    const body = Buffer.concat(chunks).toString('utf8');
    if (!body.includes('"email.received"')) return;
    firstReceived ??= body;
    receivedCount += 1;
    lastReceivedAt = performance.now();
    if (receivedCount >= receivedTarget) onTarget?.();
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const receiverAddress = receiver.address();
const receiverUrl = `http://127.0.0.1:${typeof receiverAddress === 'object' && receiverAddress ? receiverAddress.port : 0}/hooks`;
const receivedReach = (target: number, timeoutMs: number) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`only ${receivedCount} of ${target} email.received arrived`)),
      timeoutMs,
    );
    receivedTarget = target;
    onTarget = () => {
      clearTimeout(timer);
      receivedTarget = Infinity;
      onTarget = undefined;
      resolve();
    };
    if (receivedCount >= target) onTarget();
  });

// --- Process figures from /proc: CPU (every thread) and memory.
const TICK_MS = 1000 / Number(execFileSync('getconf', ['CLK_TCK']).toString().trim() || 100);
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS; // utime, stime
}
/** CPU time of each thread of a process so far, by thread id: its name (comm) and milliseconds. */
function threadCpuMs(pid: number): Map<number, { name: string; ms: number }> {
  const threads = new Map<number, { name: string; ms: number }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      threads.set(Number(tid), { name, ms: (Number(fields[11]) + Number(fields[12])) * TICK_MS });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return threads;
}
/**
 * Where a window's CPU went, per message: the main thread, each worker thread in the order they were made
 * (Postwire's parse thread, then its authentication thread: the order their --profile files show), V8's
 * helper threads (garbage collection, compilation) and the rest (libuv's pool).
 */
function cpuByThread(
  before: Map<number, { name: string; ms: number }>,
  after: Map<number, { name: string; ms: number }>,
  messages: number,
): Record<string, number> {
  const groups: Record<string, number> = { main: 0 };
  let workers = 0;
  for (const tid of [...after.keys()].sort((a, b) => a - b)) {
    const { name, ms } = after.get(tid)!;
    const spent = (ms - (before.get(tid)?.ms ?? 0)) / messages;
    const group =
      name === 'MainThread' || name === 'node'
        ? 'main'
        : name === 'WorkerThread'
          ? `worker ${++workers}`
          : name.startsWith('V8')
            ? 'V8 helpers'
            : 'other';
    groups[group] = (groups[group] ?? 0) + spent;
  }
  return groups;
}
/**
 * What a SQLite file holds per message, by table and index (dbstat: pages in use, WAL included as read), the
 * largest first: how many times a message's bytes are written.
 */
function storedKbPerMessage(file: string, messages: number): Array<[string, number]> {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    const rows = db.prepare('SELECT name, SUM(pgsize) AS bytes FROM dbstat GROUP BY name').all() as Array<{
      name: string;
      bytes: number;
    }>;
    return rows
      .map((row): [string, number] => [row.name, row.bytes / 1024 / messages])
      .sort((a, b) => b[1] - a[1]);
  } finally {
    db.close();
  }
}
function memoryMb(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: (kb('VmRSS') * 1024) / MB, peak: (kb('VmHWM') * 1024) / MB };
}
/** The most resident memory seen while `during` runs, sampled every 50 ms. */
async function sampledPeak<T>(pid: number, during: () => Promise<T>): Promise<{ value: T; peakRss: number }> {
  let peakRss = memoryMb(pid).rss;
  const timer = setInterval(() => (peakRss = Math.max(peakRss, memoryMb(pid).rss)), 50);
  try {
    const value = await during();
    peakRss = Math.max(peakRss, memoryMb(pid).rss);
    return { value, peakRss };
  } finally {
    clearInterval(timer);
  }
}

/** Sends every message over `CONNECTIONS` pooled connections; resolves when the last 250 has come. */
async function sendAll(port: number, messages: Buffer[]): Promise<void> {
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port,
    secure: false,
    ignoreTLS: true,
    name: 'client.customer.example',
    pool: true,
    maxConnections: CONNECTIONS,
    maxMessages: Infinity,
  });
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: CONNECTIONS }, async () => {
        while (next < messages.length) {
          const raw = messages[next++]!;
          const info = await transport.sendMail({
            envelope: { from: `zoe@${SENDER_DOMAIN}`, to: [RECIPIENT] },
            raw,
          });
          if (info.rejected.length > 0) throw new Error(`refused: ${info.response}`);
        }
      }),
    );
  } finally {
    transport.close();
  }
}

interface Side {
  accepted: number;
  endToEnd?: number;
  cpuPerMessage: number;
  /** CPU per message by thread (ms). */
  threads: Record<string, number>;
  rssBefore: number;
  peakRss: number;
  hwm: number;
  /** SQLite only: KB per message by table or index. */
  stored?: Array<[string, number]>;
}

async function bareRound(warm: Buffer[], measured: Buffer[]): Promise<Side> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'postwire-bench-bare-'));
  const child = fork(path.join(here, 'receiving-bare.ts'), [path.join(dir, 'bare.sqlite')], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const next = <T>(type: string) =>
    new Promise<T>((resolve) => {
      const listener = (message: { type: string }) => {
        if (message.type !== type) return;
        child.off('message', listener);
        resolve(message as T);
      };
      child.on('message', listener);
    });
  try {
    const { port } = await next<{ port: number }>('ready');
    if (pin) execFileSync('taskset', ['-a', '-p', '-c', SERVER_CPU, String(child.pid)], { stdio: 'ignore' });
    await sendAll(port, warm);
    const rssBefore = memoryMb(child.pid!).rss;
    const cpuBefore = cpuMs(child.pid!);
    const threadsBefore = threadCpuMs(child.pid!);
    const started = performance.now();
    const { peakRss } = await sampledPeak(child.pid!, () => sendAll(port, measured));
    const seconds = (performance.now() - started) / 1000;
    const cpuPerMessage = (cpuMs(child.pid!) - cpuBefore) / measured.length;
    const threads = cpuByThread(threadsBefore, threadCpuMs(child.pid!), measured.length);
    const hwm = memoryMb(child.pid!).peak;
    const counted = next<{ rows: number }>('count');
    child.send({ type: 'count' });
    const { rows } = await counted;
    if (rows !== warm.length + measured.length) throw new Error(`the bare server stored ${rows} messages`);
    const stored = storedKbPerMessage(path.join(dir, 'bare.sqlite'), rows);
    return { accepted: measured.length / seconds, cpuPerMessage, threads, rssBefore, peakRss, hwm, stored };
  } finally {
    await stopChild(child, () => child.send({ type: 'stop' }));
    rmSync(dir, { recursive: true, force: true });
  }
}

async function postwireRound(warm: Buffer[], measured: Buffer[]): Promise<Side> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'postwire-bench-receiving-'));
  let schema: string | undefined;
  let databaseUrl: string | undefined;
  if (POSTGRES_URL) {
    schema = benchSchemaName('bench_receiving');
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    await client.query(`CREATE SCHEMA ${schema}`);
    await client.end();
    const url = new URL(POSTGRES_URL);
    url.searchParams.set('options', `-c search_path=${schema}`);
    databaseUrl = url.toString();
  }
  const inboundPort = await freePort();
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    PORT: '0',
    POSTWIRE_DATA_DIR: dir,
    ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
    POSTWIRE_BOOTSTRAP_KEY: KEY,
    POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 11).toString('hex'),
    POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
    INBOUND_MX_HOST: MX_HOST,
    MAIL_HOSTNAME: MX_HOST,
    DNS_SERVERS: dns.address,
    INBOUND_SMTP_PORT: String(inboundPort),
    INBOUND_MESSAGES_PER_MINUTE: '1000000',
    LOG_FORMAT: 'json',
    LOG_LEVEL: 'info',
    // --profile <dir>: V8 CPU profiles of the server's main thread and of each of its threads, start to end.
    // --statements <file>: every SQLite statement's calls and wall time, start to end (bench/statement-tally.ts).
    ...(args.profile || args.statements
      ? {
          NODE_OPTIONS: [
            args.profile ? `--cpu-prof --cpu-prof-dir=${path.resolve(args.profile)}` : '',
            args.statements ? `--import ${path.join(here, 'statement-tally.ts')}` : '',
          ].join(' '),
          ...(args.statements ? { STATEMENT_TALLY_FILE: path.resolve(args.statements) } : {}),
        }
      : {}),
  };
  const command = pin ? 'taskset' : process.execPath;
  const argv = [...(pin ? ['-c', SERVER_CPU, process.execPath] : []), 'src/cli.ts', 'serve'];
  const child = spawn(command, argv, { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'] });
  let logLines = 0;
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`postwire serve exited (${code})`)));
      createInterface({ input: child.stdout! }).on('line', (line) => {
        logLines += 1;
        if (!line.startsWith('{')) return;
        const entry = JSON.parse(line) as { url?: string };
        if (entry.url) resolve(entry.url);
      });
    });
    const api = async (method: string, pathname: string, body?: unknown) => {
      const response = await fetch(`${url}${pathname}`, {
        method,
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await response.text();
      if (response.status >= 300) throw new Error(`${method} ${pathname}: ${response.status} ${text}`);
      return JSON.parse(text);
    };
    await api('POST', '/v1/webhooks', { url: receiverUrl, events: ['email.received'], secret: SECRET });
    const domain = await api('POST', '/v1/domains', { name: DOMAIN, receiving: true });
    for (const record of domain.records as Array<{ type: string; name: string; value: string }>) {
      if (record.type === 'MX')
        dns.set(record.name, 'MX', [{ type: 'MX', exchange: record.value, priority: 10 }]);
      else if (record.name.includes('_domainkey'))
        dns.set(record.name, 'TXT', [{ type: 'TXT', text: record.value }]);
    }
    const verified = await api('POST', `/v1/domains/${domain.id}/verify`);
    if (!verified.receiving_verified)
      throw new Error(`the domain did not verify: ${JSON.stringify(verified)}`);
    await api('POST', '/v1/inbound-routes', { match: RECIPIENT, action: 'webhook' });

    const pid = child.pid!;
    receivedCount = 0;
    firstReceived = undefined;
    await sendAll(inboundPort, warm);
    await receivedReach(warm.length, 60_000);
    checkAuthentication(firstReceived);
    const logLinesBefore = logLines;
    const rssBefore = memoryMb(pid).rss;
    const cpuBefore = cpuMs(pid);
    const threadsBefore = threadCpuMs(pid);
    const started = performance.now();
    const { value: acceptedSeconds, peakRss } = await sampledPeak(pid, async () => {
      const reached = receivedReach(warm.length + measured.length, 120_000);
      await sendAll(inboundPort, measured);
      const acceptedAt = (performance.now() - started) / 1000;
      await reached;
      return acceptedAt;
    });
    const endSeconds = (lastReceivedAt - started) / 1000;
    const cpuPerMessage = (cpuMs(pid) - cpuBefore) / measured.length;
    const threads = cpuByThread(threadsBefore, threadCpuMs(pid), measured.length);
    const hwm = memoryMb(pid).peak;
    const stored = databaseUrl
      ? undefined
      : storedKbPerMessage(path.join(dir, 'postwire.db'), warm.length + measured.length);
    if (logLines - logLinesBefore > measured.length * 3)
      console.warn(`note: the server logged ${logLines - logLinesBefore} lines in the window`);
    return {
      accepted: measured.length / acceptedSeconds,
      endToEnd: measured.length / endSeconds,
      cpuPerMessage,
      threads,
      rssBefore,
      peakRss,
      hwm,
      stored,
    };
  } finally {
    await stopChild(child, () => child.kill('SIGTERM'));
    rmSync(dir, { recursive: true, force: true });
    if (schema) {
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    }
  }
}

/** The message authenticates as sent (SPF, DKIM and DMARC pass): otherwise the bench measures less work. */
function checkAuthentication(body: string | undefined): void {
  const auth = body ? JSON.parse(body).data?.authentication : undefined;
  const dkim = (auth?.dkim ?? []) as Array<{ result: string }>;
  if (
    auth?.spf?.result !== 'pass' ||
    !dkim.some((s) => s.result === 'pass') ||
    auth?.dmarc?.result !== 'pass'
  )
    throw new Error(`the bench's message did not authenticate: ${JSON.stringify(auth)}`);
}

const sample = await buildMessages(1, 'size');
console.log(
  `${MESSAGES} messages of ${(sample[0]!.length / 1024).toFixed(1)} KB (text, html, a 16 KB PDF; DKIM-signed), ` +
    `${CONNECTIONS} SMTP connections, Postwire on ${POSTGRES_URL ? 'PostgreSQL' : 'SQLite'}, ${ROUNDS} round(s); ` +
    `${cpuCount} CPUs, ` +
    (pin
      ? `the server measured pinned to CPU ${SERVER_CPU}, the client, DNS and webhook receiver to CPU ${CLIENT_CPU}`
      : 'no CPU pinning'),
);

const rounds: Array<{ bare: Side; postwire: Side }> = [];
const f0 = (n: number) => n.toFixed(0);
const f2 = (n: number) => n.toFixed(2);
for (let round = 1; round <= ROUNDS; round += 1) {
  const warm = await buildMessages(WARM_UP, `warm${round}`);
  const measured = await buildMessages(MESSAGES, `round${round}`);
  const bare = await bareRound(warm, measured);
  const postwire = await postwireRound(warm, measured);
  rounds.push({ bare, postwire });
  console.log(
    `round ${round}: bare ${f0(bare.accepted)}/s · postwire accepted ${f0(postwire.accepted)}/s ` +
      `(${f2(postwire.accepted / bare.accepted)}), end to end ${f0(postwire.endToEnd!)}/s ` +
      `(${f2(postwire.endToEnd! / bare.accepted)}) · CPU per message: postwire ${f2(postwire.cpuPerMessage)} ms, ` +
      `bare ${f2(bare.cpuPerMessage)} ms · postwire RSS ${f0(postwire.rssBefore)} → ${f0(postwire.peakRss)} MB ` +
      `(VmHWM ${f0(postwire.hwm)} MB), bare ${f0(bare.rssBefore)} → ${f0(bare.peakRss)} MB`,
  );
}
const of = (pick: (r: (typeof rounds)[number]) => number) => median(rounds.map(pick));
console.log('');
console.log(`bare smtp-server, stored (last 250):        ${f0(of((r) => r.bare.accepted))} messages/s`);
console.log(`postwire accepted (last 250):               ${f0(of((r) => r.postwire.accepted))} messages/s`);
console.log(`postwire end to end (last email.received):  ${f0(of((r) => r.postwire.endToEnd!))} messages/s`);
console.log(
  `ratios to bare: accepted ${f2(of((r) => r.postwire.accepted / r.bare.accepted))}, ` +
    `end to end ${f2(of((r) => r.postwire.endToEnd! / r.bare.accepted))}`,
);
console.log(
  `CPU per message (server process, all threads): postwire ${f2(of((r) => r.postwire.cpuPerMessage))} ms ` +
    `(SMTP to webhook), bare ${f2(of((r) => r.bare.cpuPerMessage))} ms; ratio bare ÷ postwire ` +
    `${f2(of((r) => r.bare.cpuPerMessage / r.postwire.cpuPerMessage))}`,
);
const threadOrder = (name: string) => ['main', 'worker 1', 'worker 2', 'V8 helpers'].indexOf(name) >>> 0;
const threadNames = [...new Set(rounds.flatMap((r) => Object.keys(r.postwire.threads)))].sort(
  (a, b) => threadOrder(a) - threadOrder(b),
);
console.log(
  `postwire CPU per message by thread: ` +
    threadNames.map((name) => `${name} ${f2(of((r) => r.postwire.threads[name] ?? 0))} ms`).join(', ') +
    ' (worker 1 parses, worker 2 authenticates)',
);
console.log(
  `postwire server memory: RSS ${f0(of((r) => r.postwire.rssBefore))} MB before the window, ` +
    `${f0(of((r) => r.postwire.peakRss))} MB at most during it, VmHWM ${f0(of((r) => r.postwire.hwm))} MB; ` +
    `bare ${f0(of((r) => r.bare.rssBefore))} → ${f0(of((r) => r.bare.peakRss))} MB`,
);

// The last round's database, per message: the largest tables and indexes.
const last = rounds.at(-1)!;
const storedLine = (stored: Array<[string, number]> | undefined) =>
  (stored ?? [])
    .filter(([, kb]) => kb >= 0.5)
    .map(([name, kb]) => `${name} ${kb.toFixed(1)}`)
    .join(', ');
const totalKb = (stored: Array<[string, number]> | undefined) =>
  (stored ?? []).reduce((sum, [, kb]) => sum + kb, 0).toFixed(1);
if (last.postwire.stored)
  console.log(
    `stored per message (KB, SQLite pages in use): postwire ${totalKb(last.postwire.stored)} ` +
      `(${storedLine(last.postwire.stored)}); bare ${totalKb(last.bare.stored)}`,
  );

receiver.close();
await dns.close();
