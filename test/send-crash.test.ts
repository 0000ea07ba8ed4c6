import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { buildApp } from '../src/app.ts';
import { systemClock } from '../src/lib/clock.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createProjectRepo } from '../src/modules/projects/projects.repo.ts';
import { createProjectService } from '../src/modules/projects/projects.service.ts';
import { ENGINES, TEST_ENCRYPTION_KEY } from './helpers/app.ts';
import { childEnv, createProcessDatabase, type ProcessDatabase, REPO_ROOT } from './helpers/process.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';

const EMAILS = 500;
const KILL_AFTER = 120;

interface WorkerProcess {
  child: ChildProcess;
  output(): string;
}

/** Starts test/helpers/send-worker.ts and resolves once it says `ready`. */
async function startWorkerProcess(env: Record<string, string>): Promise<WorkerProcess> {
  const child = spawn(process.execPath, ['test/helpers/send-worker.ts'], {
    cwd: REPO_ROOT,
    env: childEnv(env),
  });
  let output = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker did not start:\n${output}`)), 15_000);
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
      if (output.includes('ready')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`worker exited (${code}) before it was ready:\n${output}`));
    });
  });
  return { child, output: () => output };
}

const exited = (child: ChildProcess) =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => child.once('exit', () => resolve()));

for (const engine of ENGINES) {
  describe(`sending survives a killed worker (${engine})`, () => {
    let db: ProcessDatabase;
    let smtp: TestSmtpServer;
    const children: ChildProcess[] = [];
    before(async () => {
      db = await createProcessDatabase(engine);
      // A little slower than instant, so the kill lands with transactions in flight.
      smtp = await startSmtpServer({ dataDelayMs: 5 });
    });
    after(async () => {
      for (const child of children) child.kill('SIGKILL');
      await Promise.all(children.map(exited));
      await smtp.close();
      await db.cleanup();
    });

    test(`${EMAILS} accepted emails all reach the SMTP server across a SIGKILL, with stable Message-IDs`, async () => {
      // The API in this process accepts everything first: stored before each 202.
      const app = await buildApp({
        database: db.database.handle,
        clock: systemClock,
        secretBox: createSecretBox(TEST_ENCRYPTION_KEY),
        resolver: async () => [],
        allowPrivateUrls: false,
        rateLimit: { limit: 0, windowMs: 60_000 },
        sendDailyLimit: 0,
      });
      const projects = createProjectService({
        repo: createProjectRepo(db.database.handle.db),
        clock: systemClock,
      });
      const project = await projects.createProject('Crash test');
      const { plaintext: key } = await projects.createKey(project.id, 'crash');
      const ids: string[] = [];
      for (let batch = 0; batch < EMAILS / 100; batch += 1) {
        const response = await app.inject({
          method: 'POST',
          url: '/v1/emails/batch',
          headers: { authorization: `Bearer ${key}` },
          payload: Array.from({ length: 100 }, (_, i) => ({
            from: 'Crash <crash@example.com>',
            to: `user${batch * 100 + i}@example.org`,
            subject: `Message ${batch * 100 + i}`,
            text: 'Sent at least once.',
          })),
        });
        assert.equal(response.statusCode, 202, response.body);
        ids.push(...response.json().data.map((item: { id: string }) => item.id));
      }
      await app.close();
      assert.equal(ids.length, EMAILS);
      const stored = await db.database.handle.db.selectFrom('emails').select(['id', 'message_id']).execute();
      const expected = new Set(stored.map((row) => row.message_id));
      assert.equal(expected.size, EMAILS);

      const env = {
        ...db.env,
        SMTP_URL: `smtp://127.0.0.1:${smtp.port}`,
        SEND_CONCURRENCY: '8',
        // A short attempt limit makes a short lease (2 × 1 s + 2 s), so the restarted worker takes over soon.
        SEND_TIMEOUT: '1s',
        SEND_RETRY_SCHEDULE: '0,200ms,200ms,200ms,200ms',
      };
      const first = await startWorkerProcess(env);
      children.push(first.child);
      await smtp.waitFor(KILL_AFTER, 20_000);
      first.child.kill('SIGKILL');
      await exited(first.child);
      const atKill = smtp.messages.length;
      assert.ok(atKill < EMAILS, `the worker finished (${atKill}) before it was killed`);

      const second = await startWorkerProcess(env);
      children.push(second.child);
      const deadline = Date.now() + 30_000;
      while (smtp.uniqueMessageIds().size < EMAILS) {
        assert.ok(
          Date.now() < deadline,
          `only ${smtp.uniqueMessageIds().size} of ${EMAILS} arrived:\n${second.output()}`,
        );
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      // Every stored email arrived, each under the Message-ID made when it was accepted.
      assert.deepEqual([...smtp.uniqueMessageIds()].sort(), [...expected].sort());
      // And the database agrees once the second worker has recorded them.
      const deadlineDb = Date.now() + 10_000;
      for (;;) {
        const rows = await db.database.handle.db
          .selectFrom('email_recipients')
          .select((eb) => ['status', eb.fn.countAll<number | string>().as('count')])
          .groupBy('status')
          .execute();
        const counts = Object.fromEntries(rows.map((row) => [row.status, Number(row.count)]));
        if (counts.sent === EMAILS) break;
        assert.ok(Date.now() < deadlineDb, JSON.stringify(counts));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const duplicates = smtp.messages.length - EMAILS;
      assert.ok(
        duplicates >= 0 && duplicates <= 8,
        `${duplicates} duplicates (at most the attempts in flight)`,
      );

      process.stdout.write(
        `# ${engine}: killed after ${atKill} messages; ${smtp.messages.length} received for ${EMAILS} emails (${duplicates} duplicates)\n`,
      );
    });
  });
}
