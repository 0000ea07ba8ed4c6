// Emails per second through Postwire (accepted by the API, then delivered by its worker to a local SMTP
// server) as a ratio to nodemailer sending the same messages straight to that server at the same
// concurrency: the price of storing every message before the 202 and tracking it per recipient.
//
//   npm run bench:send                                  # 2000 emails, concurrency 16, SQLite
//   npm run bench:send -- --emails 5000 --concurrency 32
//   npm run bench:send -- --batch 100                   # POST /v1/emails/batch, 100 emails a request
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:send
//   npm run bench:send -- --profile /tmp/prof         # CPU-profile the Postwire process's measured window
//   npm run bench:send -- --json                      # the report on stderr, the target as JSON on stdout
//   npm run bench:send -- --emails 100 --warmup 20      # a smoke run: shows it works, figures rough
//   npm run bench:send -- --statements /tmp/tally.txt    # the Postwire process's statements (statement-tally.ts)
//   npm run bench:send -- --direct                      # direct delivery (the sink as the MX) instead of the relay
//
// Both sides deliver to the same smtp-server, in a child process of its own; Postwire runs in another child
// (API and worker in one process, as `npm start` does) and this process only sends requests.
//
// Fairness on a small machine: with taskset and two or more CPUs, the sender being measured (nodemailer in
// this process, or the Postwire child) has CPU 1 to itself; the sink, and this process while it only sends
// requests to Postwire, share CPU 0. PostgreSQL's own processes are not pinned.
import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import nodemailer from 'nodemailer';
import { summarizeProfile } from './profile.ts';
import { type BenchReport, canPin, emailMessage, humanOutput, median } from './shared.ts';

/** Delivered emails per second, as a share of nodemailer's: the same on both engines (issue 43). */
const AIMS = { sqlite: 0.7, postgres: 0.7 };
const SINK_CPU = '0';
const SENDER_CPU = '1';

const { values: args } = parseArgs({
  options: {
    emails: { type: 'string', default: '2000' },
    concurrency: { type: 'string', default: '16' },
    batch: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '1' },
    // Unmeasured sends before the clock starts (nodemailer's before round 1, Postwire's before each window):
    // by default 1,000 and 200; one number for both, for a smoke run that only shows the bench works.
    warmup: { type: 'string' },
    profile: { type: 'string' },
    statements: { type: 'string' },
    'no-pin': { type: 'boolean', default: false },
    // Postwire delivers directly (the sink is the recipients' MX, SEND_CONCURRENCY_PER_HOST as --concurrency
    // under the unknown destination's 10 connections) instead of through the relay's pool.
    direct: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
const log = humanOutput(args.json);
const EMAILS = Number(args.emails);
const CONCURRENCY = Number(args.concurrency);
const BATCH = Number(args.batch);
const ROUNDS = Number(args.rounds);
const POSTWIRE_WARM_UP = args.warmup === undefined ? 200 : Number(args.warmup);
const NODEMAILER_WARM_UP = args.warmup === undefined ? 1000 : Number(args.warmup);
const here = path.dirname(fileURLToPath(import.meta.url));

// The same message on both sides: a short transactional email with html and text.
const message = emailMessage;

// Read before pinning: once pinned, availableParallelism() counts only the CPU this process may use.
const cpuCount = os.availableParallelism();
const pin = canPin(Boolean(args['no-pin']));
/** Moves a process, every thread of it, to one CPU (when pinning). */
const pinTo = (pid: number, cpu: string) => {
  if (pin) execFileSync('taskset', ['-a', '-p', '-c', cpu, String(pid)], { stdio: 'ignore' });
};

interface Child {
  child: ChildProcess;
  next<T>(type: string): Promise<T>;
  send(message: object): void;
  stop(): Promise<void>;
}

function start(
  script: string,
  argv: string[] = [],
  options: { execArgv?: string[]; env?: NodeJS.ProcessEnv } = {},
): Child {
  const child = fork(path.join(here, script), argv, {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    ...(options.execArgv && { execArgv: [...process.execArgv, ...options.execArgv] }),
    ...(options.env && { env: { ...process.env, ...options.env } }),
  });
  const next = <T>(type: string) =>
    new Promise<T>((resolve, reject) => {
      const onMessage = (message: { type: string }) => {
        if (message.type !== type) return;
        child.off('message', onMessage);
        child.off('exit', onExit);
        resolve(message as T);
      };
      const onExit = (code: number | null) => reject(new Error(`${script} exited (${code})`));
      child.on('message', onMessage);
      child.once('exit', onExit);
    });
  return {
    child,
    next,
    send: (message) => child.send(message),
    stop: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.send({ type: 'stop' });
      }),
  };
}

/** Runs `count` tasks with at most `limit` at once. */
async function pool(count: number, limit: number, task: (index: number) => Promise<void>): Promise<void> {
  let nextIndex = 0;
  const runners = Array.from({ length: Math.min(limit, count) }, async () => {
    while (nextIndex < count) await task(nextIndex++);
  });
  await Promise.all(runners);
}

