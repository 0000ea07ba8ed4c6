import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import MailComposer from 'nodemailer/lib/mail-composer';
import { loadConfig } from '../src/config.ts';
import { parseSpamdUrl } from '../src/lib/spamd-url.ts';
import {
  createSpamChecker,
  MAX_RESPONSE_BYTES,
  type SpamChecker,
  type SpamVerdict,
} from '../src/modules/inbound/spam.ts';
import { groupMembers, ping, spamdAvailable, startSpamd, type TestSpamd } from './helpers/spamd.ts';

// The spam verdict on received mail (src/modules/inbound/spam.ts): against a real SpamAssassin the GTUBE
// message is spam and an ordinary message is not; against servers that are down, silent, slow, or answer
// garbage or without end, the check gives null (and a warning) within its deadline, having read a bounded
// number of bytes, and never throws. A message over maxBytes is scored on its first maxBytes.

const GTUBE = 'XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X';

const skipReal = spamdAvailable()
  ? false
  : 'needs SpamAssassin (/usr/sbin/spamd; apt-get install -y spamd) to run a private spamd';
if (skipReal) console.log(`# spam.test.ts: the real-spamd cases are skipped: ${skipReal}`);

interface Logged {
  object: Record<string, unknown>;
  message: string;
}

function recordingLogger() {
  const warnings: Logged[] = [];
  return {
    warnings,
    logger: {
      info() {},
      warn: (object: object, message: string) => warnings.push({ object: { ...object }, message }),
      error: (object: object, message: string) => warnings.push({ object: { ...object }, message }),
    },
  };
}

function checker(url: string, options: { timeoutMs?: number; maxBytes?: number } = {}) {
  const { warnings, logger } = recordingLogger();
  const spam = createSpamChecker({
    url,
    timeoutMs: options.timeoutMs ?? 20_000,
    maxBytes: options.maxBytes ?? 512 * 1024,
    logger,
  });
  return { spam, warnings };
}

/** A message as a mail client writes it: text and html alternatives, many lines, CRLF, a Date and Message-ID. */
async function message(
  options: { text?: string; html?: string; attachments?: Array<{ filename: string; content: Buffer }> } = {},
): Promise<Buffer> {
  const text =
    options.text ??
    [
      'Hi Ada,',
      '',
      'Thanks for the notes from Tuesday. I went through the budget sheet again and the',
      'numbers for the second quarter line up with what finance sent over, except for the',
      'travel line, which still counts the Lisbon trip twice.',
      '',
      'Could you fix that before Friday? Then I will send the whole thing to Grace.',
      '',
      'See you at the standup,',
      'Bob',
      '',
    ].join('\n');
  const html =
    options.html ??
    `<p>Hi Ada,</p>\n<p>Thanks for the notes from Tuesday. I went through the budget sheet again and the\n` +
      `numbers for the second quarter line up with what finance sent over, except for the\n` +
      `travel line, which still counts the Lisbon trip twice.</p>\n` +
      `<p>Could you fix that before Friday? Then I will send the whole thing to Grace.</p>\n` +
      `<p>See you at the standup,<br>\nBob</p>\n`;
  return new MailComposer({
    from: 'Bob Builder <bob@example.com>',
    to: 'Ada Lovelace <ada@example.org>',
    subject: 'Q2 budget: the travel line',
    date: new Date('2026-11-26T09:30:00Z'),
    messageId: '<budget-2026-q2.4f1c@example.com>',
    text,
    html,
    attachments: options.attachments ?? [],
  })
    .compile()
    .build();
}

