// How much memory parallel large sends take, with and without HTTP_BODY_MEMORY_LIMIT: a `postwire serve
// --no-worker` process on a fresh SQLite file gets N sends of ~53 MB at once (attachments just under the
// 40 MiB limit, base64) from this process, which retries each 429 after its retry-after as a client would.
// Reported: the server's resident memory before, its peak (VmHWM, from /proc: nothing is sampled), the
// answers and how long all of them took.
//
//   node bench/body-memory.ts                      # 6 sends, the default limit then no limit
//   node bench/body-memory.ts --sends 4 --limit 0  # one run with the given HTTP_BODY_MEMORY_LIMIT

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { DEFAULTS } from '../src/config.ts';

const { values } = parseArgs({
  options: { sends: { type: 'string', default: '6' }, limit: { type: 'string' } },
});
const SENDS = Number(values.sends);
const KEY = 'pw_bench_body_memory_key_0123456789';
const MB = 1_000_000;

/** Resident and peak resident memory of a process, in MB. */
function memory(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: Math.round((kb('VmRSS') * 1024) / MB), peak: Math.round((kb('VmHWM') * 1024) / MB) };
}

async function run(limit: number, body: string): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'postwire-body-memory-'));
  const child = spawn(process.execPath, ['src/cli.ts', 'serve', '--no-worker'], {
    env: {
      ...process.env,
      PORT: '0',
      POSTWIRE_DATA_DIR: dir,
      POSTWIRE_BOOTSTRAP_KEY: KEY,
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'info',
      SEND_DAILY_LIMIT: '0',
      HTTP_BODY_MEMORY_LIMIT: String(limit),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`the server exited (${code})`)));
      createInterface({ input: child.stdout! }).on('line', (line) => {
        if (!line.startsWith('{')) return;
        const entry = JSON.parse(line) as { url?: string };
        if (entry.url) resolve(entry.url);
      });
    });
    const headers = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
    // One small send first, so what is measured is the large bodies, not the first use of every module.
    await fetch(`${url}/v1/emails`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ from: 'a@example.com', to: 'b@example.org', subject: 'Warm', text: 'up' }),
    });
    const before = memory(child.pid!);
    const started = performance.now();
    let refusals = 0;
    // A refused body still on its way is read and dropped after the 429; a client that stalls past the
    // keep-alive timeout meanwhile sees its connection closed instead (EPIPE), and retries as after a 429.
    let connectionErrors = 0;
    const statuses = await Promise.all(
      Array.from({ length: SENDS }, async () => {
        for (;;) {
          let retryAfter = 1;
          try {
            const response = await fetch(`${url}/v1/emails`, { method: 'POST', headers, body });
            await response.arrayBuffer();
            if (response.status !== 429) return response.status;
            refusals += 1;
            retryAfter = Number(response.headers.get('retry-after') ?? 1);
          } catch {
            connectionErrors += 1;
          }
          await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000));
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const after = memory(child.pid!);
    const described = limit === 0 ? 'no limit' : `${Math.round(limit / 1024 / 1024)} MiB`;
    console.log(
      `HTTP_BODY_MEMORY_LIMIT ${described}: ${SENDS} sends of ${Math.round(body.length / MB)} MB → ` +
        `${statuses.join(',')} (${refusals} × 429 and ${connectionErrors} connection errors retried) in ` +
        `${seconds.toFixed(1)} s; ` +
        `server RSS ${before.rss} MB before, peak ${after.peak} MB (+${after.peak - before.rss} MB)`,
    );
  } finally {
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
    rmSync(dir, { recursive: true, force: true });
  }
}

// Just under the 40 MiB of attachments an email may carry: two files, random (base64 of random bytes is what
// a real PDF or image costs).
const half = Math.floor((40 * 1024 * 1024 - 4096) / 2);
const body = JSON.stringify({
  from: 'a@example.com',
  to: 'b@example.org',
  subject: 'Large',
  text: 'Two large files.',
  attachments: [
    { filename: 'a.bin', content: randomBytes(half).toString('base64') },
    { filename: 'b.bin', content: randomBytes(half).toString('base64') },
  ],
});
for (const limit of values.limit !== undefined ? [Number(values.limit)] : [DEFAULTS.httpBodyMemoryBytes, 0]) {
  await run(limit, body);
}
