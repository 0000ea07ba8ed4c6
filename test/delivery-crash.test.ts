import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { ALL_ENGINES, engineSkip, startTestApp, TEST_ENCRYPTION_KEY, type TestApp } from './helpers/app.ts';
import { attemptsIn } from './helpers/deliveries.ts';
import { childEnv, REPO_ROOT } from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';

const EVENTS = 1000;
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

/** `postwire worker` in a child process, as an operator runs it. */
function spawnWorker(env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, ['src/cli.ts', 'worker'], {
    cwd: REPO_ROOT,
    env: childEnv({
      ...env,
      POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
      POSTWIRE_ENCRYPTION_KEY: TEST_ENCRYPTION_KEY.toString('hex'),
      // A lease (2 × timeout + 5 s = 125 s) longer than the test waits: a killed worker's claims can only
      // come back through its stopped heartbeat.
      WEBHOOK_TIMEOUT_MS: '60000',
      WORKER_DEAD_AFTER: '1500ms',
      WEBHOOK_CONCURRENCY_PER_ENDPOINT: '8',
      LOG_LEVEL: 'warn',
    }),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  child.on('exit', (code, signal) => {
    if (code !== 0 && signal !== 'SIGKILL' && signal !== 'SIGTERM') {
      process.stderr.write(`worker exited ${code}: ${stderr}\n`);
    }
  });
  return child;
}

async function stopWorker(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  return exited;
}

async function emitEvents(api: TestApp, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < count; start += 50) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(50, count - start) }, (_, offset) =>
        api.app.events.emit(api.projectId, 'email.delivered', { email_id: `msg_${start + offset}` }),
      ),
    );
    ids.push(...batch.map((event) => event.id));
  }
  return ids;
}

/** Every request's webhook-id is the event id in its body, and its signature verifies. */
function checkRequests(receiver: Receiver): Map<string, number> {
  const verifier = new Webhook(SECRET.slice('whsec_'.length));
  const counts = new Map<string, number>();
  for (const request of receiver.requests) {
    const id = String(request.headers['webhook-id']);
    const payload = verifier.verify(request.body, {
      'webhook-id': id,
      'webhook-timestamp': String(request.headers['webhook-timestamp']),
      'webhook-signature': String(request.headers['webhook-signature']),
    }) as { id: string };
    assert.equal(payload.id, id, 'a duplicate carries the same webhook-id as the first');
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

for (const engine of ALL_ENGINES) {
  describe(`delivery across crashes and processes (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let receiver: Receiver;
    let dataDir: string;
    let env: Record<string, string>;
    const children: ChildProcess[] = [];

    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true });
      dataDir = api.database.env.POSTWIRE_DATA_DIR ?? mkdtempSync(path.join(tmpdir(), 'postwire-crash-'));
      env = { ...api.database.env, POSTWIRE_DATA_DIR: dataDir };
    });
    after(async () => {
      for (const child of children) child.kill('SIGKILL');
      await receiver?.close();
      await api.close();
      if (!api.database.env.POSTWIRE_DATA_DIR) rmSync(dataDir, { recursive: true, force: true });
    });

    async function webhookTo(url: string): Promise<void> {
      const response = await api.request('POST', '/v1/webhooks', {
        body: { url, events: ['email.delivered'], secret: SECRET },
      });
      assert.equal(response.status, 201);
    }

    test(`${EVENTS} events, the worker SIGKILLed mid-run and restarted: every event arrives`, async () => {
      // Slow enough answers that the kill lands while deliveries are in flight.
      receiver = await startReceiver({ fallback: { status: 200, delayMs: 5 } });
      await webhookTo(receiver.url);
      const eventIds = await emitEvents(api, EVENTS);

      const first = spawnWorker(env);
      children.push(first);
      await until(() => receiver.requests.length >= EVENTS / 4, 30_000, 'a quarter of the deliveries');
      first.kill('SIGKILL');
      await new Promise((resolve) => first.on('exit', resolve));
      const atKill = receiver.requests.length;
      assert.ok(atKill < EVENTS, `the worker was killed mid-run (${atKill} received)`);

      const second = spawnWorker(env);
      children.push(second);
      // The deliveries in flight at the kill were maybe received but not recorded: the restarted worker
      // sends them again once the dead worker's lease runs out. Wait for the database to say all succeeded.
      const unfinished = async () => {
        const row = await api.database.handle.db
          .selectFrom('deliveries')
          .select(({ fn }) => fn.countAll<number | string>().as('count'))
          .where('status', '!=', 'succeeded')
          .executeTakeFirstOrThrow();
        return Number(row.count);
      };
      await until(
        async () => (await unfinished()) === 0,
        60_000,
        'every delivery to succeed after the restart',
      );
      assert.equal(await stopWorker(second), 0, 'SIGTERM stops the worker cleanly');

      const counts = checkRequests(receiver);
      assert.deepEqual([...counts.keys()].sort(), [...eventIds].sort(), 'every event received at least once');
      // Sent again: at most the attempts whose outcomes were not written yet at the kill (the worker starts
      // no attempt past 2 × its concurrency of unwritten ones) and those in flight.
      const duplicates = receiver.requests.length - counts.size;
      assert.ok(
        duplicates <= 2 * 64 + 4,
        `duplicates only from unrecorded attempts at the kill (${duplicates})`,
      );
    });

    if (engine === 'postgres') {
      test(`two workers, no crash: each of ${EVENTS} events is received exactly once`, async () => {
        await receiver.close();
        receiver = await startReceiver({ fallback: { status: 200, delayMs: 2 } });
        await api.database.handle.db.deleteFrom('webhooks').execute();
        await webhookTo(receiver.url);
        const workers = [spawnWorker(env), spawnWorker(env)];
        children.push(...workers);
        // Emitted while both workers run, so NOTIFY wakes them as events commit.
        const eventIds = await emitEvents(api, EVENTS);
        await until(() => receiver.requests.length >= EVENTS, 60_000, 'every event');
        // Count once neither worker can send any more: a SIGTERMed worker finishes the attempts it has in
        // flight (its grace outlasts the receiver's answers), writes their outcomes and exits. A double
        // delivery from either shows up by then, however late.
        for (const code of await Promise.all(workers.map(stopWorker))) assert.equal(code, 0);
        const counts = checkRequests(receiver);
        assert.equal(receiver.requests.length, EVENTS, 'no event was delivered twice');
        assert.deepEqual([...counts.keys()].sort(), [...eventIds].sort());
        assert.equal((await attemptsIn(api.database.handle)).length, EVENTS, 'one attempt per delivery');
      });
    }
  });
}
