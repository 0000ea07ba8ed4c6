import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { systemClock } from '../src/lib/clock.ts';
import { createSendingWorker } from '../src/modules/sending/sending.worker.ts';
import { createRelayTransport } from '../src/modules/sending/transports/relay.ts';
import { ALL_ENGINES, engineSkip, startTestApp } from './helpers/app.ts';
import { startReceiver } from './helpers/receiver.ts';
import { startSmtpServer } from './helpers/smtp.ts';

// The statements (and commits) the hot paths cost, counted under the database driver: per accepted
// `POST /v1/emails` with one recipient, per SMTP delivery outcome and per webhook delivery outcome. The
// bounds keep them from growing back unnoticed; the figures are printed as test diagnostics.

interface Tally {
  statements: number;
  /**
   * Without the timed ones (the throttled NOTIFY, worker heartbeats, the stamp reads a lease makes on
   * PostgreSQL: one per lease, however many requests; the API logs' batch INSERT, every 250 ms at most,
   * however many requests), whose number depends on timing; nor a claim that
   * straight follows the same claim (a wake-up and the poll racing: the second round finds nothing).
   */
  core: number;
  commits: number;
  sql: string[];
}

function createCounter() {
  let tally: Tally | undefined;
  /**
   * Whether a transaction is open: a write outside one commits on its own (PostgreSQL runs a lone outcome
   * statement without BEGIN and COMMIT), so it counts as a commit too. The statements counted here run one
   * at a time, so one flag for all connections is enough.
   */
  let inTransaction = false;
  let previous = '';
  /** The API logs' INSERTs, whenever they run: never inside another write's transaction. */
  const logWrites = { inTransaction: 0, alone: 0 };
  return {
    logWrites,
    observe(sql: string) {
      const repeatedClaim = sql === previous && /locked_until/i.test(sql) && /^\s*(with|update)\b/i.test(sql);
      previous = sql;
      if (/^\s*begin/i.test(sql)) inTransaction = true;
      if (/^\s*insert into "?api_log(?:s|_answers)"?/i.test(sql))
        logWrites[inTransaction ? 'inTransaction' : 'alone'] += 1;
      const ends = /^\s*(commit|rollback)/i.test(sql);
      const commitsAlone = !inTransaction && /^\s*(insert|update|delete|with)\b/i.test(sql);
      if (ends) inTransaction = false;
      if (!tally) return;
      tally.statements += 1;
      if (
        !repeatedClaim &&
        !/^\s*notify|pg_notify|"queue_workers"|from "cache_stamps"|insert into "?api_log(?:s|_answers)"?/i.test(
          sql,
        )
      ) {
        tally.core += 1;
      }
      if (/^\s*commit/i.test(sql) || commitsAlone) tally.commits += 1;
      tally.sql.push(sql.replace(/\s+/g, ' ').slice(0, 120));
    },
    start() {
      tally = { statements: 0, core: 0, commits: 0, sql: [] };
    },
    stop(): Tally {
      const result = tally!;
      tally = undefined;
      return result;
    },
  };
}

const EMAILS = 10;
const message = (i: number) => ({
  from: 'Shop <shop@example.com>',
  to: `user${i}@example.org`,
  subject: `Receipt #${i}`,
  html: `<p>Receipt <b>${i}</b></p>`,
  text: `Receipt ${i}`,
});