describe('SPAMD_* settings', () => {
  test('unset is off; the defaults; a bad URL, timeout or size is a configuration problem', () => {
    assert.deepEqual(loadConfig({}).spamd, { url: undefined, timeoutMs: 10_000, maxBytes: 512 * 1024 });
    assert.deepEqual(
      loadConfig({ SPAMD_URL: 'spamd://127.0.0.1:7830', SPAMD_TIMEOUT: '2s', SPAMD_MAX_BYTES: '2048' }).spamd,
      { url: 'spamd://127.0.0.1:7830', timeoutMs: 2000, maxBytes: 2048 },
    );
    assert.equal(loadConfig({ SPAMD_URL: 'tcp://spamd.internal' }).spamd.url, 'tcp://spamd.internal');
    for (const bad of [
      'http://127.0.0.1:783',
      'spamd://',
      'spamd://host:0',
      'spamd://u:p@host',
      'host:783',
    ]) {
      assert.throws(() => loadConfig({ SPAMD_URL: bad }), /SPAMD_URL must be spamd:\/\/host:port/, bad);
    }
    assert.throws(() => loadConfig({ SPAMD_TIMEOUT: '10ms' }), /SPAMD_TIMEOUT must be from 100ms to 5m/);
    assert.throws(() => loadConfig({ SPAMD_TIMEOUT: 'soon' }), /SPAMD_TIMEOUT must be a duration/);
    assert.throws(() => loadConfig({ SPAMD_MAX_BYTES: '10' }), /SPAMD_MAX_BYTES must be an integer/);
  });

  test('spamd URLs: the host and port, 783 when left out', () => {
    assert.deepEqual(parseSpamdUrl('spamd://127.0.0.1:7830'), { host: '127.0.0.1', port: 7830 });
    assert.deepEqual(parseSpamdUrl('tcp://spam.example.net'), { host: 'spam.example.net', port: 783 });
    assert.deepEqual(parseSpamdUrl('spamd://[::1]:783/'), { host: '::1', port: 783 });
    for (const bad of [
      'spamd://host/path',
      'spamd://host?x=1',
      'spamd://host:99999',
      'spamd://[nope]:1',
      '',
    ]) {
      assert.equal(parseSpamdUrl(bad), undefined, bad);
    }
    assert.throws(() => createSpamChecker({ ...checkerDefaults(), url: 'http://x' }), /not a spamd URL/);
  });
});

const checkerDefaults = () => ({
  url: 'spamd://127.0.0.1:783',
  timeoutMs: 1000,
  maxBytes: 1024,
  logger: recordingLogger().logger,
});

describe('against a real spamd', { skip: skipReal }, () => {
  let spamd: TestSpamd;
  let client: { spam: SpamChecker; warnings: Logged[] };
  before(async () => {
    spamd = await startSpamd();
    client = checker(spamd.url);
  });
  after(() => spamd?.close());

  const assertNoWarnings = () =>
    assert.deepEqual(client.warnings, [], `warnings logged; spamd's log:\n${spamd.log().slice(-3000)}`);

  test('the GTUBE test message is spam: flagged, its score at or above the threshold', async () => {
    const raw = await message({
      text: `This is the GTUBE, the\n\nGeneric Test for Unsolicited Bulk Email\n\n${GTUBE}\n\nThanks.\n`,
    });
    const verdict = await client.spam.check(raw);
    assertNoWarnings();
    assert.ok(verdict, 'a verdict');
    assert.equal(verdict.flagged, true);
    assert.ok(verdict.score >= verdict.threshold, `${verdict.score} ≥ ${verdict.threshold}`);
    assert.equal(verdict.threshold, 5);
    assert.ok(verdict.rules.includes('GTUBE'), verdict.rules.join());
    assert.equal(verdict.truncated, false);
  });

  test('an ordinary message, text and html over many lines, is not spam', async () => {
    const verdict = await client.spam.check(await message());
    assertNoWarnings();
    assert.ok(verdict, 'a verdict');
    assert.equal(verdict.flagged, false, `score ${verdict.score}: ${verdict.rules.join()}`);
    assert.ok(verdict.score < verdict.threshold, `${verdict.score} < ${verdict.threshold}`);
    assert.ok(!verdict.rules.includes('GTUBE'));
    // Every rule name is one spamd could have sent: letters, digits, underscores.
    for (const rule of verdict.rules) assert.match(rule, /^[A-Z0-9_]+$/);
  });

  test('a message over maxBytes is scored on its first maxBytes: what is there counts, what is cut does not', async () => {
    const small = checker(spamd.url, { maxBytes: 16 * 1024 });
    const attachment = { filename: 'scan.bin', content: randomBytes(200 * 1024) };
    // GTUBE in the text part, before the large attachment: inside the first 16 KiB.
    const early = await message({ text: `Here it is:\n${GTUBE}\n`, attachments: [attachment] });
    assert.ok(early.length > 200 * 1024);
    const first = await small.spam.check(early);
    assert.ok(first, `a verdict; warnings: ${JSON.stringify(small.warnings)}`);
    assert.equal(first.truncated, true);
    assert.equal(first.flagged, true);
    assert.ok(first.rules.includes('GTUBE'));
    // GTUBE only in a second text part after the attachment: cut off, not seen.
    const late = await new MailComposer({
      from: 'bob@example.com',
      to: 'ada@example.org',
      subject: 'files',
      date: new Date('2026-11-26T09:30:00Z'),
      messageId: '<files.1@example.com>',
      text: 'The file is attached.\n',
      attachments: [attachment, { filename: 'note.txt', content: `${GTUBE}\n`, contentType: 'text/plain' }],
    })
      .compile()
      .build();
    const second = await small.spam.check(late);
    assert.ok(second, `a verdict; warnings: ${JSON.stringify(small.warnings)}`);
    assert.equal(second.truncated, true);
    assert.ok(!second.rules.includes('GTUBE'), second.rules.join());
    assert.deepEqual(small.warnings, []);
  });

  test('several checks at once each get their own verdict', async () => {
    const spamMessage = await message({ text: `${GTUBE}\n` });
    const hamMessage = await message();
    const verdicts = await Promise.all(
      [spamMessage, hamMessage, spamMessage, hamMessage].map((raw) => client.spam.check(raw)),
    );
    assertNoWarnings();
    assert.deepEqual(
      verdicts.map((verdict) => verdict?.flagged),
      [true, false, true, false],
    );
  });
  // Last: it stops the instance the others used.
  test('the helper: close() stops spamd and every child of it, and removes its directory', async () => {
    assert.equal(await ping(spamd.port), true);
    assert.ok(groupMembers(spamd.pid).length >= 2, 'the parent and its child');
    await spamd.close();
    assert.deepEqual(groupMembers(spamd.pid), []);
    assert.equal(existsSync(spamd.directory), false);
    assert.equal(await ping(spamd.port), false);
    assert.equal(await client.spam.check(await message()), null);
    client.warnings.length = 0;
  });
});

