// Opens recorded per second on the public route (GET /o/{token}: token check, counters, daily numbers,
// the email.opened event and its webhook delivery row, one transaction each) against bare Fastify serving
// the same GIF with the same headers, on this machine.
//
//   npm run bench:engagement                    # SQLite; 10 connections, 1 s warm-up + 5 s per target
//   npm run bench:engagement -- --rounds 3      # medians of 3 rounds
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:engagement
//
// As bench/api.ts: the server runs in a child process; with taskset and two CPUs or more, server and load
// generator each get a CPU of their own. Every measured request cycles over 1000 recipients' tokens.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import type { EngagementChildMessage, EngagementParentMessage } from './engagement-server.ts';
import { canPin, median } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    connections: { type: 'string', default: '10' },
    duration: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '1' },
    'no-pin': { type: 'boolean', default: false },
  },
});
const connections = Number(args.connections);
const duration = Number(args.duration);
const warmup = Number(args.warmup);
const rounds = Number(args.rounds);
const here = path.dirname(fileURLToPath(import.meta.url));
// Read before pinning: once pinned, availableParallelism() counts only the CPU this process may use.
const cpuCount = os.availableParallelism();
const pin = canPin(Boolean(args['no-pin']));
if (pin) execFileSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' });

interface Child {
  child: ChildProcess;
  port: number;
  paths: string[];
  ask<T extends EngagementChildMessage['type']>(
    message: EngagementParentMessage,
    type: T,
  ): Promise<Extract<EngagementChildMessage, { type: T }>>;
  stop(): Promise<void>;
}

async function start(mode: 'real' | 'bare'): Promise<Child> {
  const script = [path.join(here, 'engagement-server.ts'), mode];
  const options = { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] as ('ignore' | 'inherit' | 'ipc')[] };
  const child = pin
    ? spawn('taskset', ['-c', '0', process.execPath, ...script], options)
    : spawn(process.execPath, script, options);
  const next = <T extends EngagementChildMessage['type']>(type: T) =>
    new Promise<Extract<EngagementChildMessage, { type: T }>>((resolve, reject) => {
      const onMessage = (message: EngagementChildMessage) => {
        if (message.type !== type) return;
        child.off('message', onMessage);
        resolve(message as Extract<EngagementChildMessage, { type: T }>);
      };
      child.on('message', onMessage);
      child.once('exit', (code) => reject(new Error(`${mode} server exited (${code})`)));
    });
  const ready = await next('ready');
  return {
    child,
    port: ready.port,
    paths: ready.paths,
    async ask(message, type) {
      const answer = next(type);
      child.send(message);
      return answer;
    },
    async stop() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ type: 'stop' } satisfies EngagementParentMessage);
      await exited;
    },
  };
}

interface Row {
  rps: number;
  p99: number;
  bad: number;
  micros: number;
  recorded?: number;
}

async function measure(server: Child, real: boolean): Promise<Row> {
  let next = 0;
  const options = {
    url: `http://127.0.0.1:${server.port}`,
    connections,
    headers: { 'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0' },
    requests: [
      {
        setupRequest: (request: Record<string, unknown>) => ({
          ...request,
          path: server.paths[next++ % server.paths.length],
        }),
      },
    ],
  };
  await autocannon({ ...options, duration: warmup });
  const eventsBefore = real ? (await server.ask({ type: 'events' }, 'events')).count : 0;
  const cpuBefore = (await server.ask({ type: 'cpu' }, 'cpu')).micros;
  const result = await autocannon({ ...options, duration });
  const cpu = (await server.ask({ type: 'cpu' }, 'cpu')).micros - cpuBefore;
  const recorded = real ? (await server.ask({ type: 'events' }, 'events')).count - eventsBefore : undefined;
  const ok = Number(result.statusCodeStats[200]?.count ?? 0);
  return {
    rps: result.requests.total / result.duration,
    p99: result.latency.p99,
    bad: result.requests.total - ok + result.errors,
    micros: cpu / Math.max(1, result.requests.total),
    ...(recorded !== undefined ? { recorded: recorded / result.duration } : {}),
  };
}

const results: { real: Row[]; bare: Row[] } = { real: [], bare: [] };
for (let index = 0; index < rounds; index++) {
  for (const mode of ['bare', 'real'] as const) {
    const server = await start(mode);
    results[mode].push(await measure(server, mode === 'real'));
    await server.stop();
  }
}
const real = median(results.real.map((row) => row.rps));
const bare = median(results.bare.map((row) => row.rps));
const engine = process.env.DATABASE_URL ? 'PostgreSQL' : 'SQLite';
console.log(`\n${engine}, ${connections} connections, ${duration} s, pinned: ${pin}, CPUs: ${cpuCount}`);
console.table({
  'GET /o/{token} (recorded)': {
    'req/s': Math.round(real),
    'opens recorded/s': Math.round(median(results.real.map((row) => row.recorded ?? 0))),
    'p99 ms': median(results.real.map((row) => row.p99)),
    'server CPU µs/req': Math.round(median(results.real.map((row) => row.micros))),
    'non-200': results.real.reduce((sum, row) => sum + row.bad, 0),
  },
  'bare Fastify, same GIF': {
    'req/s': Math.round(bare),
    'opens recorded/s': 0,
    'p99 ms': median(results.bare.map((row) => row.p99)),
    'server CPU µs/req': Math.round(median(results.bare.map((row) => row.micros))),
    'non-200': results.bare.reduce((sum, row) => sum + row.bad, 0),
  },
});
console.log(`ratio real / bare: ${(real / bare).toFixed(2)}`);
