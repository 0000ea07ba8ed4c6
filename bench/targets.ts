// Every target (issues 12 and 43) in one run, on SQLite and on PostgreSQL, as one table: each a ratio of
// Postwire to a bare baseline measured in the same run (so other work on the machine weighs on both sides).
//
//   npm run bench                          # every target, both engines (about 5 minutes)
//   npm run bench -- --quick               # a smoke run of both engines (CI's): that it runs and prints
//   npm run bench -- --only sqlite         # one engine (sqlite or postgres)
//   npm run bench -- --rounds 3            # medians of 3 rounds in every bench (3 times as long)
//   npm run bench -- --postgres-url postgres://postgres@127.0.0.1:5432/test
//   npm run bench -- --markdown            # also the table as bench/README.md shows it
//   npm run bench -- --json                # the figures as JSON on stdout instead of the table
//
// It measures nothing itself: it runs bench/api.ts, bench/send.ts and bench/delivery.ts with --json, one at a
// time (each pins its server, sink and load generator apart as it describes), and gathers what they print.
// Their own reports (CPU per request, bad requests, warnings) go to stderr as they run.
import { execFileSync, spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  type BenchEngine,
  type BenchReport,
  DEFAULT_POSTGRES_URL,
  findPostgres,
  type LatencyResult,
  type TargetResult,
} from './shared.ts';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    rounds: { type: 'string', default: '1' },
    'postgres-url': { type: 'string', default: DEFAULT_POSTGRES_URL },
    markdown: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
if (args.only !== undefined && args.only !== 'sqlite' && args.only !== 'postgres') {
  throw new Error(`--only takes sqlite or postgres, not ${args.only}`);
}
const rounds = Number(args.rounds);
if (!Number.isInteger(rounds) || rounds < 1 || rounds > 5) {
  throw new Error(`--rounds takes a whole number from 1 to 5, not ${args.rounds}`);
}
const here = path.dirname(fileURLToPath(import.meta.url));

/**
 * Each bench's arguments for the targets: the pairs and runs that are targets only, at full length or (with
 * --quick) just long enough to show that everything works and roughly where it stands.
 */
const BENCHES = {
  api: {
    script: 'api.ts',
    args: [
      '--only',
      'reads,emails',
      ...(args.quick ? ['--warmup', '0.2', '--duration', '0.5', '--one-real-server'] : []),
    ],
  },
  send: { script: 'send.ts', args: args.quick ? ['--emails', '100', '--warmup', '20'] : [] },
  delivery: {
    script: 'delivery.ts',
    args: [
      '--no-ceiling',
      ...(args.quick ? ['--events', '200', '--fanout-events', '50', '--latency', '20'] : []),
    ],
  },
} as const;
/** A bench that runs longer than this is stopped (and its targets reported missing): the run stays bounded. */
const BENCH_LIMIT_MS = (args.quick ? 90_000 : 240_000) * rounds;

interface Failure {
  bench: string;
  engine: BenchEngine;
  why: string;
}

/** Runs one bench with --json on one engine; its JSON from stdout, or why there is none. */
function runBench(
  name: keyof typeof BENCHES,
  engine: BenchEngine,
  postgresUrl: string | undefined,
): Promise<BenchReport | Failure> {
  const bench = BENCHES[name];
  const env = { ...process.env };
  // bench/api.ts and bench/send.ts open DATABASE_URL when it is set; bench/delivery.ts takes --only and its URL.
  delete env.DATABASE_URL;
  if (engine === 'postgres') {
    env.DATABASE_URL = postgresUrl;
    env.BENCH_DATABASE_URL = postgresUrl;
  }
  const engineArgs = name === 'delivery' ? ['--only', engine] : [];
  const argv = [
    path.join(here, bench.script),
    ...bench.args,
    ...engineArgs,
    '--rounds',
    String(rounds),
    '--json',
  ];
  console.error(`\n=== bench/${bench.script} on ${engine} ===`);
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, argv, { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGTERM'), BENCH_LIMIT_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      console.error(
        `=== bench/${bench.script} on ${engine}: ${((performance.now() - started) / 1000).toFixed(0)} s ===`,
      );
      const failure = (why: string) => resolve({ bench: name, engine, why });
      if (signal) return failure(`stopped after ${BENCH_LIMIT_MS / 1000} s (${signal})`);
      if (code !== 0) return failure(`exited with ${code}`);
      // The report is the last line; anything before it was printed by a child of the bench.
      const last = stdout.trim().split('\n').at(-1) ?? '';
      try {
        resolve(JSON.parse(last) as BenchReport);
      } catch {
        failure(`printed no JSON report (${last.slice(0, 200)})`);
      }
    });
  });
}

const startedAt = new Date();
const engines: BenchEngine[] = [];
const warnings: string[] = [];
if (args.only !== 'postgres') engines.push('sqlite');
let postgresUrl: string | undefined;
if (args.only !== 'sqlite') {
  const found = await findPostgres(args['postgres-url']);
  if ('url' in found) {
    postgresUrl = found.url;
    engines.push('postgres');
  } else {
    warnings.push(`PostgreSQL skipped: ${found.skip}.`);
  }
}

