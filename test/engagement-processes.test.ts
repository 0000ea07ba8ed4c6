import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import { engineSkip, TEST_ENCRYPTION_KEY } from './helpers/app.ts';
import { BROWSER, parseMail, waitForEvent } from './helpers/engagement.ts';
import {
  createProcessDatabase,
  type ProcessDatabase,
  requestJson,
  type ServerProcess,
  startOnFreePort,
  startServerProcess,
  startWorkerProcess,
} from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';

// The production wiring: `postwire serve --no-worker` answers the API and the public routes, a separate
// `postwire worker` builds each recipient's copy and sends it; they share only PostgreSQL and the key.

const KEY = 'pw_engagement_processes_key_0123456789';

describe(
  'engagement with the API and the worker in separate processes (postgres)',
  {
    skip: engineSkip('postgres'),
  },
  () => {
    let db: ProcessDatabase;
    let smtp: TestSmtpServer;
    let receiver: Receiver;
    const running: ServerProcess[] = [];
    before(async () => {
      db = await createProcessDatabase('postgres');
      smtp = await startSmtpServer();
      receiver = await startReceiver();
    });
    after(async () => {
      for (const process of running) process.kill();
      await Promise.all(running.map((process) => process.exited));
      await receiver.close();
      await smtp.close();
      await db.cleanup();
    });

    test('tracking URLs built by the worker are served by the API process', { timeout: 60_000 }, async () => {
      // The port is chosen here: the worker builds the tracking URLs with it (PUBLIC_URL).
      let url = '';
      let env: Record<string, string> = {};
      const api = await startOnFreePort((port) => {
        url = `http://127.0.0.1:${port}`;
        env = {
          ...db.env,
          PORT: String(port),
          PUBLIC_URL: url,
          POSTWIRE_ENCRYPTION_KEY: TEST_ENCRYPTION_KEY.toString('hex'),
          POSTWIRE_BOOTSTRAP_KEY: KEY,
          POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
          SMTP_URL: `smtp://127.0.0.1:${smtp.port}`,
        };
        return startServerProcess(env, ['src/cli.ts', 'serve', '--no-worker']);
      });
      running.push(api);
      running.push(await startWorkerProcess(env));

      const call = (method: string, path: string, body?: unknown) =>
        requestJson(`${url}${path}`, KEY, method, body);
      assert.equal(
        (await call('POST', '/v1/webhooks', { url: receiver.url, events: EVENT_KIND_NAMES })).status,
        201,
      );
      const sent = await call('POST', '/v1/emails', {
        from: 'shop@acme.test',
        to: 'eve@example.org',
        subject: 'Across processes',
        html: '<p><a href="https://acme.test/deal">deal</a></p>',
        tracking: { opens: true, clicks: true },
        unsubscribe: true,
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body) + running[0]!.stdout().slice(-3000));

      const [message] = await smtp.waitFor(1, 20_000);
      const mail = await parseMail(message!.raw);
      assert.ok(mail.pixel?.startsWith(`${url}/o/`), mail.html);

      const open = await fetch(mail.pixel!, { headers: { 'user-agent': BROWSER } });
      assert.equal(open.status, 200);
      const opened = await waitForEvent(receiver, (event) => event.type === 'email.opened', 20_000);
      assert.equal(opened.data.email_id, sent.body.id);

      const click = await fetch(mail.links[0]!, { redirect: 'manual', headers: { 'user-agent': BROWSER } });
      assert.equal(click.status, 302);
      assert.equal(click.headers.get('location'), 'https://acme.test/deal');
      await waitForEvent(receiver, (event) => event.type === 'email.clicked', 20_000);

      const unsubscribe = await fetch(mail.unsubscribeUrl!, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'List-Unsubscribe=One-Click',
      });
      assert.equal(unsubscribe.status, 200);
      await waitForEvent(receiver, (event) => event.type === 'email.unsubscribed', 20_000);
      assert.equal((await call('GET', '/v1/suppressions/eve@example.org')).body.reason, 'unsubscribe');

      const email = await call('GET', `/v1/emails/${sent.body.id}`);
      assert.equal(email.body.recipients[0].open_count, 1);
      assert.equal(email.body.recipients[0].clicks.length, 1);
      const stats = await call('GET', '/v1/stats');
      assert.equal(stats.body.total.sent, 1);
      assert.equal(stats.body.total.unsubscribed, 1);
    });
  },
);
