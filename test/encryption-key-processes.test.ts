import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import {
  createProcessDatabase,
  requestJson,
  runCli,
  startServerProcess,
  startWorkerProcess,
} from './helpers/process.ts';
import { startReceiver } from './helpers/receiver.ts';

const API_KEY = 'pw_key_check_processes_0123456789';
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const WRONG_KEY = 'cd'.repeat(32);

/** `postwire serve --no-worker`: the API alone, as an operator runs it beside separate workers. */
const startApiProcess = (env: Record<string, string>) =>
  startServerProcess(env, ['src/cli.ts', 'serve', '--no-worker']);

/** Runs `postwire worker` expecting it to refuse; its whole stderr must be one line that names the setting. */
async function refusedWorker(env: Record<string, string>): Promise<string> {
  const result = await runCli(['worker'], { ...env, LOG_LEVEL: 'info' });
  assert.equal(result.code, 1, result.stdout);
  const lines = result.stderr.split('\n').filter((line) => line !== '');
  assert.equal(lines.length, 1, result.stderr);
  assert.match(lines[0]!, /set POSTWIRE_ENCRYPTION_KEY to the key/);
  return lines[0]!;
}

for (const engine of ALL_ENGINES) {
  describe(`one encryption key for one database (${engine})`, { skip: engineSkip(engine) }, () => {
    test('a worker whose key does not open the database refuses to start; with the same key it signs what the API stored', async (t) => {
      const own = await createProcessDatabase(engine);
      const receiver = await startReceiver();
      t.after(async () => {
        await receiver.close();
        await own.cleanup();
      });
      // No POSTWIRE_ENCRYPTION_KEY: the API generates its key file on the first start, as the operator's did.
      const apiEnv = { ...own.env, POSTWIRE_BOOTSTRAP_KEY: API_KEY, POSTWIRE_ALLOW_PRIVATE_URLS: 'true' };
      const api = await startApiProcess(apiEnv);
      t.after(() => api.kill());
      const keyFile = path.join(own.dataDir, 'encryption.key');
      const apiKey = readFileSync(keyFile, 'utf8').trim();

      // Nothing is sealed yet but what the first start recorded: the workers below start before any webhook
      // secret exists, as in the issue, where the worker's own key went unnoticed until deliveries failed.

      // A worker given another key.
      const wrong = await refusedWorker({ ...own.env, POSTWIRE_ENCRYPTION_KEY: WRONG_KEY });
      assert.match(wrong, /the encryption key \(POSTWIRE_ENCRYPTION_KEY\) is not the one/);

      if (engine === 'postgres') {
        // A worker on another machine, with a data directory of its own and no key: it would generate one.
        const elsewhere = mkdtempSync(path.join(tmpdir(), 'postwire-worker-data-'));
        t.after(() => rmSync(elsewhere, { recursive: true, force: true }));
        const keyless = await refusedWorker({ ...own.env, POSTWIRE_DATA_DIR: elsewhere });
        assert.match(keyless, /this process has none/);
        assert.equal(existsSync(path.join(elsewhere, 'encryption.key')), false, 'no key was generated');
      }

      const created = await requestJson(`${api.url}/v1/webhooks`, API_KEY, 'POST', {
        url: `${receiver.url}/hook`,
        events: ['email.sent'],
        secret: SECRET,
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));

      // With the API's key (its file's contents, or on SQLite the same data directory) the worker runs and
      // signs the delivery with the secret the API sealed.
      const worker = await startWorkerProcess({
        ...own.env,
        ...(engine === 'postgres' ? { POSTWIRE_ENCRYPTION_KEY: apiKey } : {}),
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
      });
      t.after(() => worker.kill());
      const sent = await requestJson(`${api.url}/v1/emails`, API_KEY, 'POST', {
        from: 'shop@example.com',
        to: 'ada@example.org',
        subject: 'Hi',
        text: 'Signed on the other side.',
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const [delivery] = await receiver.waitFor(1, 20_000);
      const payload = new Webhook(SECRET).verify(delivery!.body, {
        'webhook-id': String(delivery!.headers['webhook-id']),
        'webhook-timestamp': String(delivery!.headers['webhook-timestamp']),
        'webhook-signature': String(delivery!.headers['webhook-signature']),
      }) as { type: string };
      assert.equal(payload.type, 'email.sent');
      assert.equal(await worker.stop(), 0);
      assert.equal(await api.stop(), 0);
    });

    test('two first starts at once, each with its own key: one records its key, the other refuses', async (t) => {
      const own = await createProcessDatabase(engine);
      t.after(() => own.cleanup());
      const start = (key: string) => startServerProcess({ ...own.env, POSTWIRE_ENCRYPTION_KEY: key });
      const outcomes = await Promise.allSettled([start('ab'.repeat(32)), start(WRONG_KEY)]);
      t.after(() => {
        for (const outcome of outcomes) if (outcome.status === 'fulfilled') outcome.value.kill();
      });
      // A refused start rejects with the process's output, its one line on stderr included.
      const refusals = outcomes.flatMap((outcome) => (outcome.status === 'rejected' ? [outcome.reason] : []));
      assert.equal(refusals.length, 1, String(refusals));
      assert.match(
        String(refusals[0]),
        /stderr:\nPostwire could not start: the encryption key \(POSTWIRE_ENCRYPTION_KEY\) is not the one this database's secrets were sealed with: set POSTWIRE_ENCRYPTION_KEY to the key the database was first started with \(the other processes' key\)\.\n$/,
      );
    });

    test('a process that would generate a key for a database with sealed data refuses, and generates none', async (t) => {
      const own = await createProcessDatabase(engine);
      t.after(() => own.cleanup());
      const env = { ...own.env, POSTWIRE_BOOTSTRAP_KEY: API_KEY };
      const first = await startServerProcess(env);
      t.after(() => first.kill());
      assert.equal(await first.stop(), 0);

      // The key file is lost (a new volume, a restore without it): nothing is sealed yet but the canary.
      const keyFile = path.join(own.dataDir, 'encryption.key');
      renameSync(keyFile, `${keyFile}.lost`);
      const serve = await runCli(['serve'], env);
      assert.equal(serve.code, 1);
      assert.equal(
        serve.stderr,
        `postwire: this database holds values sealed with an encryption key, and this process has none ` +
          `(POSTWIRE_ENCRYPTION_KEY is unset and there is no ${keyFile}): set POSTWIRE_ENCRYPTION_KEY to the ` +
          'key the other processes on this database use.\n',
      );
      assert.doesNotMatch(serve.stdout, /shown once/);
      await refusedWorker(env);
      assert.equal(existsSync(keyFile), false, 'no key was generated');

      // The key back, in the environment this time: it opens the database.
      const key = readFileSync(`${keyFile}.lost`, 'utf8').trim();
      const again = await startServerProcess({ ...env, POSTWIRE_ENCRYPTION_KEY: key });
      t.after(() => again.kill());
      assert.equal(await again.stop(), 0);
    });
  });
}