for (const engine of ALL_ENGINES) {
  describe(`statements per operation (${engine})`, { skip: engineSkip(engine) }, () => {
    const counter = createCounter();
    const cleanups: Array<() => Promise<void>> = [];
    after(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup();
    });

    test('accepted emails, SMTP delivery outcomes, webhook delivery outcomes', async (t) => {
      const api = await startTestApp(engine, { allowPrivateUrls: true, observe: counter.observe });
      cleanups.push(() => api.close());

      // Accepted: one recipient, no webhook, no Idempotency-Key (as bench/send.ts sends), one at a time.
      const warm = await api.request('POST', '/v1/emails', { body: message(0) });
      assert.equal(warm.status, 202);
      counter.start();
      for (let i = 1; i <= EMAILS; i += 1) {
        const response = await api.request('POST', '/v1/emails', { body: message(i) });
        assert.equal(response.status, 202);
      }
      const accepted = counter.stop();
      // The first keyed request of the process also deletes expired keys (once a minute): not counted.
      const warmKeyed = await api.request('POST', '/v1/emails', {
        body: message(98),
        headers: { 'idempotency-key': 'statements-0' },
      });
      assert.equal(warmKeyed.status, 202);
      counter.start();
      const keyed = await api.request('POST', '/v1/emails', {
        body: message(99),
        headers: { 'idempotency-key': 'statements-1' },
      });
      assert.equal(keyed.status, 202);
      const acceptedKeyed = counter.stop();

      // Outcomes: a worker is started, does its work and is stopped (which writes its last outcomes); what
      // a start and stop with nothing to do costs is taken off, leaving the claims and the outcomes.
      const smtp = await startSmtpServer();
      cleanups.push(() => smtp.close());
      const sendingWorker = () =>
        createSendingWorker({
          database: api.database.handle,
          clock: systemClock,
          events: api.events,
          repositories: api.services.repositories,
          transport: createRelayTransport({
            url: `smtp://127.0.0.1:${smtp.port}`,
            connections: 4,
            timeoutMs: 5000,
          }),
          settings: {
            schedule: [0, 1000],
            jitter: 0,
            concurrency: 16,
            concurrencyPerHost: 16,
            timeoutMs: 5000,
            pollIntervalMs: 60_000,
            stopGraceMs: 1000,
          },
          notifier: api.app.sendNotifier,
        });
      const measure = async (
        start: () => Promise<{ stop(): Promise<void> }>,
        done: () => Promise<unknown>,
      ): Promise<Tally> => {
        counter.start();
        const worker = await start();
        await done();
        await worker.stop();
        return counter.stop();
      };
      const startSending = async () => {
        const worker = sendingWorker();
        await worker.start();
        return worker;
      };
      const smtpIdle = await measure(startSending, async () => undefined);
      // The accepted emails so far (EMAILS + 3), delivered together.
      const acceptedSoFar = EMAILS + 3;
      const smtpTogether = await measure(startSending, () => smtp.waitFor(acceptedSoFar));
      const smtpAlone = await measure(
        async () => {
          const response = await api.request('POST', '/v1/emails', { body: message(100) });
          assert.equal(response.status, 202);
          counter.start();
          return startSending();
        },
        () => smtp.waitFor(acceptedSoFar + 1),
      );

      // Webhook outcomes: events for one subscribed webhook, delivered to a local receiver.
      const receiver = await startReceiver();
      cleanups.push(() => receiver.close());
      const webhook = await api.request('POST', '/v1/webhooks', {
        body: { url: receiver.url, events: ['email.sent'] },
      });
      assert.equal(webhook.status, 201);
      const startDelivering = () => api.startWorker({ pollIntervalMs: 60_000, notifier: null });
      const webhooksIdle = await measure(startDelivering, async () => undefined);
      for (let i = 0; i < EMAILS; i += 1) {
        await api.events.emit(api.projectId, 'email.sent', { email_id: `msg_${i}` });
      }
      const webhooksTogether = await measure(startDelivering, () => receiver.waitFor(EMAILS));
      await api.events.emit(api.projectId, 'email.sent', { email_id: 'msg_alone' });
      const webhookAlone = await measure(startDelivering, () => receiver.waitFor(EMAILS + 1));

      // Accepted as above, but sent at once (no worker runs any more): written in groups (src/modules/emails/send-groups.ts), how many per group
      // depending on how the requests arrive.
      counter.start();
      const together = await Promise.all(
        Array.from({ length: EMAILS }, (_, i) =>
          api.request('POST', '/v1/emails', { body: message(200 + i) }),
        ),
      );
      for (const response of together) assert.equal(response.status, 202);
      const acceptedTogether = counter.stop();

      const minus = (tally: Tally, idle: Tally): Tally => ({
        statements: tally.statements - idle.statements,
        core: tally.core - idle.core,
        commits: tally.commits - idle.commits,
        sql: tally.sql.slice(idle.sql.length - 2),
      });
      const delivered = minus(smtpTogether, smtpIdle);
      const deliveredAlone = minus(smtpAlone, smtpIdle);
      const webhooks = minus(webhooksTogether, webhooksIdle);
      const webhooksAlone = minus(webhookAlone, webhooksIdle);
      const per = (tally: Tally, count: number) =>
        `${(tally.statements / count).toFixed(1)} statements, ${(tally.commits / count).toFixed(2)} commits`;
      t.diagnostic(`accepted email: ${per(accepted, EMAILS)}`);
      t.diagnostic(`accepted email, ${EMAILS} at once: ${per(acceptedTogether, EMAILS)}`);
      t.diagnostic(`accepted email with Idempotency-Key: ${per(acceptedKeyed, 1)}`);
      t.diagnostic(`SMTP delivery outcome, alone: ${per(deliveredAlone, 1)}`);
      t.diagnostic(`SMTP delivery outcome, ${acceptedSoFar} together: ${per(delivered, acceptedSoFar)}`);
      t.diagnostic(`webhook delivery outcome, alone: ${per(webhooksAlone, 1)}`);
      t.diagnostic(`webhook delivery outcome, ${EMAILS} together: ${per(webhooks, EMAILS)}`);
      // Bounds without the timed statements. Accepted emails: 7 on SQLite and 9 on PostgreSQL (8 without the
      // throttled NOTIFY) before the accepting statements were written as SQL text, sends grouped and sending
      // domains kept in memory; 6 and 7 since (the domain lookup gone). Sent at once, the sends are written in
      // groups whose sizes depend on how the requests arrive (about 3 statements an email here): never more
      // than alone.
      assert.ok(accepted.core / EMAILS <= 7, `${accepted.core / EMAILS} statements per accepted email`);
      assert.ok(
        acceptedTogether.core / EMAILS <= 7,
        `${acceptedTogether.core / EMAILS} statements per accepted email, ${EMAILS} at once`,
      );
      assert.ok(acceptedKeyed.core <= 11, `${acceptedKeyed.core} statements per keyed accepted email`);
      // An outcome alone (a fresh worker: its first success also writes the webhook's health). PostgreSQL
      // claims a recipient with its email in one statement and writes a one-recipient email's status in the
      // recipients' statement (SMTP: 10 → 9), and writes webhook states and attempts in one (webhooks: 5 → 4;
      // 1 statement, no BEGIN/COMMIT, per batch once the health write is not due). SQLite: 10 and 6, as before;
      // its webhooks 6 → 5 since a delivery's row keeps its latest attempt (0020): a first attempt writes no
      // attempt row, so no INSERT. PostgreSQL SMTP 8 → 7: the events' fan-out no longer reads the webhooks
      // stamp inside the outcome's transaction while a read vouches for it (validated-cache.ts); 7 → 6: the
      // events are stored in the daily counts' statement. Stamp reads are not counted (a lease's, timed).
      // PostgreSQL webhooks 4 → 5: a batch that writes a webhook's health (this one: a fresh worker's first
      // success) locks the webhook before its deliveries, the order a webhook's delete takes them in (they
      // deadlocked); a batch with no health write, the common case, is unchanged. PostgreSQL SMTP 6 → 5: a
      // batch whose leases all held, suppressing nobody and going to no webhook, writes its recipients,
      // emails, events and counts in one statement between BEGIN and COMMIT, where it took two.
      const postgres = engine === 'postgres';
      const smtpBound = postgres ? 5 : 10;
      const webhookBound = 5;
      assert.ok(deliveredAlone.core <= smtpBound, `${deliveredAlone.core} statements per SMTP outcome`);
      assert.ok(webhooksAlone.core <= webhookBound, `${webhooksAlone.core} statements per webhook outcome`);
      // The API logs of all these requests: written in batches of their own (a read of the logs writes what is
      // still buffered), never a statement inside a send's transaction. Only SQLite can tell: its one
      // connection runs a transaction or a batch, never both at once, where PostgreSQL's pool runs them side
      // by side and the flag above is one for every connection.
      assert.equal((await api.request('GET', '/v1/logs?limit=1')).status, 200);
      assert.ok(counter.logWrites.alone >= 1, JSON.stringify(counter.logWrites));
      if (!postgres) assert.equal(counter.logWrites.inTransaction, 0);
      t.diagnostic(`API log batches: ${counter.logWrites.alone + counter.logWrites.inTransaction}`);
      if (process.env.STATEMENTS_VERBOSE) {
        t.diagnostic(
          `one accepted email:\n${accepted.sql.slice(0, accepted.sql.length / EMAILS).join('\n')}`,
        );
        t.diagnostic(`keyed:\n${acceptedKeyed.sql.join('\n')}`);
        t.diagnostic(`SMTP, alone:\n${deliveredAlone.sql.join('\n')}`);
        t.diagnostic(`webhooks, alone:\n${webhooksAlone.sql.join('\n')}`);
      }
    });
  });
}
