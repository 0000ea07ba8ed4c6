// `npm run check`: every check package.json names, run side by side, as many at once as the machine has cores.
// Each is one single-threaded process (eslint, prettier, tsc, madge…) that reads the tree and writes nothing
// another one reads (sdk:build writes sdk/dist, which the linters and the formatter ignore), so run one after
// another they left a core idle on CI's two. Each check's output is printed whole when it ends, under its
// name; the command fails if any check did, naming them.
import { spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';

/** Longest first (measured on CI's machine), so that the short ones fill in beside them. */
const CHECKS = [
  'typecheck',
  'format:check',
  'lint',
  'cycles',
  'sdk:build',
  'sdk:check',
  'config:check',
  'lint:openapi',
];

const AT_ONCE = Math.max(2, availableParallelism());

interface Outcome {
  name: string;
  code: number | null;
  output: string;
  seconds: number;
}

function run(name: string): Promise<Outcome> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn('npm', ['run', '--silent', name], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({ name, code, output, seconds: (performance.now() - started) / 1000 }),
    );
  });
}

const waiting = [...CHECKS];
const failed: string[] = [];
await Promise.all(
  Array.from({ length: AT_ONCE }, async () => {
    for (let name = waiting.shift(); name !== undefined; name = waiting.shift()) {
      const outcome = await run(name);
      const verdict = outcome.code === 0 ? 'ok' : `FAILED (exit ${outcome.code})`;
      process.stdout.write(`\n> npm run ${name}: ${verdict} in ${outcome.seconds.toFixed(1)} s\n`);
      if (outcome.output.trim() !== '') process.stdout.write(`${outcome.output.trimEnd()}\n`);
      if (outcome.code !== 0) failed.push(name);
    }
  }),
);
if (failed.length > 0) {
  process.stderr.write(`\nnpm run check: ${failed.join(', ')} failed\n`);
  process.exitCode = 1;
}
