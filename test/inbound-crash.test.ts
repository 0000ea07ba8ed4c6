import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import {
  createProcessDatabase,
  inboundSmtpPort,
  type ProcessDatabase,
  requestJson,
  type ServerProcess,
  startServerProcess,
  startWorkerProcess,
} from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { dsnOn, mailReport } from './helpers/reports.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// A report acknowledged with 250 is never lost: the process that took it is killed before it was read (or
// while its outcome was being written), and the event still arrives after a restart, once.

const KEY = 'pw_inbound_crash_key_0123456789';
const BOUNCE_DOMAIN = 'bounces.example.test';

for (const engine of ALL_ENGINES) {
  describe(`inbound reports survive a killed process (${engine})`, { skip: engineSkip(engine) }, () => {
    let db: ProcessDatabase;
    let relay: TestSmtpServer;
    let receiver: Receiver;
    let env: Record<string, string>;
    const children: ServerProcess[] = [];

    const api = (url: string, method: string, path: string, body?: unknown) =>
      requestJson(`${url}${path}`, KEY, method, body);

    const inboundRow = (id: string) =>
      db.database.handle.db
        .selectFrom('inbound_messages')
        .select(['status', 'locked_by'])
        .where('id', '=', id)
        .executeTakeFirstOrThrow();

    const bouncedEvents = async (emailId: string) =>
      db.database.handle.db
        .selectFrom('events')
        .select('id')
        .where('email_id', '=', emailId)
        .where('type', '=', 'email.bounced')
        .execute();

    /** Webhook deliveries of email.bounced for the email, counted by event id (webhook-id). */
    const bounceDeliveries = (emailId: string) =>
      new Set(
        receiver.requests
          .map((request) => ({ id: request.headers['webhook-id'], event: JSON.parse(request.body) }))
          .filter(({ event }) => event.type === 'email.bounced' && event.data.email_id === emailId)
          .map(({ id }) => id),
      );

    /** Sends an email through a full server and returns its id and return path once it is `sent`. */
    async function sentEmail(to: string): Promise<{ id: string; from: string; raw: string }> {
      const server = await startServerProcess(env);
      children.push(server);
      try {
        const accepted = await api(server.url, 'POST', '/v1/emails', {
          from: 'shop@example.com',
          to: [to],
          subject: 'Order',
          text: 'Thanks',
        });
        assert.equal(accepted.status, 202);
        const id: string = accepted.body.id;
        const message = await until(
          () => relay.messages.find((m) => m.messageId?.startsWith(`<${id}@`)),
          10_000,
          'the relay to receive the email',
        );
        await until(
          async () => (await api(server.url, 'GET', `/v1/emails/${id}`, undefined)).body.status === 'sent',
          10_000,
          'the email to be sent',
        );
        return { id, from: message.from, raw: message.raw };
      } finally {
        assert.equal(await server.stop(), 0);
      }
    }

    const bounceReport = (email: { from: string; raw: string }, to: string) =>
      dsnOn(email, {
        action: 'failed',
        recipient: to,
        status: '5.1.1',
        diagnostic: '550 5.1.1 user unknown',
      });

    before(async () => {
      db = await createProcessDatabase(engine);
      relay = await startSmtpServer({ dsn: true });
      receiver = await startReceiver();
      env = {
        ...db.env,
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 5).toString('hex'),
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        SMTP_URL: `smtp://127.0.0.1:${relay.port}`,
        BOUNCE_DOMAIN,
        WORKER_DEAD_AFTER: '1.5s',
        LOG_LEVEL: 'info',
        // The kernel picks each listener's port as it binds (inboundSmtpPort reads it from the log).
        INBOUND_SMTP_PORT: '0',
      };
      const server = await startServerProcess(env);
      children.push(server);
      const webhook = await api(server.url, 'POST', '/v1/webhooks', {
        url: receiver.url,
        events: EVENT_KIND_NAMES,
      });
      assert.equal(webhook.status, 201);
      await server.stop();
    });

    after(async () => {
      for (const child of children) child.kill();
      await receiver?.close();
      await relay?.close();
      await db?.cleanup();
    });

    test('killed after the 250, before reading it: the next worker reads it, one event', async () => {
      const email = await sentEmail('gone@example.org');
      // A process that listens but runs no worker: nothing reads the report before the kill.
      const listener = await startServerProcess(env, ['src/cli.ts', 'serve', '--no-worker']);
      children.push(listener);
      const port = await inboundSmtpPort(listener);
      const reply = await mailReport(port, email.from, bounceReport(email, 'gone@example.org'));
      const stored = /queued as (inb_[0-9a-z]+)/.exec(reply)![1]!;
      listener.kill();
      await listener.exited;
      assert.equal((await inboundRow(stored)).status, 'pending', 'stored, not read');
      assert.equal((await bouncedEvents(email.id)).length, 0);

      // `--no-inbound`: this worker reads what is stored but listens for nothing, not even on the port it is
      // given, the one the killed listener had.
      const worker = await startServerProcess(
        { ...env, INBOUND_SMTP_PORT: String(port) },
        ['src/cli.ts', 'worker', '--no-inbound'],
        (line) => /Postwire worker started/.test(line.msg),
      );
      children.push(worker);
      await assert.rejects(mailReport(port, email.from, 'Subject: x\n\nx\n'), /ECONNREFUSED/);
      await until(() => bounceDeliveries(email.id).size === 1, 10_000, 'email.bounced at the webhook');
      assert.equal((await inboundRow(stored)).status, 'applied');
      assert.equal(await worker.stop(), 0);
      assert.equal((await bouncedEvents(email.id)).length, 1, 'one event');
      assert.equal(bounceDeliveries(email.id).size, 1);
    });

    test(
      'killed while writing what the report says: another worker takes it over, one event',
      { skip: engine !== 'postgres' && 'PostgreSQL shows which statement waits on a lock' },
      async () => {
        const email = await sentEmail('late@example.org');
        const recipient = await db.database.handle.db
          .selectFrom('email_recipients')
          .select('id')
          .where('email_id', '=', email.id)
          .executeTakeFirstOrThrow();
        // Hold the recipient's row: the worker reads the report, then waits to write its outcome.
        const holder = new pg.Client({ connectionString: db.env.DATABASE_URL });
        const monitor = new pg.Client({ connectionString: db.env.DATABASE_URL });
        await holder.connect();
        await monitor.connect();
        try {
          await holder.query('BEGIN');
          await holder.query('SELECT id FROM email_recipients WHERE id = $1 FOR UPDATE', [recipient.id]);
          const worker = await startWorkerProcess(env);
          children.push(worker);
          const port = await inboundSmtpPort(worker);
          const reply = await mailReport(port, email.from, bounceReport(email, 'late@example.org'));
          const stored = /queued as (inb_[0-9a-z]+)/.exec(reply)![1]!;
          // Asked from another connection: inside the holder's transaction pg_stat_activity is a snapshot.
          await until(
            async () =>
              (
                await monitor.query(
                  `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE 'update "email_recipients"%'`,
                )
              ).rows.length > 0,
            10_000,
            'the worker to wait on the recipient row',
          );
          worker.kill();
          await worker.exited;
          await holder.query('ROLLBACK');
          assert.equal((await inboundRow(stored)).status, 'pending', 'the kill rolled the outcome back');
          assert.equal((await bouncedEvents(email.id)).length, 0);

          // Its lease outlives the test; the new worker sees its heartbeat stop and takes the message back.
          const next = await startWorkerProcess(env);
          children.push(next);
          await until(() => bounceDeliveries(email.id).size === 1, 15_000, 'email.bounced at the webhook');
          assert.equal((await inboundRow(stored)).status, 'applied');
          assert.equal(await next.stop(), 0);
          assert.equal((await bouncedEvents(email.id)).length, 1, 'one event');
        } finally {
          await holder.end();
          await monitor.end();
        }
      },
    );
  });
}
