// SMTP submission, accepted durably: messages per second a client submits over SMTP to Postwire and gets its 250
// for (each one stored as an email, with its recipients and bytes, before the 250), against a bare smtp-server
// that writes the same bytes to the same engine (bench/receiving-bare.ts: one INSERT into node:sqlite, WAL,
// synchronous NORMAL) before its 250. Same client, same messages, same connections, in one run.
//
//   npm run bench:submission                       # 600 messages after 60 unmeasured, 4 connections
//   npm run bench:submission -- --messages 2000 --connections 8
//
// Postwire runs as `postwire serve --no-worker --no-inbound` on its embedded SQLite with SUBMISSION_PORT (AUTH
// over plain loopback, as the bare server takes mail without TLS): acceptance alone, no sending beside it.
import { fork, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import nodemailer from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer';
import { freePort } from '../test/helpers/process.ts';
import { median, stopChild } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '600' },
    connections: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '1' },
  },
});
const MESSAGES = Number(args.messages);
const CONNECTIONS = Number(args.connections);
const ROUNDS = Number(args.rounds);
const WARM = 60;
const KEY = 'pw_bench_submission_key_0123456789';
const here = path.dirname(new URL(import.meta.url).pathname);
const root = path.resolve(here, '..');

/** A message as an application writes it: text, html and a small PDF, about 30 KB. */
async function message(i: number): Promise<Buffer> {
  const pdf = Buffer.alloc(16 * 1024, i % 251);
  const lines = Array.from(
    { length: 40 },
    (_, n) => `Line ${n} of order ${i}: Grüße, ça va — ${'x'.repeat(40)}`,
  );
  return new MailComposer({
    from: 'Shop <orders@shop.example>',
    to: `customer${i}@example.org`,
    subject: `Your order ${i} has shipped`,
    text: lines.join('\n'),
    html: `<p>${lines.join('</p><p>')}</p>`,
    attachments: [{ filename: `invoice-${i}.pdf`, content: pdf, contentType: 'application/pdf' }],
  })
    .compile()
    .build();
}

/** Sends every message over `CONNECTIONS` pooled connections; resolves once the last 250 came back. */
async function sendAll(
  port: number,
  messages: Buffer[],
  auth?: { user: string; pass: string },
): Promise<void> {
  const transport = nodemailer.createTransport({
    pool: true,
    maxConnections: CONNECTIONS,
    maxMessages: Infinity,
    host: '127.0.0.1',
    port,
    ignoreTLS: true,
    ...(auth ? { auth } : {}),
  });
  try {
    await Promise.all(
      messages.map((raw, i) =>
        transport.sendMail({
          envelope: { from: 'orders@shop.example', to: [`customer${i}@example.org`] },
          raw,
        }),
      ),
    );
  } finally {
    transport.close();
  }
}

async function bare(warm: Buffer[], measured: Buffer[]): Promise<number> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'postwire-bench-submission-bare-'));
  const child = fork(path.join(here, 'receiving-bare.ts'), [path.join(dir, 'bare.sqlite')], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  try {
    const port = await new Promise<number>((resolve) =>
      child.on('message', (message: { type: string; port?: number }) => {
        if (message.type === 'ready') resolve(message.port!);
      }),
    );
    await sendAll(port, warm);
    const started = performance.now();
    await sendAll(port, measured);
    return measured.length / ((performance.now() - started) / 1000);
  } finally {
    await stopChild(child, () => child.send({ type: 'stop' }));
    rmSync(dir, { recursive: true, force: true });
  }
}

async function postwire(warm: Buffer[], measured: Buffer[]): Promise<number> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'postwire-bench-submission-'));
  const port = await freePort();
  const child = spawn(process.execPath, ['src/cli.ts', 'serve', '--no-worker', '--no-inbound'], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      PORT: '0',
      POSTWIRE_DATA_DIR: dir,
      POSTWIRE_BOOTSTRAP_KEY: KEY,
      POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 14).toString('hex'),
      SUBMISSION_PORT: String(port),
      SUBMISSION_ALLOW_PLAIN_LOOPBACK: 'true',
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    await new Promise<void>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`postwire serve exited (${code})`)));
      createInterface({ input: child.stdout! }).on('line', (line) => {
        if (line.startsWith('{') && (JSON.parse(line) as { url?: string }).url) resolve();
      });
    });
    const auth = { user: 'bench', pass: KEY };
    await sendAll(port, warm, auth);
    const started = performance.now();
    await sendAll(port, measured, auth);
    return measured.length / ((performance.now() - started) / 1000);
  } finally {
    await stopChild(child, () => child.kill('SIGTERM'));
    rmSync(dir, { recursive: true, force: true });
  }
}

const all = await Promise.all(Array.from({ length: WARM + MESSAGES }, (_, i) => message(i)));
const warm = all.slice(0, WARM);
const measured = all.slice(WARM);
const size = Math.round(measured.reduce((sum, raw) => sum + raw.length, 0) / measured.length / 1024);
console.log(
  `SMTP submission accepted durably: ${MESSAGES} messages of ${size} KB after ${WARM} unmeasured, ` +
    `${CONNECTIONS} connections, SQLite, ${ROUNDS} round(s)`,
);
const bareRates: number[] = [];
const postwireRates: number[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  const bareRate = await bare(warm, measured);
  const postwireRate = await postwire(warm, measured);
  bareRates.push(bareRate);
  postwireRates.push(postwireRate);
  console.log(
    `round ${round}: bare smtp-server ${bareRate.toFixed(0)}/s, Postwire ${postwireRate.toFixed(0)}/s ` +
      `(ratio ${(postwireRate / bareRate).toFixed(2)})`,
  );
}
const ratio = median(postwireRates) / median(bareRates);
console.log(
  `median: bare ${median(bareRates).toFixed(0)}/s, Postwire ${median(postwireRates).toFixed(0)}/s, ratio ${ratio.toFixed(2)}`,
);