/** A fake spamd: records what each connection sends and lets the test answer (or not) as it likes. */
interface FakeSpamd {
  url: string;
  /** Each connection's request bytes so far. */
  requests: Buffer[];
  /** Resolves when the checker's side of a connection has gone (closed or destroyed). */
  closed: Promise<void>;
  close(): Promise<void>;
}

async function fakeSpamd(answer: (socket: Socket, request: () => Buffer) => void): Promise<FakeSpamd> {
  const requests: Buffer[] = [];
  const sockets = new Set<Socket>();
  let markClosed!: () => void;
  const closed = new Promise<void>((resolve) => (markClosed = resolve));
  // allowHalfOpen: the checker half-closes after its message, as spamc does; a server that does not answer
  // keeps its own side open.
  const server: Server = createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    const index = requests.push(Buffer.alloc(0)) - 1;
    socket.on('data', (chunk: Buffer) => {
      requests[index] = Buffer.concat([requests[index]!, chunk]);
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      sockets.delete(socket);
      markClosed();
    });
    answer(socket, () => requests[index]!);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `spamd://127.0.0.1:${port}`,
    requests,
    closed,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Answers once the whole request (its Content-length of message bytes) is in. */
function whenRequestIn(socket: Socket, request: () => Buffer, reply: () => void): void {
  const check = () => {
    const bytes = request();
    const end = bytes.indexOf('\r\n\r\n');
    const length = /Content-length: (\d+)/i.exec(bytes.subarray(0, Math.max(end, 0)).toString('latin1'));
    if (end >= 0 && length && bytes.length - end - 4 >= Number(length[1])) {
      socket.off('data', check);
      reply();
    }
  };
  socket.on('data', check);
}

const ANSWER =
  'SPAMD/1.1 0 EX_OK\r\nContent-length: 29\r\nSpam: False ; 1.5 / 5.0\r\n\r\nHTML_MESSAGE,MIME_HTML_ONLY\r\n';

async function withFake(
  answer: (socket: Socket, request: () => Buffer) => void,
  run: (fake: FakeSpamd) => Promise<void>,
): Promise<void> {
  const fake = await fakeSpamd(answer);
  try {
    await run(fake);
  } finally {
    await fake.close();
  }
}

const assertNoVerdict = (verdict: SpamVerdict | null, warnings: Logged[], reason: RegExp) => {
  assert.equal(verdict, null);
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.match(warnings[0]!.message, /no verdict from spamd/);
  assert.match(String(warnings[0]!.object.reason), reason);
};

describe('against spamd down, silent or hostile', () => {
  test('the request is spamc’s: SYMBOLS, the Content-length, the message; a complete answer is read without waiting for the close', async () => {
    await withFake(
      (socket, request) => whenRequestIn(socket, request, () => socket.write(ANSWER)),
      async (fake) => {
        const { spam, warnings } = checker(fake.url, { timeoutMs: 5000 });
        const raw = await message();
        const verdict = await spam.check(raw);
        assert.deepEqual(warnings, []);
        assert.deepEqual(verdict, {
          score: 1.5,
          threshold: 5,
          flagged: false,
          rules: ['HTML_MESSAGE', 'MIME_HTML_ONLY'],
          truncated: false,
        });
        const request = fake.requests[0]!;
        const head = `SYMBOLS SPAMC/1.5\r\nContent-length: ${raw.length}\r\n\r\n`;
        assert.equal(request.subarray(0, head.length).toString('latin1'), head);
        assert.ok(request.subarray(head.length).equals(raw), 'the message, byte for byte');
      },
    );
  });

  test('a message over maxBytes goes as its first maxBytes, cut after the last line break within them', async () => {
    await withFake(
      (socket, request) => whenRequestIn(socket, request, () => socket.end(ANSWER)),
      async (fake) => {
        const maxBytes = 4096;
        const { spam, warnings } = checker(fake.url, { timeoutMs: 5000, maxBytes });
        const raw = await message({ attachments: [{ filename: 'a.bin', content: randomBytes(20_000) }] });
        const verdict = await spam.check(raw);
        assert.deepEqual(warnings, []);
        assert.equal(verdict?.truncated, true);
        const request = fake.requests[0]!;
        const sent = request.subarray(request.indexOf('\r\n\r\n') + 4);
        const length = Number(/Content-length: (\d+)/.exec(request.toString('latin1'))![1]);
        assert.equal(sent.length, length);
        assert.ok(length <= maxBytes && length > maxBytes - 1000, `${length} bytes`);
        assert.ok(sent.equals(raw.subarray(0, length)), 'a prefix of the message');
        assert.equal(sent.at(-1), 0x0a, 'ends with a line break');

        // A message of one long line over maxBytes is cut at maxBytes itself.
        const line = Buffer.alloc(10_000, 'a');
        assert.equal((await spam.check(line))?.truncated, true);
        const second = fake.requests[1]!;
        assert.equal(second.length - second.indexOf('\r\n\r\n') - 4, maxBytes);
      },
    );
  });

  test('nothing listening: null and a warning at once', async () => {
    // A port just freed: nothing listens there.
    const fake = await fakeSpamd(() => {});
    await fake.close();
    // The refusal, not the timeout, ends the check: its warning says so (a timeout's says 'no complete answer').
    const { spam, warnings } = checker(fake.url, { timeoutMs: 5000 });
    assertNoVerdict(await spam.check(await message()), warnings, /ECONNREFUSED/);
    assert.equal(warnings[0]!.object.code, 'ECONNREFUSED');
  });

  test('a server that takes the message and never answers: null at the timeout, the connection closed', async () => {
    let server: Socket | undefined;
    await withFake(
      (socket) => (server = socket),
      async (fake) => {
        const { spam, warnings } = checker(fake.url, { timeoutMs: 300 });
        const started = Date.now();
        assertNoVerdict(await spam.check(await message()), warnings, /no complete answer within 300 ms/);
        // Not before the timeout (its warning names it; no upper bound: a busy machine is slow too).
        assert.ok(Date.now() - started >= 290, `${Date.now() - started} ms`);
        // The checker half-closed after its message, so only writing shows that its side is gone: the
        // writes fail (reset) and the connection closes.
        const timer = setInterval(() => server?.write('late'), 20);
        try {
          await fake.closed;
        } finally {
          clearInterval(timer);
        }
      },
    );
  });

  test('a server that trickles an answer that never completes: null at the timeout, whatever keeps coming', async () => {
    await withFake(
      (socket) => {
        socket.write('SPAMD/1.1 0 EX_OK\r\nSpam: True ; 9.0 / 5.0\r\n');
        const timer = setInterval(() => socket.write('X'), 20);
        socket.on('close', () => clearInterval(timer));
      },
      async (fake) => {
        const { spam, warnings } = checker(fake.url, { timeoutMs: 400 });
        // The timeout's warning is the signal that the timeout, not the end of the answer, ended the check.
        assertNoVerdict(await spam.check(await message()), warnings, /no complete answer within 400 ms/);
        await fake.closed;
      },
    );
  });

  test('an endless answer: null once it passes the cap, long before the timeout, and no more is read', async () => {
    let written = 0;
    await withFake(
      (socket) => {
        const chunk = Buffer.alloc(4096, 'x');
        const pump = () => {
          while (!socket.destroyed && socket.writable) {
            written += chunk.length;
            if (!socket.write(chunk)) return void socket.once('drain', pump);
          }
        };
        socket.write('SPAMD/1.1 0 EX_OK\r\nContent-length: 99999999\r\nSpam: True ; 9.0 / 5.0\r\n\r\n');
        pump();
      },
      async (fake) => {
        const { spam, warnings } = checker(fake.url, { timeoutMs: 20_000 });
        // The cap's warning, not the timeout's, is the signal that it ended before the 20 s timeout.
        assertNoVerdict(await spam.check(await message()), warnings, /answer passed \d+ bytes/);
        assert.ok(Number(warnings[0]!.object.received) <= MAX_RESPONSE_BYTES + 65_536);
        await fake.closed;
        // The server stops being able to write: its peer is gone, so the stream is bounded.
        assert.ok(written < 64 * 1024 * 1024, `${written} bytes written`);
      },
    );
  });

  test('garbage answers: null and a warning each, never a throw', async () => {
    const answers = [
      'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
      'SPAMD/1.0 76 Bad header line: (Content-length missing or erroneous)\r\n\r\n',
      'SPAMD/1.1 0 EX_OK\r\nContent-length: 0\r\n\r\n',
      'SPAMD/1.1 0 EX_OK\r\nSpam: Maybe ; 1 / 5\r\n\r\n',
      'SPAMD/1.1 0 EX_OK\r\nSpam: True ; 1e999 / 5.0\r\n\r\n',
      'SPAMD/1.1 0 EX_OK\r\nno colon here\r\nSpam: True ; 9.0 / 5.0\r\n\r\n',
      'SPAMD/1.1 0 EX_OK\r\nContent-length: 50\r\nSpam: True ; 9.0 / 5.0\r\n\r\nSHORT',
      'SPAMD/1.1 0 EX_OK\r\nSpam: True ; 9.0 / 5.0',
      '\x00\xff\x1b[31m\r\n\r\n',
      '',
    ];
    for (const text of answers) {
      await withFake(
        (socket, request) => whenRequestIn(socket, request, () => socket.end(Buffer.from(text, 'latin1'))),
        async (fake) => {
          const { spam, warnings } = checker(fake.url, { timeoutMs: 5000 });
          const verdict = await spam.check(await message());
          assert.equal(verdict, null, JSON.stringify(text));
          assert.equal(warnings.length, 1, JSON.stringify(text));
        },
      );
    }
  });

  test('a server that closes at once, or resets: null', async () => {
    for (const close of [(socket: Socket) => socket.end(), (socket: Socket) => socket.resetAndDestroy()]) {
      await withFake(close, async (fake) => {
        const { spam, warnings } = checker(fake.url, { timeoutMs: 5000 });
        assert.equal(await spam.check(await message()), null);
        assert.equal(warnings.length, 1);
      });
    }
  });

  test('hostile rule names are dropped, and their number is bounded', async () => {
    const names = [
      'GOOD_ONE',
      '<script>',
      'WITH SPACE',
      'X'.repeat(65),
      ...Array.from({ length: 500 }, (_, i) => `R${i}`),
    ];
    const body = names.join(',');
    await withFake(
      (socket, request) =>
        whenRequestIn(socket, request, () =>
          socket.end(
            `SPAMD/1.1 0 EX_OK\r\nContent-length: ${body.length}\r\nSpam: Yes ; 7.25 / 5.0\r\n\r\n${body}`,
          ),
        ),
      async (fake) => {
        const { spam, warnings } = checker(fake.url, { timeoutMs: 5000 });
        const verdict = await spam.check(await message());
        assert.deepEqual(warnings, []);
        assert.ok(verdict);
        assert.equal(verdict.flagged, true);
        assert.equal(verdict.score, 7.25);
        assert.equal(verdict.rules[0], 'GOOD_ONE');
        assert.equal(verdict.rules.length, 200);
        assert.ok(verdict.rules.every((rule) => /^[A-Za-z0-9_]{1,64}$/.test(rule)));
      },
    );
  });
});
