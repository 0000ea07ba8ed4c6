import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import nodemailer from 'nodemailer';
import { loadConfig } from '../src/config.ts';
import { systemClock } from '../src/lib/clock.ts';
import { silentWorkerLogger } from '../src/lib/worker-logger.ts';
import type { NewInboundMessage } from '../src/modules/inbound/inbound.repo.ts';
import { startInboundListener } from '../src/modules/inbound/inbound.listener.ts';

// The listener on its own, with a store the test controls: STARTTLS when configured, and a store that
// fails answers with a temporary error, so the sending MTA keeps the report and tries again.

const listen = (
  store: (message: NewInboundMessage) => Promise<string>,
  tls?: { cert: string; key: string },
) =>
  startInboundListener({
    host: '127.0.0.1',
    port: 0,
    maxBytes: 1024 * 1024,
    tls,
    bounceDomain: 'bounces.example.test',
    acceptsDomain: (domain) => domain === 'bounces.example.test',
    store,
    clock: systemClock,
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
      assert.match(info.response, /^250 2\.0\.0 Ok: stored as inb_1/);
      assert.equal(stored[0]!.raw.toString(), 'Subject: report\r\n\r\nbody\r\n');
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

test('the inbound settings are validated', () => {
  assert.deepEqual(loadConfig({}).inbound, {
    host: '127.0.0.1',
    port: 2525,
    maxBytes: 10 * 1024 * 1024,
    tls: undefined,
  });
  assert.deepEqual(loadConfig({}).smtpDsn, ['success', 'failure', 'delay']);
  assert.deepEqual(loadConfig({ SMTP_DSN: 'off' }).smtpDsn, []);
  assert.deepEqual(loadConfig({ SMTP_DSN: 'Failure, delay' }).smtpDsn, ['failure', 'delay']);
  assert.throws(() => loadConfig({ SMTP_DSN: 'always' }), /SMTP_DSN must be off or a list/);
  assert.throws(() => loadConfig({ INBOUND_SMTP_PORT: '70000' }), /INBOUND_SMTP_PORT must be an integer/);
  assert.throws(() => loadConfig({ INBOUND_MAX_BYTES: '10' }), /INBOUND_MAX_BYTES must be an integer/);
});
