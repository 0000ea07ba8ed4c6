import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import nodemailer from 'nodemailer';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import {
  createProcessDatabase,
  inboundSmtpPort,
  type ProcessDatabase,
  requestJson,
  type ServerProcess,
  startServerProcess,
} from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';

// Received mail acknowledged with 250 is never lost: the process that took it is killed before reading it,
// and after a restart its `email.received` arrives, once.

const KEY = 'pw_receiving_crash_key_0123456789';
const DOMAIN = 'acme.test';

for (const engine of ALL_ENGINES) {
  describe(`received mail survives a killed process (${engine})`, { skip: engineSkip(engine) }, () => {
    let db: ProcessDatabase;
    let dns: TestDnsServer;
    let receiver: Receiver;
    let env: Record<string, string>;
    const children: ServerProcess[] = [];

    const api = (url: string, method: string, path: string, body?: unknown) =>
      requestJson(`${url}${path}`, KEY, method, body);

    before(async () => {
      db = await createProcessDatabase(engine);
      dns = await startDnsServer();
      receiver = await startReceiver();
      env = {
        ...db.env,
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 6).toString('hex'),
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        INBOUND_MX_HOST: 'mx.postwire.test',
        DNS_SERVERS: dns.address,
        WORKER_DEAD_AFTER: '1.5s',
        LOG_LEVEL: 'info',
        // The kernel picks each listener's port as it binds (inboundSmtpPort reads it from the log).
        INBOUND_SMTP_PORT: '0',
      };
      const server = await startServerProcess(env);
      children.push(server);
      assert.equal(
        (await api(server.url, 'POST', '/v1/webhooks', { url: receiver.url, events: ['email.received'] }))
          .status,
        201,
      );
      const domain = await api(server.url, 'POST', '/v1/domains', { name: DOMAIN, receiving: true });
      for (const record of domain.body.records as Array<{ type: string; name: string; value: string }>) {
        if (record.type === 'MX') dns.add(record.name, { type: 'MX', exchange: record.value, priority: 10 });
        else if (record.name.includes('_domainkey'))
          dns.add(record.name, { type: 'TXT', text: record.value });
      }
      const verified = await api(server.url, 'POST', `/v1/domains/${domain.body.id}/verify`);
      assert.equal(verified.body.receiving_verified, true);
      const route = await api(server.url, 'POST', '/v1/inbound-routes', {
        match: `help@${DOMAIN}`,
        action: 'webhook',
      });
      assert.equal(route.status, 201);
      await server.stop();
    });

    after(async () => {
      for (const child of children) child.kill();
      await receiver?.close();
      await dns?.close();
      await db?.cleanup();
    });

    test('killed after the 250, before reading it: the next worker reads it, one email.received', async () => {
      // A process that listens but runs no worker: nothing reads the message before the kill.
      const listener = await startServerProcess(env, ['src/cli.ts', 'serve', '--no-worker']);
      children.push(listener);
      const port = await inboundSmtpPort(listener);
      const client = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true });
      const info = await client.sendMail({
        from: 'Zoë <zoe@customer.example>',
        to: `help+case-9@${DOMAIN}`,
        subject: 'Help with order 9',
        text: 'Hello,\nmy order 9 has not arrived.\nRegards,\nZoë\n',
        html: '<p>Hello,</p><p>my order 9 has not arrived.</p>',
      });
      client.close();
      const stored = /queued as (inb_[0-9a-z]+)/.exec(info.response)![1]!;
      listener.kill();
      await listener.exited;
      const row = await db.database.handle.db
        .selectFrom('inbound_messages')
        .select('status')
        .where('id', '=', stored)
        .executeTakeFirstOrThrow();
      assert.equal(row.status, 'pending', 'stored, not read');

      const worker = await startServerProcess(env, ['src/cli.ts', 'worker', '--no-inbound'], (line) =>
        /Postwire worker started/.test(line.msg),
      );
      children.push(worker);
      const received = () =>
        receiver.requests
          .map((request) => ({ id: request.headers['webhook-id'], event: JSON.parse(request.body) }))
          .filter(({ event }) => event.type === 'email.received');
      const { event } = await until(() => received()[0], 15_000, 'email.received');
      assert.equal(event.data.recipient, `help+case-9@${DOMAIN}`);
      assert.equal(event.data.mailbox_hash, 'case-9');
      assert.equal(event.data.subject, 'Help with order 9');
      assert.equal(await worker.stop(), 0);
      const rows = await db.database.handle.db
        .selectFrom('received_emails')
        .select('id')
        .where('inbound_id', '=', stored)
        .execute();
      assert.equal(rows.length, 1, 'one received email');
      assert.equal(new Set(received().map(({ id }) => id)).size, 1, 'one event delivered');
    });
  });
}
