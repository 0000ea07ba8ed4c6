import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { DEFAULTS, loadConfig } from '../src/config.ts';
import { createReportReader } from '../src/modules/inbound/report-reader.ts';
import { steppedThreadClock } from './helpers/stepped-thread-clock.ts';

// Received messages are read on parse threads: a message that runs past the CPU budget, or past a thread's
// heap, is unreadable with why, and the thread it ended is replaced for the next one.

// The parse threads load their code as a user's do, without the compile cache `npm test` gives this process
// (a thread under the 16 MiB cap ran out of heap loading it with the cache once): a Worker takes its
// environment from process.env as it starts.
delete process.env.NODE_COMPILE_CACHE;

const fixture = (name: string) => readFileSync(new URL(`./fixtures/reports/${name}`, import.meta.url));

/** 8.4 MB of UTF-8 text in one part: its decoded text is a 16 MB string, and takes a few hundred ms. */
const bigText = Buffer.from(
  'Subject: text\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n' +
    `${'grüße aus der ferne, viele grüße '.repeat(2)}\r\n`.repeat(120_000),
);

test('a message read past the CPU budget is unreadable, and the next is read on a new thread', async () => {
  // The pool's clocks are the test's (steppedThreadClock), so the verdict is the same however loaded the machine
  // is. The budget is checked every 10 ms; reading bigText takes hundreds, more the busier the machine.
  const clock = steppedThreadClock();
  const reader = createReportReader({ threads: 1, timeoutMs: 10, memoryMb: 64, ...clock.clocks });
  try {
    const postfix = await reader.read(fixture('postfix-bounce-unknown-user.eml'));
    assert.equal(postfix.report.kind, 'delivery-status');
    assert.equal(postfix.subject, 'Undelivered Mail Returned to Sender');
    assert.deepEqual(await clock.step(() => reader.read(bigText)), {
      report: {
        kind: 'unreadable',
        reason: 'reading it took more than 10 ms of CPU time (or 40 ms in all)',
      },
      subject: null,
    });
    assert.equal((await reader.read(fixture('vacation-auto-reply.eml'))).report.kind, 'auto-reply');
  } finally {
    await reader.close();
  }
});

test("a message that needs more than a thread's heap is unreadable, and the next is read on a new thread", async () => {
  const reader = createReportReader({ threads: 1, timeoutMs: 10_000, memoryMb: 16 });
  try {
    assert.deepEqual(await reader.read(bigText), {
      report: { kind: 'unreadable', reason: 'reading it needed more than 16 MiB' },
      subject: null,
    });
    assert.equal((await reader.read(fixture('vacation-auto-reply.eml'))).report.kind, 'auto-reply');
  } finally {
    await reader.close();
  }
});

test('REPORT_PARSE_* settings', () => {
  assert.deepEqual(loadConfig({}).reportParsing, DEFAULTS.reportParsing);
  assert.deepEqual(DEFAULTS.reportParsing, { timeoutMs: 2000, threads: 1, memoryMb: 64 });
  assert.deepEqual(
    loadConfig({ REPORT_PARSE_TIMEOUT: '500ms', REPORT_PARSE_THREADS: '2', REPORT_PARSE_MEMORY: '128' })
      .reportParsing,
    { timeoutMs: 500, threads: 2, memoryMb: 128 },
  );
  assert.throws(() => loadConfig({ REPORT_PARSE_TIMEOUT: '5ms' }), /REPORT_PARSE_TIMEOUT must be from 10ms/);
  assert.throws(() => loadConfig({ REPORT_PARSE_THREADS: '0' }), /REPORT_PARSE_THREADS must be an integer/);
  assert.throws(() => loadConfig({ REPORT_PARSE_MEMORY: '8' }), /REPORT_PARSE_MEMORY must be an integer/);
});
