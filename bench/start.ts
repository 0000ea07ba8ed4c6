// How long `node src/main.ts` takes to listen, and the CPU it spends getting there: what each of the suite's
// many server processes (test/helpers/process.ts) costs before its test can begin. N starts on a migrated
// SQLite data directory; with --root, this checkout and another one alternate, so load on the machine weighs
// on both alike.
//
//   npm run bench:start                                   # 9 starts
//   npm run bench:start -- --starts 15 --root ../old-checkout
//   npm run bench:start -- --compile-cache                # with NODE_COMPILE_CACHE, as the tests' children run
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { median } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    starts: { type: 'string', default: '9' },
    root: { type: 'string' },
    'compile-cache': { type: 'boolean', default: false },
  },
});
const STARTS = Number(args.starts);
const here = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const roots = args.root ? [here, path.resolve(args.root)] : [here];
const scratch = mkdtempSync(path.join(os.tmpdir(), 'postwire-bench-start-'));
const TICKS_PER_SECOND = 100;

/** The CPU a process has spent so far (user + system, all its threads), from /proc. */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  // utime and stime are fields 14 and 15 of the line; index 11 and 12 once the pid and name are cut off.
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
}

interface Start {
  listeningMs: number;
  cpuMs: number;
  /** A route's first request, then its second: what compiling its schemas on first use costs that request. */
  firstRequestMs: number;
  secondRequestMs: number;
}

const KEY = 'pw_bench_start_key_0123456789abcdef';

/** How long `GET /v1/webhooks` takes to answer, in ms. */
async function timedRequest(url: string): Promise<number> {
  const began = performance.now();
  const response = await fetch(`${url}/v1/webhooks`, { headers: { authorization: `Bearer ${KEY}` } });
  if (response.status !== 200)
    throw new Error(`GET /v1/webhooks: ${response.status} ${await response.text()}`);
  await response.arrayBuffer();
  return performance.now() - began;
}

/** One start: from spawn to the "listening" log line, then two requests; then SIGTERM and wait for the exit. */
async function start(root: string, dataDir: string, cacheDir: string): Promise<Start> {
  const began = performance.now();
  const child = spawn(process.execPath, ['src/main.ts'], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      POSTWIRE_DATA_DIR: dataDir,
      PORT: '0',
      LOG_FORMAT: 'json',
      POSTWIRE_BOOTSTRAP_KEY: KEY,
      POSTWIRE_ENCRYPTION_KEY: 'ab'.repeat(32),
      ...(args['compile-cache'] ? { NODE_COMPILE_CACHE: cacheDir } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const listening = await new Promise<{ listeningMs: number; cpuMs: number; url: string }>(
    (resolve, reject) => {
      let pending = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        pending += chunk;
        const url = /"url":"([^"]+)"[^\n]*"msg":"[^"]*listening/i.exec(pending)?.[1];
        if (url) resolve({ listeningMs: performance.now() - began, cpuMs: cpuMs(child.pid!), url });
      });
      void exited.then(() => reject(new Error(`exited before listening:\n${stderr}`)));
    },
  );
  const firstRequestMs = await timedRequest(listening.url);
  const secondRequestMs = await timedRequest(listening.url);
  child.kill('SIGTERM');
  await exited;
  return { listeningMs: listening.listeningMs, cpuMs: listening.cpuMs, firstRequestMs, secondRequestMs };
}

const results = new Map<string, Start[]>(roots.map((root) => [root, []]));
const dirs = new Map(
  roots.map((root, index) => [
    root,
    { data: path.join(scratch, `data-${index}`), cache: path.join(scratch, `cache-${index}`) },
  ]),
);
try {
  // One unmeasured start each: it migrates the data directory (and fills the compile cache when asked).
  for (const root of roots) await start(root, dirs.get(root)!.data, dirs.get(root)!.cache);
  for (let round = 0; round < STARTS; round++) {
    for (const root of roots)
      results.get(root)!.push(await start(root, dirs.get(root)!.data, dirs.get(root)!.cache));
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

console.log(
  `${STARTS} starts each, interleaved${args['compile-cache'] ? ', NODE_COMPILE_CACHE set' : ''}; medians`,
);
const columns: Array<[string, keyof Start]> = [
  ['to listening ms', 'listeningMs'],
  ['CPU ms', 'cpuMs'],
  ['1st GET ms', 'firstRequestMs'],
  ['2nd GET ms', 'secondRequestMs'],
];
console.log('root'.padEnd(30), ...columns.map(([title]) => title.padStart(16)));
for (const [root, starts] of results) {
  const label = root === here ? '(this checkout)' : path.relative(here, root) || root;
  const medians = columns.map(([, field]) => median(starts.map((start) => start[field])));
  console.log(label.padEnd(30), ...medians.map((value) => value.toFixed(0).padStart(16)));
}
