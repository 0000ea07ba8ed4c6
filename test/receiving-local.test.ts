// docs/api/receiving.md's local path, as written: a server in capture mode started as the guide starts it, a
// domain under a reserved test name verified without DNS, a route, a message sent with swaks to the inbound
// listener, and the received email through the API. And the rule's edges: other names, other modes.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.ts';
import { inboundSmtpPort, requestJson, startServerProcess } from './helpers/process.ts';
import { until } from './helpers/until.ts';

const run = promisify(execFile);

test('the guide: acme.test verifies without DNS in capture mode, and a message swaks sends is received', async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'postwire-receiving-local-'));
  const server = await startServerProcess({
    POSTWIRE_DATA_DIR: dataDir,
    POSTWIRE_ENCRYPTION_KEY: 'cd'.repeat(32),
    HOME: process.env.HOME,
    INBOUND_MX_HOST: 'mx.acme.test',
    INBOUND_SMTP_PORT: '0',
  });
  t.after(async () => {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const inboundPort = await inboundSmtpPort(server);
  const key = /Your API key \(shown once\): (pw_[A-Za-z0-9_-]+)/.exec(server.stdout())![1]!;
  const api = (method: string, url: string, body?: unknown) =>
    requestJson(`${server.url}/v1${url}`, key, method, body);

  const created = await api('POST', '/domains', { name: 'acme.test', receiving: true });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(created.body.status, 'pending');
  assert.match(created.body.verified_without_dns, /^capture mode and a reserved test name/);
  const verified = await api('POST', '/domains/acme.test/verify');
  assert.equal(verified.status, 200, JSON.stringify(verified.body));
  assert.deepEqual(
    [verified.body.status, verified.body.receiving_verified],
    ['verified', true],
    JSON.stringify(verified.body),
  );
  // Any other name is looked up as ever: nothing says it is taken without DNS.
  const real = await api('POST', '/domains', { name: 'acme.com' });
  assert.equal(real.body.verified_without_dns, null);

  const route = await api('POST', '/inbound-routes', {
    match: 'support@acme.test',
    action: 'store',
    priority: 10,
  });
  assert.equal(route.status, 201, JSON.stringify(route.body));

  const { stdout } = await run('swaks', [
    '--server',
    `127.0.0.1:${inboundPort}`,
    '--from',
    'ada@example.org',
    '--to',
    'support@acme.test',
    '--header',
    'Subject: Help',
    '--body',
    'It broke.',
  ]);
  assert.match(stdout, /<- {2}250 2\.0\.0 Ok: queued as inb_/, stdout);

  let received: any[] = [];
  await until(
    async () =>
      (received = (await api('GET', '/received-emails?recipient=support@acme.test')).body.data).length > 0,
    20_000,
    'the message received',
  );
  assert.deepEqual(
    received.map((email) => [email.recipient, email.subject, email.route_id]),
    [['support@acme.test', 'Help', route.body.id]],
  );
});

test('only capture mode takes test names without DNS, and only while DNS_SERVERS is not set', () => {
  assert.equal(loadConfig({}).testDomainsWithoutDns, true);
  assert.equal(loadConfig({ DNS_SERVERS: '127.0.0.1:5353' }).testDomainsWithoutDns, false);
  assert.equal(loadConfig({ TEST_DOMAINS_WITHOUT_DNS: 'false' }).testDomainsWithoutDns, false);
  assert.equal(loadConfig({ SMTP_URL: 'smtp://relay.acme.com:587' }).testDomainsWithoutDns, false);
  assert.equal(loadConfig({ MAIL_TRANSPORT: 'direct' }).testDomainsWithoutDns, false);
  assert.throws(
    () => loadConfig({ MAIL_TRANSPORT: 'direct', TEST_DOMAINS_WITHOUT_DNS: 'true' }),
    (error: unknown) =>
      error instanceof ConfigError &&
      error.message.includes('TEST_DOMAINS_WITHOUT_DNS=true needs capture mode (MAIL_TRANSPORT=capture).'),
  );
  assert.throws(
    () => loadConfig({ TEST_DOMAINS_WITHOUT_DNS: 'yes' }),
    /TEST_DOMAINS_WITHOUT_DNS must be true or false, got 'yes'/,
  );
});
