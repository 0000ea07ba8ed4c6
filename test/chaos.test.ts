import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { engineSkip } from './helpers/app.ts';
import {
  createProcessDatabase,
  type ProcessDatabase,
  type ServerProcess,
  startOnFreePort,
  startServerProcess,
  startWorkerProcess,
} from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';

// API and worker processes SIGKILLed repeatedly under load on PostgreSQL, while clients retry every
// unanswered request with its Idempotency-Key: every key maps to exactly one email, no email and no event
// is lost, and duplicate deliveries carry the same webhook-id. Bounded: 120 emails, 6 kills.

const EMAILS = 120;
const CLIENTS = 8;
const KILLS = 6;
const KEY = 'pw_chaos_test_key_0123456789abcdef';
const ENCRYPTION_KEY = 'cd'.repeat(32);

/** A client's pause before it sends an unanswered request again, as a client would (not a wait of the test's). */
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

{
  describe('chaos: processes killed under load (postgres)', { skip: engineSkip('postgres') }, () => {
    let db: ProcessDatabase;
    let receiver: Receiver;
    let sql: pg.Client;
    const running: ServerProcess[] = [];
    /** Set when the suite ends: the clients stop retrying, so a failed test ends instead of hanging. */
    let finished = false;
    before(async () => {
      db = await createProcessDatabase('postgres');
      receiver = await startReceiver({ fallback: { status: 200, delayMs: 2 } });
      sql = new pg.Client({ connectionString: db.env.DATABASE_URL });
      await sql.connect();
    });
    after(async () => {
      finished = true;
      for (const process of running) process.kill();
      await Promise.all(running.map((process) => process.exited));
      await sql.end();
      await receiver.close();
      await db.cleanup();
    });

    test(
      'every key one email, every email its events, duplicates share webhook-id',
      { timeout: 120_000 },
      async () => {
        // The port is chosen here: each API process after a kill takes the same one, the clients' URL.
        let url = '';
        let env: Record<string, string> = {};
        let api = await startOnFreePort((port) => {
          url = `http://127.0.0.1:${port}`;
          env = {
            ...db.env,
            PORT: String(port),
            POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY,
            POSTWIRE_BOOTSTRAP_KEY: KEY,
            POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
            POSTWIRE_RATE_LIMIT: '0',
            MAIL_TRANSPORT: 'capture',
            WORKER_DEAD_AFTER: '1500ms',
          };
          return startServerProcess(env, ['src/cli.ts', 'serve', '--no-worker']);
        });
        running.push(api);
        let worker = await startWorkerProcess(env);
        running.push(worker);

        const call = (path: string, body: unknown, idempotencyKey?: string) =>
          fetch(`${url}${path}`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${KEY}`,
              'content-type': 'application/json',
              ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}),
            },
            body: JSON.stringify(body),
          });
        const hook = await call('/v1/webhooks', {
          url: receiver.url,
          events: ['email.sent', 'email.delivered'],
          secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
        });
        assert.equal(hook.status, 201);

        // Clients: each email is retried with its key until it is answered 202 (a killed API answers nothing).
        const answers = new Map<string, string>();
        let retries = 0;
        const sendOne = async (index: number) => {
          const key = `order-${index}`;
          while (!finished) {
            const response = await call(
              '/v1/emails',
              {
                from: 'shop@example.com',
                to: `user${index}@example.org`,
                subject: `Order ${index}`,
                text: 'Hi',
              },
              key,
            ).catch(() => undefined);
            if (response?.status === 202) {
              answers.set(key, ((await response.json()) as { id: string }).id);
              return;
            }
            retries += 1;
            await pause(20);
          }
        };
        let next = 0;
        const clients = Array.from({ length: CLIENTS }, async () => {
          while (next < EMAILS) await sendOne(next++);
        });

        // The killer: waits for progress (answers, or mail recorded sent), then kills the API or the worker.
        const sentCount = async () =>
          Number(
            (await sql.query(`SELECT count(*) FROM email_recipients WHERE status = 'delivered'`)).rows[0]
              .count,
          );
        for (let kill = 0; kill < KILLS; kill += 1) {
          const before = answers.size + (await sentCount());
          await until(
            async () => {
              const sent = await sentCount();
              return (
                answers.size + sent >= before + EMAILS / KILLS / 2 ||
                (answers.size === EMAILS && sent === EMAILS)
              );
            },
            Infinity,
            `progress before kill ${kill + 1}`,
          );
          if (kill % 2 === 0) {
            api.kill();
            await api.exited;
            api = await startServerProcess(env, ['src/cli.ts', 'serve', '--no-worker']);
            running.push(api);
          } else {
            worker.kill();
            await worker.exited;
            worker = await startWorkerProcess(env);
            running.push(worker);
          }
        }
        await Promise.all(clients);

        // Every key answered with one email, and the database holds exactly those.
        assert.equal(answers.size, EMAILS);
        const ids = [...answers.values()];
        assert.equal(new Set(ids).size, EMAILS, 'each key its own email');
        const stored = (await sql.query('SELECT id FROM emails')).rows.map((row) => row.id as string);
        assert.deepEqual(stored.sort(), [...ids].sort(), 'no email created twice, none lost');

        // Every email delivered (capture), each with one email.sent and one email.delivered event…
        await until(async () => (await sentCount()) >= EMAILS, Infinity, 'every email delivered');
        const events = (
          await sql.query(
            `SELECT id, type, email_id FROM events WHERE type IN ('email.sent', 'email.delivered')`,
          )
        ).rows as Array<{ id: string; type: string; email_id: string }>;
        for (const type of ['email.sent', 'email.delivered']) {
          const of = events.filter((event) => event.type === type).map((event) => event.email_id);
          assert.deepEqual(of.sort(), [...ids].sort(), `one ${type} per email`);
        }
        // …and every event reached the webhook, a duplicate only ever under the same webhook-id and body.
        const eventIds = new Set(events.map((event) => event.id));
        await until(
          () =>
            new Set(receiver.requests.map((request) => request.headers['webhook-id'])).size >= eventIds.size,
          Infinity,
          'every event at the webhook',
        );
        const bodies = new Map<string, string>();
        for (const request of receiver.requests) {
          const id = String(request.headers['webhook-id']);
          assert.ok(eventIds.has(id), `an event the database does not hold: ${id}`);
          const body = JSON.parse(request.body) as { id: string };
          assert.equal(body.id, id);
          if (bodies.has(id)) assert.equal(request.body, bodies.get(id), 'a duplicate is the same delivery');
          bodies.set(id, request.body);
        }
        process.stdout.write(
          `# chaos: ${KILLS} kills, ${retries} client retries, ${receiver.requests.length} deliveries for ${eventIds.size} events\n`,
        );
      },
    );
  });
}
