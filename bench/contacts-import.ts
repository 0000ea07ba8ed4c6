// A contact import of N rows (1,000,000 by default) against a `postwire serve` process (API and workers) on a
// fresh SQLite file, or on PostgreSQL with --database-url. The CSV is generated as it is sent (this process
// never holds it either), as multipart/form-data with a column map, into a segment. Reported: the upload's
// time (the body read, stored in pieces and checked as CSV), the job's time and rate, and the server's
// resident memory before and at its peak (VmHWM, from /proc: nothing is sampled).
//
//   node bench/contacts-import.ts                     # 1,000,000 rows, SQLite
//   node bench/contacts-import.ts --rows 100000 --database-url postgres://postgres@127.0.0.1:5432/bench

import { spawn } from 'node:child_process';
import http from 'node:http';
import { Readable } from 'node:stream';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { rows: { type: 'string', default: '1000000' }, 'database-url': { type: 'string' } },
});
const ROWS = Number(values.rows);
const KEY = 'pw_bench_contacts_import_key_0123456789';
const MB = 1024 * 1024;

function memory(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: Math.round((kb('VmRSS') * 1024) / MB), peak: Math.round((kb('VmHWM') * 1024) / MB) };
}

const BOUNDARY = '----postwire-bench-boundary';

/** The multipart body, the CSV made a few thousand rows at a time as the request reads it. */
function body(segmentId: string): { stream: ReadableStream<Uint8Array>; bytes: () => number } {
  const encoder = new TextEncoder();
  let row = 0;
  let sent = 0;
  let stage: 'head' | 'rows' | 'tail' | 'done' = 'head';
  const field = (name: string, value: string) =>
    `--${BOUNDARY}\r\ncontent-disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  return {
    bytes: () => sent,
    stream: new ReadableStream({
      pull(controller) {
        let text = '';
        if (stage === 'head') {
          text =
            field(
              'column_map',
              JSON.stringify({
                email: 'Email',
                first_name: 'First',
                last_name: 'Last',
                properties: { plan: 'Plan', seats: 'Seats' },
              }),
            ) +
            field('segments', JSON.stringify([segmentId])) +
            `--${BOUNDARY}\r\ncontent-disposition: form-data; name="file"; filename="contacts.csv"\r\ncontent-type: text/csv\r\n\r\n` +
            'Email,First,Last,Plan,Seats\r\n';
          stage = 'rows';
        } else if (stage === 'rows') {
          const lines: string[] = [];
          for (let i = 0; i < 2000 && row < ROWS; i += 1, row += 1) {
            lines.push(
              `person${row}@example.org,"First ${row}",Last${row},${row % 3 === 0 ? 'pro' : 'free'},${row % 50}\r\n`,
            );
          }
          text = lines.join('');
          if (row >= ROWS) stage = 'tail';
        } else if (stage === 'tail') {
          text = `\r\n--${BOUNDARY}--\r\n`;
          stage = 'done';
        } else {
          controller.close();
          return;
        }
        const bytes = encoder.encode(text);
        sent += bytes.length;
        controller.enqueue(bytes);
      },
    }),
  };
}

const dir = mkdtempSync(path.join(tmpdir(), 'postwire-contacts-import-'));
const child = spawn(process.execPath, ['src/cli.ts', 'serve'], {
  env: {
    ...process.env,
    PORT: '0',
    POSTWIRE_DATA_DIR: dir,
    POSTWIRE_BOOTSTRAP_KEY: KEY,
    LOG_FORMAT: 'json',
    LOG_LEVEL: 'info',
    ...(values['database-url'] ? { DATABASE_URL: values['database-url'] } : {}),
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
  const post = async (route: string, payload: unknown) =>
    (await (
      await fetch(`${url}${route}`, { method: 'POST', headers, body: JSON.stringify(payload) })
    ).json()) as {
      id: string;
    };
  await post('/v1/contact-properties', { key: 'plan', type: 'string' });
  await post('/v1/contact-properties', { key: 'seats', type: 'number' });
  const segment = await post('/v1/segments', { name: 'Imported' });
  const before = memory(child.pid!);

  const started = performance.now();
  const upload = body(segment.id);
  // node:http, not fetch: fetch gives up on an answer's headers after 300 s, which a large upload on a busy
  // machine can take.
  const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const request = http.request(
      `${url}/v1/contacts/imports`,
      {
        method: 'POST',
        headers: {
          authorization: `Bearer ${KEY}`,
          'content-type': `multipart/form-data; boundary=${BOUNDARY}`,
        },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
      },
    );
    request.on('error', reject);
    Readable.fromWeb(upload.stream as import('node:stream/web').ReadableStream).pipe(request);
  });
  const accepted = JSON.parse(answer.body) as { id: string; status: string };
  if (answer.status !== 202) throw new Error(`the upload was refused: ${answer.body}`);
  const uploaded = (performance.now() - started) / 1000;
  const afterUpload = memory(child.pid!);
  console.log(
    `  upload answered after ${uploaded.toFixed(1)} s; RSS ${afterUpload.rss} MB, peak ${afterUpload.peak} MB`,
  );

  let job: { status: string; counts: Record<string, number> };
  let polls = 0;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    job = (await (
      await fetch(`${url}/v1/contacts/imports/${accepted.id}`, { headers })
    ).json()) as typeof job;
    if (job.status === 'completed' || job.status === 'failed') break;
    const now = memory(child.pid!);
    const seconds = Math.round((performance.now() - started) / 1000);
    if ((polls += 1) % 30 === 0)
      console.log(`  ${seconds} s: ${job.counts.read} rows read; RSS ${now.rss} MB, peak ${now.peak} MB`);
  }
  const total = (performance.now() - started) / 1000;
  const after = memory(child.pid!);
  const imported = total - uploaded;
  console.log(
    `${values['database-url'] ? 'postgres' : 'sqlite'}: ${ROWS.toLocaleString('en')} rows, ${Math.round(upload.bytes() / MB)} MiB of CSV → ` +
      `${job.status} ${JSON.stringify(job.counts)}\n` +
      `  upload (read, stored in pieces, checked) ${uploaded.toFixed(1)} s; job ${imported.toFixed(1)} s ` +
      `(${Math.round(ROWS / imported).toLocaleString('en')} rows/s)\n` +
      `  server RSS ${before.rss} MB before, ${afterUpload.rss} MB after the upload, ${after.rss} MB at the end; ` +
      `peak ${after.peak} MB (+${after.peak - before.rss} MB)`,
  );
} finally {
  child.kill('SIGTERM');
  await new Promise((resolve) => child.once('exit', resolve));
  rmSync(dir, { recursive: true, force: true });
}
