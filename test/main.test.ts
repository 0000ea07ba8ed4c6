import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import { type AddressInfo, connect, createServer } from 'node:net';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { reservePort } from '../src/boot/ports.ts';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { runCliInProcess } from './helpers/cli-in-process.ts';
import {
  createProcessDatabase,
  type ProcessDatabase,
  runFailingServer,
  startOnFreePort,
  startServerProcess,
} from './helpers/process.ts';
import { until } from './helpers/until.ts';

const ENCRYPTION_KEY = 'ab'.repeat(32);
const KEY_IN_BOX = /Your API key \(shown once\): (pw_[A-Za-z0-9_-]+)/g;

async function get(url: string, key?: string): Promise<{ status: number; headers: Headers; body: any }> {
  const response = await fetch(url, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : undefined };
}

async function post(url: string, key: string, body: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

/** Resolves once nothing accepts connections at `url` any more. */
async function waitUntilRefused(url: string, timeoutMs = 5_000): Promise<void> {
  await until(
    () =>
      fetch(url).then(
        () => false,
        () => true,
      ),
    timeoutMs,
    `${url} to refuse connections`,
  );
}

describe('the HTTP port taken before the start', () => {
  test('a client that connects meanwhile is dropped, and the port is handed on (the start does not hang)', async () => {
    const reserved = await reservePort('127.0.0.1', 0, 'PORT');
    const client = connect(reserved.port, '127.0.0.1');
    await once(client, 'connect');
    const closed = once(client, 'close');
    // Without the drop, release() waits for that connection to end, and the process never listens (the
    // test's timeout, set for every test in package.json, turns that hang into a failure).
    await reserved.release();
    await closed;
    // The port is free again: another server listens on exactly it.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(reserved.port, '127.0.0.1', resolve));
    assert.equal((server.address() as AddressInfo).port, reserved.port);
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
});

describe('main.ts configuration', () => {
  test('a bad PORT exits 1 with a message naming PORT', async () => {
    const result = await runFailingServer({ PORT: 'abc', POSTWIRE_DATA_DIR: '/nonexistent/never-created' });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /PORT/);
    assert.match(result.stderr, /abc/);
    assert.equal(result.stdout, '');
  });
});

for (const engine of ALL_ENGINES) {
  describe(`main.ts on ${engine}`, { skip: engineSkip(engine) }, () => {
    let db: ProcessDatabase;
    before(async () => {
      db = await createProcessDatabase(engine);
    });
    after(async () => {
      await db.cleanup();
    });

    test('first start prints a working key once; the next start does not; PORT is honoured', async (t) => {
      const env = { ...db.env, POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY };
      const first = await startServerProcess(env);
      t.after(() => first.kill());

      const shown = [...first.stdout().matchAll(KEY_IN_BOX)].map((match) => match[1]!);
      assert.equal(shown.length, 1, first.stdout());
      const key = shown[0]!;
      // The key is shown in the box and nowhere else: no log line carries it.
      for (const line of first.logs()) assert.ok(!JSON.stringify(line).includes(key), JSON.stringify(line));

      const health = await get(`${first.url}/healthz`);
      assert.equal(health.status, 200);
      assert.deepEqual(health.body, { status: 'ok' });
      assert.equal((await get(`${first.url}/v1/webhooks`, key)).status, 200);
      assert.equal((await get(`${first.url}/v1/webhooks`)).status, 401);
      assert.equal(await first.stop(), 0);
      assert.ok(!first.stderr().includes(key));

      let port = 0;
      const second = await startOnFreePort((free) => {
        port = free;
        return startServerProcess({ ...env, PORT: String(port) });
      });
      t.after(() => second.kill());
      assert.equal(new URL(second.url).port, String(port));
      assert.doesNotMatch(second.stdout(), /shown once|pw_/);
      assert.equal((await get(`${second.url}/v1/webhooks`, key)).status, 200);
      assert.equal(await second.stop(), 0);
    });

    test('a port in use fails the start before anything is created: no key printed, stored or generated', async (t) => {
      const own = await createProcessDatabase(engine);
      // On SQLite an empty data directory, as on a first start: not even the database file may appear.
      const dataDir = mkdtempSync(path.join(tmpdir(), 'postwire-port-in-use-'));
      const taken = createServer();
      await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
      t.after(async () => {
        await new Promise((resolve) => taken.close(resolve));
        rmSync(dataDir, { recursive: true, force: true });
        await own.cleanup();
      });
      const port = (taken.address() as AddressInfo).port;

      const result = await runFailingServer({
        ...own.env,
        POSTWIRE_DATA_DIR: dataDir,
        PORT: String(port),
      });
      assert.equal(result.code, 1);
      assert.equal(
        result.stderr,
        `Postwire could not start: the HTTP port 127.0.0.1:${port} is in use (EADDRINUSE): set PORT (or HOST) ` +
          'to a free one.\n',
      );
      assert.equal(result.stdout, '', 'no key box, no log line');
      assert.deepEqual(readdirSync(dataDir), [], 'no database file, no encryption key file');
      if (engine === 'postgres') {
        const { db } = own.database.handle;
        assert.deepEqual(await db.selectFrom('projects').select('id').execute(), []);
        assert.deepEqual(await db.selectFrom('api_keys').select('id').execute(), []);
        assert.deepEqual(await db.selectFrom('encryption_canary').select('id').execute(), []);
      }
    });

    test('POSTWIRE_BOOTSTRAP_KEY makes that key exist, once, and never prints it', async (t) => {
      const own = await createProcessDatabase(engine);
      t.after(() => own.cleanup());
      const bootstrapKey = 'pw_bootstrap_for_tests_0123456789';
      const env = {
        ...own.env,
        POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY,
        POSTWIRE_BOOTSTRAP_KEY: bootstrapKey,
      };

      for (let start = 1; start <= 2; start++) {
        const server = await startServerProcess(env);
        t.after(() => server.kill());
        assert.equal((await get(`${server.url}/v1/webhooks`, bootstrapKey)).status, 200, `start ${start}`);
        assert.equal(await server.stop(), 0);
        assert.ok(!server.stdout().includes(bootstrapKey), `start ${start} printed the bootstrap key`);
        assert.ok(!server.stderr().includes(bootstrapKey));
        assert.doesNotMatch(server.stdout(), /shown once/);
      }

      // What the starts stored is read by the CLI in the test's process: the starts are the subject, not it.
      const projects = await runCliInProcess(['projects', 'list', '--json'], env);
      assert.equal(projects.code, 0, projects.stderr);
      const list = JSON.parse(projects.stdout);
      assert.equal(list.length, 1);
      assert.equal(list[0].default, true);
      const keys = await runCliInProcess(['keys', 'list', '--project', list[0].id, '--json'], env);
      assert.equal(keys.code, 0, keys.stderr);
      assert.deepEqual(
        JSON.parse(keys.stdout).map((key: any) => key.name),
        ['bootstrap'],
      );
    });

    test('SIGTERM lets an in-flight request finish, refuses new connections, and exits 0', async (t) => {
      const bootstrapKey = 'pw_sigterm_test_key_0123456789';
      const server = await startServerProcess({
        ...db.env,
        POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY,
        POSTWIRE_BOOTSTRAP_KEY: bootstrapKey,
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        // A request's line at info comes once it is answered; at trace it is logged as it arrives too.
        LOG_LEVEL: 'trace',
      });
      t.after(() => server.kill());

      // A request whose body arrives slowly: the headers are in when SIGTERM comes, the body only after.
      const body = JSON.stringify({ url: 'https://example.com/in-flight', events: ['email.delivered'] });
      const request = http.request(`${server.url}/v1/webhooks`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${bootstrapKey}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      });
      const response = new Promise<{ status: number; body: any }>((resolve, reject) => {
        request.on('error', reject);
        request.on('response', (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
        });
      });
      request.write(body.slice(0, 10));
      await server.waitForLog((line) => line.msg === 'request received' && line.url === '/v1/webhooks');

      server.child.kill('SIGTERM');
      await server.waitForLog((line) => line.signal === 'SIGTERM');
      await waitUntilRefused(`${server.url}/healthz`);

      request.end(body.slice(10));
      const answer = await response;
      assert.equal(answer.status, 201, JSON.stringify(answer.body));
      assert.equal(answer.body.data.url, 'https://example.com/in-flight');
      const { code } = await server.exited;
      assert.equal(code, 0, server.stderr());

      // The request's write really happened before the database closed.
      const row = await db.database.handle.db
        .selectFrom('webhooks')
        .select('id')
        .where('id', '=', answer.body.data.id)
        .executeTakeFirst();
      assert.ok(row);
    });

    test('without POSTWIRE_ENCRYPTION_KEY a 0600 key file is generated once and reused', async (t) => {
      const own = await createProcessDatabase(engine);
      t.after(() => own.cleanup());
      const bootstrapKey = 'pw_encryption_test_key_0123456789';
      const env = { ...own.env, POSTWIRE_BOOTSTRAP_KEY: bootstrapKey, POSTWIRE_ALLOW_PRIVATE_URLS: 'true' };
      const keyFile = path.join(own.dataDir, 'encryption.key');

      const first = await startServerProcess(env);
      t.after(() => first.kill());
      assert.equal(statSync(keyFile).mode & 0o777, 0o600);
      const stored = readFileSync(keyFile, 'utf8');
      assert.match(stored, /^[0-9a-f]{64}\n$/);
      const warning = first.logs().find((line) => line.level === 40 && /same key/.test(line.msg));
      if (engine === 'postgres')
        assert.ok(warning, 'PostgreSQL with a key file warns that processes must share it');
      else assert.equal(warning, undefined);
      assert.ok(!first.stdout().includes(stored.trim()), 'the encryption key is never logged');

      const created = await post(`${first.url}/v1/webhooks`, bootstrapKey, {
        url: 'https://example.com/sealed',
        events: ['email.sent'],
        secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.equal(created.body.data.has_secret, true);
      assert.equal(await first.stop(), 0);

      const second = await startServerProcess(env);
      t.after(() => second.kill());
      assert.equal(readFileSync(keyFile, 'utf8'), stored);
      const fetched = await get(`${second.url}/v1/webhooks/${created.body.data.id}`, bootstrapKey);
      assert.equal(fetched.status, 200);
      assert.equal(fetched.body.data.has_secret, true);
      assert.equal(await second.stop(), 0);

      // A different key cannot open the database: the start fails loudly rather than later, quietly.
      const wrong = await runFailingServer({ ...env, POSTWIRE_ENCRYPTION_KEY: 'cd'.repeat(32) });
      assert.equal(wrong.code, 1);
      assert.equal(
        wrong.stderr,
        "Postwire could not start: the encryption key (POSTWIRE_ENCRYPTION_KEY) is not the one this database's " +
          'secrets were sealed with: set POSTWIRE_ENCRYPTION_KEY to the key the database was first started with ' +
          "(the other processes' key).\n",
      );
      assert.equal(readFileSync(keyFile, 'utf8'), stored);
    });
    if (engine === 'postgres') {
      test(
        'an API killed mid-request commits nothing: the retry with its Idempotency-Key sends once',
        { timeout: 60_000 },
        async (t) => {
          const own = await createProcessDatabase(engine);
          const cleanup: Array<() => unknown> = [];
          t.after(async () => {
            for (const step of cleanup.reverse()) await step();
            await own.cleanup();
          });
          const bootstrapKey = 'pw_idempotency_crash_key_0123456789';
          const env = {
            ...own.env,
            POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY,
            POSTWIRE_BOOTSTRAP_KEY: bootstrapKey,
          };
          const send = (url: string) =>
            fetch(`${url}/v1/emails`, {
              method: 'POST',
              headers: {
                authorization: `Bearer ${bootstrapKey}`,
                'content-type': 'application/json',
                'idempotency-key': 'order-4711',
              },
              body: JSON.stringify({
                from: 'shop@example.com',
                to: 'ada@example.org',
                subject: 'Hi',
                text: 'Once.',
              }),
            });

          // The test holds the emails table, so the request stops inside its work, the key already taken.
          const lock = new pg.Client({ connectionString: own.env.DATABASE_URL });
          await lock.connect();
          cleanup.push(() => lock.end());
          await lock.query('BEGIN');
          await lock.query('LOCK TABLE emails IN EXCLUSIVE MODE');
          const first = await startServerProcess(env);
          cleanup.push(() => first.kill());
          const unanswered = send(first.url).catch(() => undefined);
          // The test's timeout bounds the wait.
          await until(
            async () => {
              // pg_stat_activity is read once per transaction unless its snapshot is cleared.
              await lock.query('SELECT pg_stat_clear_snapshot()');
              const { rows } = await lock.query(
                // The emails' INSERT alone, or the one statement an accepted group is on PostgreSQL (its count
                // first, the emails' INSERT further on than pg_stat_activity keeps of a text: emails.repo.ts).
                `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
                   AND (query ILIKE 'insert into emails %' OR query ILIKE 'with part0 as (insert into send_quota %')`,
              );
              return rows.length > 0;
            },
            Infinity,
            'the request to wait for the lock on emails',
          );
          first.child.kill('SIGKILL');
          await first.exited;
          await unanswered;
          await lock.query('ROLLBACK');

          const second = await startServerProcess(env);
          cleanup.push(() => second.kill());
          const retried = await send(second.url);
          assert.equal(retried.status, 202, 'the key was not left taken by the killed request');
          assert.equal(retried.headers.get('idempotent-replayed'), null);
          const { id } = (await retried.json()) as { id: string };
          const replayed = await send(second.url);
          assert.equal(replayed.headers.get('idempotent-replayed'), 'true');
          assert.deepEqual(await replayed.json(), { id, object: 'email' });
          const { rows } = await lock.query('SELECT id FROM emails');
          assert.deepEqual(rows, [{ id }], 'one email for the key');
          assert.equal(await second.stop(), 0);
        },
      );
    }

    test('refuses to start on a database migrated by a newer version, and changes nothing', async (t) => {
      const own = await createProcessDatabase(engine);
      t.after(() => own.cleanup());
      const { db } = own.database.handle;
      await db
        .insertInto('postwire_migrations' as never)
        .values({ name: '9999_from_a_newer_version', applied_at: '2030-01-01T00:00:00.000Z' } as never)
        .execute();
      const migrationsBefore = await db
        .selectFrom('postwire_migrations' as never)
        .selectAll()
        .execute();
      const projectsBefore = await db.selectFrom('projects').selectAll().execute();

      const message =
        'the database holds migration 9999_from_a_newer_version, which this version of Postwire does not ' +
        'know; it was migrated by a newer version. Run that version (or newer), or restore a backup taken ' +
        'before it.';
      const server = await runFailingServer({ ...own.env, POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY });
      assert.equal(server.code, 1);
      assert.equal(server.stderr, `Postwire could not start: ${message}\n`);
      assert.equal(server.stdout, '');
      // The server's refusal is a start's (a child above); the CLI's commands answer the same in the test's process.
      for (const command of [['migrate'], ['worker']]) {
        const cli = await runCliInProcess(command, { ...own.env, POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY });
        assert.equal(cli.code, 1, command.join(' '));
        assert.equal(cli.stderr, `postwire: ${message}\n`, command.join(' '));
      }

      assert.deepEqual(
        await db
          .selectFrom('postwire_migrations' as never)
          .selectAll()
          .execute(),
        migrationsBefore,
      );
      assert.deepEqual(await db.selectFrom('projects').selectAll().execute(), projectsBefore);
    });
  });
}