const cpuMicros = () => {
  const usage = process.cpuUsage();
  return usage.user + usage.system;
};

/** A child's CPU time so far (the sink and the Postwire server answer `cpu`). */
const childCpuMicros = async (child: Child) => {
  const answer = child.next<{ micros: number }>('cpu');
  child.send({ type: 'cpu' });
  return (await answer).micros;
};

/** CPU time per email, in ms, of each process taking part in a run. */
interface CpuPerEmail {
  /** nodemailer (this process), or the Postwire process (API and worker). */
  sender: number;
  sink: number;
  /** This process sending the HTTP requests (Postwire runs only). */
  client: number;
}

async function nodemailerRun(
  sink: Child,
  port: number,
  offset: number,
  emails = EMAILS,
): Promise<{ rate: number; cpu: CpuPerEmail }> {
  pinTo(process.pid, SENDER_CPU);
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port,
    pool: true,
    maxConnections: CONCURRENCY,
    maxMessages: Infinity,
  });
  const reached = sink.next('reached');
  sink.send({ type: 'target', count: offset + emails });
  const sinkBefore = await childCpuMicros(sink);
  const started = performance.now();
  const cpuBefore = cpuMicros();
  await pool(emails, CONCURRENCY, async (i) => {
    await transport.sendMail(message(i));
  });
  await reached;
  const seconds = (performance.now() - started) / 1000;
  const perEmail = (micros: number) => micros / 1000 / emails;
  const cpu = {
    sender: perEmail(cpuMicros() - cpuBefore),
    sink: perEmail((await childCpuMicros(sink)) - sinkBefore),
    client: 0,
  };
  transport.close();
  return { rate: emails / seconds, cpu };
}

const profiles: string[] = [];
if (args.profile) mkdirSync(args.profile, { recursive: true });

async function postwireRun(
  sink: Child,
  port: number,
  offset: number,
): Promise<{ accepted: number; delivered: number; cpu: CpuPerEmail }> {
  // This process only sends requests now: beside the sink, off the CPU Postwire has to itself.
  pinTo(process.pid, SINK_CPU);
  // --statements <file>: every statement of the Postwire process and its wall time, start to end, each run's
  // tally in a file of its own (`<file>.<run>`).
  const server = start(
    'send-server.ts',
    [String(port), String(CONCURRENCY), ...(args.direct ? ['direct'] : [])],
    args.statements
      ? {
          execArgv: ['--import', path.join(here, 'statement-tally.ts')],
          env: { STATEMENT_TALLY_FILE: `${path.resolve(args.statements)}.${offset}` },
        }
      : {},
  );
  pinTo(server.child.pid!, SENDER_CPU);
  const ready = await server.next<{ port: number; key: string }>('ready');
  const url = `http://127.0.0.1:${ready.port}`;
  const headers = { authorization: `Bearer ${ready.key}`, 'content-type': 'application/json' };
  const post = async (pathname: string, body: unknown) => {
    const response = await fetch(`${url}${pathname}`, {
      method: 'POST',
      headers,
      body: JSON.stringify(body),
    });
    if (response.status !== 202)
      throw new Error(`${pathname} answered ${response.status}: ${await response.text()}`);
    await response.arrayBuffer();
  };
  // Warm the server (JIT, schemas) with a few sends before the clock starts; the sink counts them too.
  for (let i = 0; i < POSTWIRE_WARM_UP; i += 1) await post('/v1/emails', message(i));
  const warm = offset + POSTWIRE_WARM_UP;
  await new Promise((resolve) => setTimeout(resolve, 500));

  // --profile <dir>: a CPU profile of the Postwire process over the measured window (not start-up, warm-up).
  const profileFile = args.profile
    ? path.join(args.profile, `postwire-${profiles.length + 1}.cpuprofile`)
    : undefined;
  if (profileFile) server.send({ type: 'profile-start' });
  const serverBefore = await childCpuMicros(server);
  const sinkBefore = await childCpuMicros(sink);
  const clientBefore = cpuMicros();
  const reached = sink.next('reached');
  sink.send({ type: 'target', count: warm + EMAILS });
  const started = performance.now();
  if (BATCH > 1) {
    await pool(Math.ceil(EMAILS / BATCH), CONCURRENCY, async (b) => {
      const size = Math.min(BATCH, EMAILS - b * BATCH);
      await post(
        '/v1/emails/batch',
        Array.from({ length: size }, (_, i) => message(b * BATCH + i)),
      );
    });
  } else {
    await pool(EMAILS, CONCURRENCY, (i) => post('/v1/emails', message(i)));
  }
  const acceptedSeconds = (performance.now() - started) / 1000;
  await reached;
  const deliveredSeconds = (performance.now() - started) / 1000;
  const perEmail = (micros: number) => micros / 1000 / EMAILS;
  const cpu = {
    sender: perEmail((await childCpuMicros(server)) - serverBefore),
    sink: perEmail((await childCpuMicros(sink)) - sinkBefore),
    client: perEmail(cpuMicros() - clientBefore),
  };
  if (profileFile) {
    const profiled = server.next('profiled');
    server.send({ type: 'profile-stop', file: profileFile });
    await profiled;
    profiles.push(profileFile);
  }
  await server.stop();
  return { accepted: EMAILS / acceptedSeconds, delivered: EMAILS / deliveredSeconds, cpu };
}