const targets: TargetResult[] = [];
const latencies: LatencyResult[] = [];
const failures: Failure[] = [];
for (const engine of engines) {
  for (const name of Object.keys(BENCHES) as (keyof typeof BENCHES)[]) {
    const result = await runBench(name, engine, postgresUrl);
    if ('why' in result) {
      failures.push(result);
      continue;
    }
    targets.push(...result.targets);
    latencies.push(...result.latencies);
    warnings.push(
      ...result.warnings.map((warning) => `bench/${BENCHES[name].script} on ${engine}: ${warning}`),
    );
  }
}
const seconds = (Date.now() - startedAt.getTime()) / 1000;

// ---------------------------------------------------------------------------------------------------------
// The table.

const ENGINE_NAMES: Record<BenchEngine, string> = { sqlite: 'SQLite', postgres: 'PostgreSQL' };
const perSecond = (n: number) => `${Math.round(n).toLocaleString('en-US')}/s`;
const met = (target: TargetResult) => target.ratio >= target.aim;
const header = ['target', 'engine', 'Postwire', 'bare', 'ratio', 'aim', 'met?', 'CPU ratio'];
const lines = targets.map((target) => [
  target.target,
  ENGINE_NAMES[target.engine],
  perSecond(target.postwire),
  perSecond(target.bare),
  target.ratio.toFixed(2),
  `≥ ${target.aim}`,
  (met(target) ? 'yes' : 'no') + (target.warnings.length ? ' (?)' : ''),
  target.cpuRatio.toFixed(2),
]);
const CPU_RATIO_NOTE =
  'CPU ratio: the same comparison by CPU time per request, email or delivery of the process measured (bare ÷ ' +
  "Postwire), steadier when other work shares the machine; PostgreSQL's own CPU is not in it.";
const milliseconds = (n: number) => (Number.isNaN(n) ? '-' : `${n < 10 ? n.toFixed(1) : n.toFixed(0)} ms`);
const latencyLine = (code: (text: string) => string) =>
  `p99 emit → receipt (aim < ${latencies[0]?.aimMs ?? 50} ms): ` +
  latencies
    .map((row) => {
      const where = row.worker.startsWith('postwire worker') ? `, separate ${code('postwire worker')}` : '';
      const lost =
        row.received < row.events ? ` (${row.events - row.received} of ${row.events} not received)` : '';
      const verdict = row.p99Ms < row.aimMs && row.received === row.events ? 'met' : 'NOT met';
      return `${ENGINE_NAMES[row.engine]}${where} ${milliseconds(row.p99Ms)}${lost} ${verdict}`;
    })
    .join(' · ');

function plainTable(): string {
  const widths = header.map((title, i) => Math.max(title.length, ...lines.map((line) => line[i]!.length)));
  const numeric = new Set([2, 3, 4, 7]);
  const format = (cells: string[]) =>
    cells.map((cell, i) => (numeric.has(i) ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!))).join('  ');
  return [format(header), ...lines.map(format)].map((line) => line.trimEnd()).join('\n');
}

function markdownTable(): string {
  const widths = header.map((title, i) => Math.max(title.length, ...lines.map((line) => line[i]!.length)));
  const row = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i]!)).join(' | ')} |`;
  return [row(header), row(widths.map((width) => '-'.repeat(width))), ...lines.map(row)].join('\n');
}

const commit = (() => {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: here, encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
})();
const conditions =
  `${startedAt.toISOString().slice(0, 10)}, commit ${commit}, node ${process.version}, ` +
  `${os.availableParallelism()} CPUs (${os.cpus()[0]?.model ?? '?'}), ${args.quick ? 'quick smoke run' : 'full run'}, ` +
  `${rounds} round(s), ${seconds.toFixed(0)} s; load average after: ${os
    .loadavg()
    .map((n) => n.toFixed(2))
    .join(' ')}`;
const problems = [
  ...failures.map(
    (failure) =>
      `bench/${BENCHES[failure.bench as keyof typeof BENCHES].script} on ${failure.engine} ${failure.why}`,
  ),
  ...targets.flatMap((target) =>
    target.warnings.map((warning) => `${target.target} on ${ENGINE_NAMES[target.engine]}: ${warning}`),
  ),
  ...warnings,
];

if (args.json) {
  console.log(
    JSON.stringify({
      date: startedAt.toISOString(),
      commit,
      quick: args.quick,
      rounds,
      targets,
      latencies,
      problems,
    }),
  );
} else {
  console.log(`\nTargets — ${conditions}`);
  console.log(plainTable());
  console.log(latencyLine((text) => text));
  console.log(CPU_RATIO_NOTE);
  for (const problem of problems) console.log(`note: ${problem}`);
  if (args.markdown) {
    console.log(`\n${markdownTable()}\n\n${latencyLine((text) => `\`${text}\``)}\n\n${CPU_RATIO_NOTE}`);
  }
}
if (failures.length) process.exitCode = 1;
