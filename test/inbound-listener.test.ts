import assert from 'node:assert/strict';
import { chunksOf } from '../src/lib/byte-chunks.ts';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import nodemailer from 'nodemailer';
import { loadConfig } from '../src/config.ts';
import { type Clock, systemClock } from '../src/lib/clock.ts';
import { silentWorkerLogger } from '../src/lib/worker-logger.ts';
import type { NewInboundMessage } from '../src/modules/inbound/inbound.repo.ts';
import { startInboundListener } from '../src/modules/inbound/inbound.listener.ts';
import { until } from './helpers/until.ts';

// The listener on its own, with a store the test controls: STARTTLS when configured, and a store that
// fails answers with a temporary error, so the sending MTA keeps the report and tries again.

const listen = (
  store: (message: NewInboundMessage) => Promise<string>,
  tls?: { cert: string; key: string },
  limits: {
    sessionTimeoutMs?: number;
    maxConnectionsPerClient?: number;
    messagesPerMinutePerClient?: number;
    clock?: Clock;
  } = {},
) =>
  startInboundListener({
    clock: systemClock,
    host: '127.0.0.1',
    port: 0,
    maxBytes: 1024 * 1024,
    tls,
    ...limits,
    takes: 'reports for bounces.example.test',
    decide: async (address) =>
      address.toLowerCase().endsWith('@bounces.example.test') ? { take: 'report' } : { take: 'refuse' },
    store,
    logger: silentWorkerLogger,
  });

const deliver = (port: number, options: { requireTLS?: boolean } = {}) => {
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port,
    secure: false,
    ...(options.requireTLS ? { requireTLS: true, tls: { rejectUnauthorized: false } } : { ignoreTLS: true }),
  });
  return transport
    .sendMail({
      envelope: { from: '', to: ['bounce+x@bounces.example.test'] },
      raw: 'Subject: report\r\n\r\nbody\r\n',
    })
    .finally(() => transport.close());
};

test('with INBOUND_TLS_CERT and INBOUND_TLS_KEY the listener offers STARTTLS; without, it does not', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'postwire-tls-'));
  try {
    const keyFile = path.join(dir, 'key.pem');
    const certFile = path.join(dir, 'cert.pem');
    execFileSync('openssl', [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      keyFile,
      '-out',
      certFile,
      '-days',
      '1',
      '-subj',
      '/CN=mx.bounces.example.test',
    ]);
    const config = loadConfig({ INBOUND_TLS_CERT: certFile, INBOUND_TLS_KEY: keyFile });
    assert.equal(config.inbound.tls?.cert, readFileSync(certFile, 'utf8'));
    assert.throws(
      () => loadConfig({ INBOUND_TLS_CERT: certFile }),
      /needs both INBOUND_TLS_CERT and INBOUND_TLS_KEY/,
    );

    const stored: NewInboundMessage[] = [];
    const store = async (message: NewInboundMessage) => {
      stored.push(message);
      return `inb_${stored.length}`;
    };
    const secure = await listen(store, config.inbound.tls);
    const plain = await listen(store);
    try {
      const info = await deliver(secure.port, { requireTLS: true });
      assert.match(info.response, /^250 2\.0\.0 Ok: queued as inb_1/);
      // The chunks the message arrived in, however the socket cut it.
      assert.equal(Buffer.concat(chunksOf(stored[0]!.raw)).toString(), 'Subject: report\r\n\r\nbody\r\n');
      assert.deepEqual(stored[0]!.rcptTo, ['bounce+x@bounces.example.test']);
      assert.equal(stored[0]!.mailFrom, '');
      await assert.rejects(deliver(plain.port, { requireTLS: true }), /STARTTLS/);
    } finally {
      await secure.close();
      await plain.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a message that cannot be stored gets a temporary refusal, never a 250', async () => {
  const listener = await listen(async () => {
    throw new Error('database unavailable');
  });
  try {
    await assert.rejects(deliver(listener.port), (error: { responseCode?: number }) => {
      assert.equal(error.responseCode, 451);
      return true;
    });
  } finally {
    await listener.close();
  }
});

/** A raw SMTP client: what the server says, line by line, and whether it closed the connection. */
async function rawSession(port: number) {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  let received = '';
  const waiters: Array<() => void> = [];
  socket.on('data', (chunk: Buffer) => {
    received += chunk.toString('latin1');
    for (const wake of waiters.splice(0)) wake();
  });
  // Resolves on the close whatever ended it (a reset too): 'error' is already handled above.
  const closed = new Promise<true>((resolve) => socket.once('close', () => resolve(true)));
  await once(socket, 'connect');
  return {
    socket,
    closed,
    received: () => received,
    /** Resolves with everything received once it holds `pattern` (or the connection closed). */
    async expect(pattern: RegExp): Promise<string> {
      while (!pattern.test(received)) {
        const more = new Promise<void>((resolve) => waiters.push(resolve));
        if ((await Promise.race([more.then(() => false), closed])) === true) break;
      }
      return received;
    },
  };
}

const withDeadline = <T>(promise: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([
    promise,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms).unref(),
    ),
  ]);