const sink = start('send-sink.ts');
pinTo(sink.child.pid!, SINK_CPU);
const { port } = await sink.next<{ port: number }>('ready');
const engine = process.env.DATABASE_URL ? 'postgres' : 'sqlite';
log(
  `${EMAILS} emails, concurrency ${CONCURRENCY}${BATCH > 1 ? `, batches of ${BATCH}` : ''}, ${engine}, ` +
    `${args.direct ? 'direct delivery' : 'through the relay'}, ` +
    `${ROUNDS} round(s); ${cpuCount} CPUs, ` +
    (pin
      ? `the sender measured pinned to CPU ${SENDER_CPU}, the sink and the request client to CPU ${SINK_CPU}`
      : 'no CPU pinning'),
);

let delivered = 0;
// Warm nodemailer (this process's JIT) before round 1, as Postwire warms up before each of its windows:
// without it nodemailer sped up from round to round (782, 1,050 and 1,343/s in one 3-round run) while
// Postwire stayed flat, and round 1's ratio flattered Postwire.
await nodemailerRun(sink, port, delivered, NODEMAILER_WARM_UP);
delivered += NODEMAILER_WARM_UP;
const results: Array<{
  nodemailer: number;
  nodemailerCpu: CpuPerEmail;
  accepted: number;
  delivered: number;
  cpu: CpuPerEmail;
}> = [];
const ms = (n: number) => n.toFixed(2);
for (let round = 0; round < ROUNDS; round += 1) {
  const direct = await nodemailerRun(sink, port, delivered);
  delivered += EMAILS;
  const postwire = await postwireRun(sink, port, delivered);
  delivered += EMAILS + POSTWIRE_WARM_UP;
  results.push({ nodemailer: direct.rate, nodemailerCpu: direct.cpu, ...postwire });
  log(
    `round ${round + 1}: nodemailer ${direct.rate.toFixed(0)}/s · postwire accepted ${postwire.accepted.toFixed(0)}/s, ` +
      `delivered ${postwire.delivered.toFixed(0)}/s · ratio ${(postwire.delivered / direct.rate).toFixed(2)} · ` +
      `CPU per email: postwire ${ms(postwire.cpu.sender)} ms, its sink ${ms(postwire.cpu.sink)} ms, ` +
      `request client ${ms(postwire.cpu.client)} ms; nodemailer ${ms(direct.cpu.sender)} ms, its sink ` +
      `${ms(direct.cpu.sink)} ms`,
  );
}
await sink.stop();

// Medians over rounds; the ratio is the median of each round's own ratio, so a round that other work on the
// machine slowed down for both sides still counts as one comparison.
const nm = median(results.map((result) => result.nodemailer));
const accepted = median(results.map((result) => result.accepted));
const sent = median(results.map((result) => result.delivered));
const ratio = median(results.map((result) => result.delivered / result.nodemailer));
log('');
log(`nodemailer → smtp-server directly:      ${nm.toFixed(0)} emails/s`);
log(`postwire API accepted (202):           ${accepted.toFixed(0)} emails/s`);
log(`postwire accepted → delivered:         ${sent.toFixed(0)} emails/s`);
log(`ratio (postwire delivered / nodemailer): ${ratio.toFixed(2)} (aim ≥ ${AIMS[engine]})`);
const cpuOf = (of: (result: (typeof results)[number]) => number) => ms(median(results.map(of)));
log(
  `CPU per email: postwire ${cpuOf((r) => r.cpu.sender)} ms (API and worker), its sink ` +
    `${cpuOf((r) => r.cpu.sink)} ms, the request client ${cpuOf((r) => r.cpu.client)} ms; ` +
    `nodemailer ${cpuOf((r) => r.nodemailerCpu.sender)} ms, its sink ${cpuOf((r) => r.nodemailerCpu.sink)} ms`,
);

for (const file of profiles) log(`\n${summarizeProfile(file)}`);

if (args.json) {
  const report: BenchReport = {
    bench: 'send',
    targets: [
      {
        target: `emails delivered over SMTP (${BATCH > 1 ? `${BATCH} per request` : '1 per request'}${args.direct ? ', direct' : ''})`,
        engine,
        postwire: sent,
        bare: nm,
        ratio,
        cpuRatio: median(results.map((r) => r.nodemailerCpu.sender / r.cpu.sender)),
        aim: AIMS[engine],
        warnings: [],
      },
    ],
    latencies: [],
    warnings: [],
  };
  console.log(JSON.stringify(report));
}
