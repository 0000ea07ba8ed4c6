import assert from 'node:assert/strict';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { buildApp } from '../src/app.ts';
import { systemClock } from '../src/lib/clock.ts';
import { createProjectRepo } from '../src/modules/projects/projects.repo.ts';
import { createProjectService } from '../src/modules/projects/projects.service.ts';
import { SQLITE_FILE } from '../src/boot/database.ts';
import { createTestServices, ALL_ENGINES, engineSkip, TEST_ENCRYPTION_KEY } from './helpers/app.ts';
import {
  createProcessDatabase,
  type ProcessDatabase,
  type ServerProcess,
  startWorkerProcess,
} from './helpers/process.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// The sending queue across crashes, with the production wiring: `postwire worker` processes, SIGKILLed.
// No deadlines of their own: each wait ends on what the worker does (a message arriving, a row changing),
// and the test's timeout bounds a hang.

const EMAILS = 500;
const KILL_AFTER = 120;
const TEST_TIMEOUT_MS = 120_000;

/** `postwire worker` against `env`'s database and SMTP server, with the crash tests' settings. */
function startSendingWorker(env: Record<string, string>): Promise<ServerProcess> {
  return startWorkerProcess({
    ...env,
    POSTWIRE_ENCRYPTION_KEY: TEST_ENCRYPTION_KEY.toString('hex'),
    // The lease stays at its default length (2 × SEND_TIMEOUT + 2 s = 4 min, longer than the test may
    // run): a killed worker's recipients can only come back through its stopped heartbeat.
    WORKER_DEAD_AFTER: '1500ms',
    SEND_RETRY_SCHEDULE: '0,200ms,200ms,200ms,200ms',
  });
}

async function kill(worker: ServerProcess): Promise<void> {
  worker.kill();
  await worker.exited;
}

/** Accepts emails through the real API (in this process), each stored before its 202; returns their ids. */
async function acceptEmails(db: ProcessDatabase, recipients: string[]): Promise<string[]> {
  const services = createTestServices(db.database.handle, { sendDailyLimit: 0 });
  const app = await buildApp(services);
  try {
    const projects = createProjectService({
      db: db.database.handle.db,
      repo: createProjectRepo(db.database.handle.db),
      clock: systemClock,
    });
    const project = await projects.createProject('Crash test');
    const { plaintext: key } = await projects.createKey(project.id, { name: 'crash' });
    const ids: string[] = [];
    for (let start = 0; start < recipients.length; start += 100) {
      const response = await app.inject({
        method: 'POST',
        url: '/v1/emails/batch',
        headers: { authorization: `Bearer ${key}` },
        payload: recipients.slice(start, start + 100).map((to, i) => ({
          from: 'Crash <crash@example.com>',
          to,
          subject: `Message ${start + i}`,
          text: 'Sent at least once.',
        })),
      });
      assert.equal(response.statusCode, 202, response.body);
      ids.push(...response.json().data.map((item: { id: string }) => item.id));
    }
    return ids;
  } finally {
    await app.close();
    await services.close();
  }
}

async function recipientCounts(db: ProcessDatabase): Promise<Record<string, number>> {
  const rows = await db.database.handle.db
    .selectFrom('email_recipients')
    .select((eb) => ['status', eb.fn.countAll<number | string>().as('count')])
    .groupBy('status')
    .execute();
  return Object.fromEntries(rows.map((row) => [row.status, Number(row.count)]));
}

/**
 * Holds the lock a worker needs to record an attempt: on PostgreSQL the recipient rows (`FOR UPDATE`), on
 * SQLite the database's write lock, each from a connection of its own.
 */
async function lockRecipients(engine: string, db: ProcessDatabase): Promise<() => Promise<void>> {
  if (engine === 'postgres') {
    const client = new pg.Client({ connectionString: db.env.DATABASE_URL });
    await client.connect();
    await client.query('BEGIN');
    await client.query('SELECT id FROM email_recipients FOR UPDATE');
    return async () => {
      await client.query('ROLLBACK');
      await client.end();
    };
  }
  const sqlite = new DatabaseSync(path.join(db.dataDir, SQLITE_FILE));
  sqlite.exec('BEGIN IMMEDIATE');
  return async () => {
    sqlite.exec('ROLLBACK');
    sqlite.close();
  };
}

/** PostgreSQL: true once some connection waits for a lock while updating email_recipients. */
async function recordIsBlocked(db: ProcessDatabase): Promise<boolean> {
  const client = new pg.Client({ connectionString: db.env.DATABASE_URL });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%UPDATE email_recipients SET status%'`,
    );
    return rows.length > 0;
  } finally {
    await client.end();
  }
}