test('a session that trickles its message a byte at a time is ended at INBOUND_SESSION_TIMEOUT', async () => {
  const stored: NewInboundMessage[] = [];
  const listener = await listen(
    async (message) => {
      stored.push(message);
      return 'inb_1';
    },
    undefined,
    { sessionTimeoutMs: 3_000 },
  );
  try {
    const client = await rawSession(listener.port);
    await client.expect(/^220 /m);
    client.socket.write('EHLO slow.example\r\n');
    await client.expect(/^250 /m);
    client.socket.write('MAIL FROM:<>\r\nRCPT TO:<bounce+x@bounces.example.test>\r\nDATA\r\n');
    await client.expect(/^354 /m);
    // Never idle long enough for the 60 s idle timeout: a byte of the message every 50 ms until the server
    // closes the connection (without the limit it never does, and the test's timeout fails it). The 421
    // naming the session limit is the signal that the limit, and nothing else, ended it.
    const trickle = setInterval(() => client.socket.write('x'), 50);
    try {
      await client.closed;
    } finally {
      clearInterval(trickle);
    }
    assert.match(client.received(), /^421 .*Session time limit/m);
    assert.deepEqual(stored, [], 'a message cut off is not stored');
  } finally {
    await listener.close();
  }
});

test('one client address holds INBOUND_MAX_CONNECTIONS_PER_CLIENT sessions at most', async () => {
  const listener = await listen(async () => 'inb_1', undefined, { maxConnectionsPerClient: 2 });
  try {
    const first = await rawSession(listener.port);
    const second = await rawSession(listener.port);
    assert.match(await first.expect(/^220 /m), /^220 /m);
    assert.match(await second.expect(/^220 /m), /^220 /m);
    const third = await rawSession(listener.port);
    await withDeadline(third.closed, 5000, 'the close of the refused connection');
    assert.match(third.received(), /^421 4\.7\.0 Too many connections from your address/m);
    assert.doesNotMatch(third.received(), /^220 /m);

    // Once one of the two leaves, the address may connect again (the count follows the closes).
    first.socket.end('QUIT\r\n');
    await withDeadline(first.closed, 5000, 'the QUIT');
    const again = await until(
      async () => {
        const next = await rawSession(listener.port);
        const greeting = await withDeadline(next.expect(/^(220|421) /m), 5000, 'a greeting');
        next.socket.destroy();
        return /^220 /m.test(greeting);
      },
      5000,
      'a greeting once a session ended',
    );
    assert.ok(again);
    second.socket.destroy();
  } finally {
    await listener.close();
  }
});

test('the inbound settings are validated', () => {
  assert.deepEqual(loadConfig({}).inbound, {
    host: '127.0.0.1',
    port: 2525,
    maxBytes: 10 * 1024 * 1024,
    sessionTimeoutMs: 300_000,
    maxConnectionsPerClient: 20,
    messagesPerMinutePerClient: 120,
    tls: undefined,
  });
  assert.deepEqual(
    loadConfig({
      INBOUND_SESSION_TIMEOUT: '90s',
      INBOUND_MAX_CONNECTIONS_PER_CLIENT: '5',
      INBOUND_MESSAGES_PER_MINUTE: '7',
    }).inbound,
    {
      ...loadConfig({}).inbound,
      sessionTimeoutMs: 90_000,
      maxConnectionsPerClient: 5,
      messagesPerMinutePerClient: 7,
    },
  );
  assert.throws(
    () => loadConfig({ INBOUND_SESSION_TIMEOUT: '10ms' }),
    /INBOUND_SESSION_TIMEOUT must be from 1s to 1h/,
  );
  assert.throws(
    () => loadConfig({ INBOUND_MAX_CONNECTIONS_PER_CLIENT: '0' }),
    /INBOUND_MAX_CONNECTIONS_PER_CLIENT must be an integer from 1 to 5000/,
  );
  assert.deepEqual(loadConfig({}).smtpDsn, ['success', 'failure', 'delay']);
  assert.deepEqual(loadConfig({ SMTP_DSN: 'off' }).smtpDsn, []);
  assert.deepEqual(loadConfig({ SMTP_DSN: 'Failure, delay' }).smtpDsn, ['failure', 'delay']);
  assert.throws(() => loadConfig({ SMTP_DSN: 'always' }), /SMTP_DSN must be off or a list/);
  assert.throws(() => loadConfig({ INBOUND_SMTP_PORT: '70000' }), /INBOUND_SMTP_PORT must be an integer/);
  assert.throws(() => loadConfig({ INBOUND_MAX_BYTES: '10' }), /INBOUND_MAX_BYTES must be an integer/);
});

test('messages begun per client address are limited per minute (450 past it), on the injected clock', async () => {
  let now = Date.parse('2026-11-26T10:00:00.000Z');
  const clock: Clock = { now: () => new Date(now) };
  let stored = 0;
  const listener = await listen(async () => `inb_${++stored}`, undefined, {
    messagesPerMinutePerClient: 3,
    clock,
  });
  try {
    for (let i = 0; i < 3; i++) await deliver(listener.port);
    await assert.rejects(deliver(listener.port), /450 4\.7\.1 Too many messages/);
    assert.equal(stored, 3, 'the fourth was not stored');
    now += 60_000;
    await deliver(listener.port);
    assert.equal(stored, 4, 'a minute later the address may send again');
  } finally {
    await listener.close();
  }
});