for (const engine of ALL_ENGINES) {
  describe(`sending survives a killed worker (${engine})`, { skip: engineSkip(engine) }, () => {
    let db: ProcessDatabase;
    let smtp: TestSmtpServer;
    const children: ServerProcess[] = [];
    before(async () => {
      db = await createProcessDatabase(engine);
      // A little slower than instant, so the kill lands with transactions in flight.
      smtp = await startSmtpServer({ dataDelayMs: 5 });
    });
    after(async () => {
      for (const child of children) child.kill();
      await Promise.all(children.map((child) => child.exited));
      await smtp.close();
      await db.cleanup();
    });

    test(
      `${EMAILS} accepted emails all reach the SMTP server across a SIGKILL, with stable Message-IDs`,
      { timeout: TEST_TIMEOUT_MS },
      async () => {
        const ids = await acceptEmails(
          db,
          Array.from({ length: EMAILS }, (_, i) => `user${i}@example.org`),
        );
        assert.equal(ids.length, EMAILS);
        const stored = await db.database.handle.db.selectFrom('emails').select('message_id').execute();
        const expected = new Set(stored.map((row) => row.message_id));
        assert.equal(expected.size, EMAILS);

        const env = { ...db.env, SMTP_URL: `smtp://127.0.0.1:${smtp.port}`, SEND_CONCURRENCY: '8' };
        const first = await startSendingWorker(env);
        children.push(first);
        await smtp.waitFor(KILL_AFTER, Infinity);
        await kill(first);
        const atKill = smtp.messages.length;
        assert.ok(atKill < EMAILS, `the worker finished (${atKill}) before it was killed`);

        const second = await startSendingWorker(env);
        children.push(second);
        // Every stored email arrives, each under the Message-ID made when it was accepted…
        await smtp.waitFor(EMAILS, Infinity);
        await until(
          () => smtp.uniqueMessageIds().size === EMAILS,
          Infinity,
          'every Message-ID at the server',
        );
        assert.deepEqual([...smtp.uniqueMessageIds()].sort(), [...expected].sort());
        // …and the database agrees once the second worker has recorded them, each with one email.sent.
        await until(
          async () => (await recipientCounts(db)).sent === EMAILS,
          Infinity,
          'every recipient sent',
        );
        const sentEvents = await db.database.handle.db
          .selectFrom('events')
          .select((eb) => eb.fn.countAll<number | string>().as('count'))
          .where('type', '=', 'email.sent')
          .executeTakeFirstOrThrow();
        assert.equal(Number(sentEvents.count), EMAILS, 'one email.sent per email, duplicates or not');
        const duplicates = smtp.messages.length - EMAILS;
        // Sent again: the attempts in flight and those whose outcome was not written yet, 8 of each at most.
        assert.ok(duplicates <= 16, `${duplicates} duplicates (at most 2 × SEND_CONCURRENCY)`);
        process.stdout.write(
          `# ${engine}: killed after ${atKill} messages; ${smtp.messages.length} received for ${EMAILS} emails\n`,
        );
      },
    );
  });

  describe(
    `a worker killed between the SMTP answer and its event (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      test(
        'the recipient is sent again with the same Message-ID, and its event is emitted once',
        { timeout: TEST_TIMEOUT_MS },
        async (t) => {
          const db = await createProcessDatabase(engine);
          t.after(() => db.cleanup());
          const smtp = await startSmtpServer();
          t.after(() => smtp.close());
          const [emailId] = await acceptEmails(db, ['ada@example.org']);

          // The server has the message; before it answers 250, the test takes the lock the worker needs to
          // record the attempt, so the 250 reaches a worker that cannot write its outcome or event.
          let release: (() => Promise<void>) | undefined;
          let answered!: () => void;
          const answeredPromise = new Promise<void>((resolve) => (answered = resolve));
          smtp.beforeAccept(async () => {
            release = await lockRecipients(engine, db);
            setImmediate(answered);
          });
          const env = { ...db.env, SMTP_URL: `smtp://127.0.0.1:${smtp.port}` };
          const first = await startSendingWorker(env);
          t.after(() => first.kill());
          await answeredPromise;
          // PostgreSQL shows the worker's outcome write waiting for the lock: the kill lands exactly there.
          // SQLite shows nothing of a waiting writer; the kill lands after the 250 was written to the socket,
          // the message delivered and no outcome recorded, which is what the worker must recover from.
          if (engine === 'postgres')
            await until(() => recordIsBlocked(db), Infinity, 'the outcome write to wait');
          await kill(first);
          smtp.beforeAccept(undefined);
          await release!();

          const events = () =>
            db.database.handle.db
              .selectFrom('events')
              .select(['id', 'type'])
              .where('email_id', '=', emailId!)
              .execute();
          assert.deepEqual(await events(), [], 'no event was recorded before the kill');
          assert.deepEqual(await recipientCounts(db), { queued: 1 });

          const second = await startSendingWorker(env);
          t.after(() => second.kill());
          await until(
            async () => (await recipientCounts(db)).sent === 1,
            Infinity,
            'the recipient to be sent',
          );
          assert.equal(smtp.messages.length, 2, 'sent again after the crash: at least once');
          assert.equal(smtp.messages[0]!.messageId, smtp.messages[1]!.messageId, 'under the same Message-ID');
          const recorded = await events();
          assert.deepEqual(
            recorded.map((event) => event.type),
            ['email.sent'],
            'one event, however many times it was sent',
          );
        },
      );
    },
  );
}
