import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { loadConfig } from '../src/config.ts';
import type { Engine } from '../src/db/connection.ts';
import { createStamps, STAMP_CHANNEL } from '../src/db/validated-cache.ts';
import { notifyOtherProcesses, QUEUE_CHANNELS } from '../src/queue/notifier.ts';
import { createTestDatabase, ENGINES, TEST_ENCRYPTION_KEY } from './helpers/app.ts';
import {
  createProcessDatabase,
  type ProcessDatabase,
  requestJson,
  runCli,
  type ServerProcess,
  startServerProcess,
} from './helpers/process.ts';
import { until } from './helpers/until.ts';

// Every process keeps keys, webhooks, templates and sending domains in memory while the database's version stamps say they
// are current (src/db/validated-cache.ts). Two API processes share one database: whatever one of them (or
// the CLI) changes, the other serves on its very next request, having served the old value just before.

const KEY = 'pw_read_caches_bootstrap_key_0123456789';

// On PostgreSQL both ways of vouching for the reads: LISTEN (the default) and a stamp read on every use.
const VARIANTS = ENGINES.flatMap(
  (engine): Array<{ engine: Engine; label: string; env: Record<string, string> }> =>
    engine === 'postgres'
      ? [
          { engine, label: engine, env: {} },
          { engine, label: `${engine}, CACHE_STAMPS_LISTEN=false`, env: { CACHE_STAMPS_LISTEN: 'false' } },
        ]
      : [{ engine, label: engine, env: {} }],
);

for (const { engine, label, env: variantEnv } of VARIANTS) {
  describe(`in-memory reads across processes (${label})`, () => {
    let db: ProcessDatabase;
    let a: ServerProcess;
    let b: ServerProcess;
    const inA = (method: string, path: string, body?: unknown, key = KEY) =>
      requestJson(`${a.url}${path}`, key, method, body);
    const inB = (method: string, path: string, body?: unknown, key = KEY) =>
      requestJson(`${b.url}${path}`, key, method, body);

    before(async () => {
      db = await createProcessDatabase(engine);
      const env = {
        ...db.env,
        POSTWIRE_ENCRYPTION_KEY: TEST_ENCRYPTION_KEY.toString('hex'),
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        ...variantEnv,
      };
      a = await startServerProcess(env, ['src/cli.ts', 'serve', '--no-worker']);
      // B also runs the workers (capture mode), so the events it emits show whom its fan-out reached.
      b = await startServerProcess(env, ['src/cli.ts', 'serve']);
    });
    after(async () => {
      a?.kill();
      b?.kill();
      await Promise.all([a?.exited, b?.exited]);
      await db.cleanup();
    });

    test('a key revoked by the CLI is refused by a server that has just accepted it', async () => {
      const project = (await runCli(['projects', 'create', 'Caches'], db.env)).lastLine;
      const key = (await runCli(['keys', 'create', '--project', project, '--name', 'soon revoked'], db.env))
        .lastLine;
      for (let i = 0; i < 3; i++)
        assert.equal((await inB('GET', '/v1/webhooks', undefined, key)).status, 200);
      const listed = await runCli(['keys', 'list', '--project', project, '--json'], db.env);
      const keyId = (JSON.parse(listed.stdout) as Array<{ id: string }>)[0]!.id;
      assert.equal((await runCli(['keys', 'revoke', keyId], db.env)).code, 0);

      const refused = await inB('GET', '/v1/webhooks', undefined, key);
      assert.equal(refused.status, 401);
      assert.equal(refused.body.error.message, 'Unknown or revoked API key.');
      // The bootstrap key of the other project is untouched.
      assert.equal((await inB('GET', '/v1/webhooks')).status, 200);
    });

    test('a webhook created, patched and deleted in one process is seen so by the other at once', async () => {
      const created = await inA('POST', '/v1/webhooks', {
        url: 'http://127.0.0.1:9/first',
        events: ['email.sent'],
      });
      assert.equal(created.status, 201);
      const id = created.body.data.id as string;
      const urlsInB = async () =>
        ((await inB('GET', '/v1/webhooks')).body.data as Array<{ id: string; url: string }>)
          .filter((webhook) => webhook.id === id)
          .map((webhook) => webhook.url);
      assert.deepEqual(await urlsInB(), ['http://127.0.0.1:9/first']);
      assert.equal((await inB('GET', `/v1/webhooks/${id}`)).body.data.url, 'http://127.0.0.1:9/first');

      const patched = await inA('PATCH', `/v1/webhooks/${id}`, { url: 'http://127.0.0.1:9/second' });
      assert.equal(patched.status, 200);
      assert.equal((await inB('GET', `/v1/webhooks/${id}`)).body.data.url, 'http://127.0.0.1:9/second');
      assert.deepEqual(await urlsInB(), ['http://127.0.0.1:9/second']);

      assert.equal((await inA('DELETE', `/v1/webhooks/${id}`)).status, 200);
      assert.equal((await inB('GET', `/v1/webhooks/${id}`)).status, 404);
      assert.deepEqual(await urlsInB(), []);
    });

    test("the other process's events go to a webhook created a moment ago", async () => {
      const sendAndDeliveries = async () => {
        const sent = await inB('POST', '/v1/emails', {
          from: 'ada@example.com',
          to: ['bob@example.org'],
          subject: 'Fan-out',
          text: 'Hi',
        });
        assert.equal(sent.status, 202, JSON.stringify(sent.body));
        const emailId = sent.body.id as string;
        // The worker in B sends it (capture mode) and emits email.sent with one delivery per webhook.
        const event = await until(
          async () => {
            const events = await inB('GET', `/v1/events?type=email.sent&limit=100`);
            return (events.body.data as Array<{ id: string; data: { email_id: string } }>).find(
              (candidate) => candidate.data.email_id === emailId,
            );
          },
          20_000,
          'email.sent',
        );
        const detail = await inB('GET', `/v1/events/${event.id}`);
        return (detail.body.deliveries as Array<{ webhook_id: string }>).map((row) => row.webhook_id);
      };
      const first = await inA('POST', '/v1/webhooks', {
        url: 'http://127.0.0.1:9/a',
        events: ['email.sent'],
      });
      assert.deepEqual(await sendAndDeliveries(), [first.body.data.id]);
      const second = await inA('POST', '/v1/webhooks', {
        url: 'http://127.0.0.1:9/b',
        events: ['email.sent'],
      });
      assert.deepEqual((await sendAndDeliveries()).sort(), [first.body.data.id, second.body.data.id].sort());
      await inA('PATCH', `/v1/webhooks/${first.body.data.id}`, { enabled: false });
      assert.deepEqual(await sendAndDeliveries(), [second.body.data.id]);
      await inA('DELETE', `/v1/webhooks/${first.body.data.id}`);
      await inA('DELETE', `/v1/webhooks/${second.body.data.id}`);
    });

    test('a template published or deleted in one process is what the other sends next', async () => {
      const created = await inA('POST', '/v1/templates', {
        name: 'Cached',
        alias: 'cached-template',
        subject: 'Version one',
        text: 'Hello',
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.id as string;
      assert.equal((await inA('POST', `/v1/templates/${id}/publish`, {})).status, 200);
      const sendInB = () =>
        inB('POST', '/v1/emails', {
          from: 'ada@example.com',
          to: ['bob@example.org'],
          template: { id: 'cached-template' },
        });
      const subjectOf = async (sent: { status: number; body: any }) => {
        assert.equal(sent.status, 202, JSON.stringify(sent.body));
        return (await inB('GET', `/v1/emails/${sent.body.id}`)).body.subject as string;
      };
      assert.equal(await subjectOf(await sendInB()), 'Version one');
      assert.equal(await subjectOf(await sendInB()), 'Version one');

      const published = await inA('POST', `/v1/templates/${id}/publish`, { subject: 'Version two' });
      assert.equal(published.body.version, 2);
      assert.equal(await subjectOf(await sendInB()), 'Version two');

      assert.equal((await inA('DELETE', `/v1/templates/${id}`)).status, 200);
      const missing = await sendInB();
      assert.equal(missing.status, 404);
      assert.equal(missing.body.error.param, 'template.id');
    });

    test("a sending domain another project verifies refuses the other process's next send from it", async () => {
      const holder = (await runCli(['projects', 'create', 'Holder'], db.env)).lastLine;
      const holderKey = (await runCli(['keys', 'create', '--project', holder, '--name', 'holder'], db.env))
        .lastLine;
      const added = await inA('POST', '/v1/domains', { name: 'held.example' }, holderKey);
      assert.equal(added.status, 201, JSON.stringify(added.body));
      const sendInB = () =>
        inB('POST', '/v1/emails', {
          from: 'ada@held.example',
          to: ['bob@example.org'],
          subject: 'Hi',
          text: 'Hi',
        });
      // Pending in another project: no bar to sending (the lookup is now kept in B's memory).
      for (let i = 0; i < 3; i++) assert.equal((await sendInB()).status, 202);
      // As the domain check would, once its DNS records are found (its first check is hours away).
      await db.database.handle.db
        .updateTable('domains')
        .set({ status: 'verified' })
        .where('name', '=', 'held.example')
        .execute();
      const refused = await sendInB();
      assert.equal(refused.status, 422, JSON.stringify(refused.body));
      assert.equal(refused.body.error.code, 'sender_domain_not_allowed');
    });
  });
}

/** The test database's Kysely, counting the queries that return results (the stamps' reads among them). */
function countReads(database: Awaited<ReturnType<typeof createTestDatabase>>) {
  const counter = {
    count: 0,
    db: database.handle.db.withPlugin({
      transformQuery: (args) => args.node,
      transformResult: async (args) => {
        counter.count++;
        return args.result;
      },
    }),
  };
  return counter;
}

describe(
  'version stamps shared by concurrent readers (postgres)',
  {
    skip: !ENGINES.includes('postgres') && 'needs TEST_DATABASE_URL',
  },
  () => {
    test('a read already in flight serves no one who came after it started; the next serves them all', async () => {
      const database = await createTestDatabase('postgres');
      try {
        const reads = countReads(database);
        const stamps = createStamps(reads.db);
        const first = stamps.current('webhooks');
        // Issued while the first read is in flight: a write committed just before them could be missing from
        // it, so they wait for a read of their own, and share it.
        const later = [stamps.current('webhooks'), stamps.current('api_keys'), stamps.current('templates')];
        await Promise.all([first, ...later]);
        assert.equal(reads.count, 2);

        const before = await stamps.current('webhooks');
        await database.handle.db
          .insertInto('projects')
          .values({ id: 'proj_none', name: 'None', is_default: false, created_at: new Date().toISOString() })
          .execute();
        assert.equal(await stamps.current('webhooks'), before, 'another table: the same stamp');
        await database.handle.db
          .insertInto('webhooks')
          .values({
            id: 'wh_01kfa6zp3wexd1ytbq1g4s8v2c',
            project_id: 'proj_none',
            url: 'https://example.com/hook',
            enabled: true,
            events: '[]',
            secret_sealed: null,
            created_at: new Date().toISOString(),
            updated_at: new Date().toISOString(),
          })
          .execute();
        assert.notEqual(await stamps.current('webhooks'), before);
      } finally {
        await database.drop();
      }
    });

    test('while listening, the stamps are read only after a notification, a commit of its own or a lost listener', async () => {
      const database = await createTestDatabase('postgres');
      try {
        const reads = countReads(database);
        const listen = database.handle.listen!;
        const stamps = createStamps(reads.db, {
          subscribe: (onNotify, onLost) => listen(STAMP_CHANNEL, onNotify, onLost),
          resubscribeMs: 50,
        });
        // Once the LISTEN has taken effect, a use makes no read.
        const settled = () =>
          until(async () => {
            const before = reads.count;
            await stamps.current('webhooks');
            return reads.count === before;
          });
        await settled();
        const readsWhileListening = reads.count;
        const before = await stamps.current('webhooks');
        for (let i = 0; i < 20; i++) await stamps.current('api_keys');
        assert.equal(reads.count, readsWhileListening);

        // Another writer (the handle's own pool, which these stamps do not track): seen once its
        // notification arrives, and then no more reads again.
        const now = new Date().toISOString();
        await database.handle.db
          .insertInto('projects')
          .values({ id: 'proj_listen', name: 'Listen', is_default: false, created_at: now })
          .execute();
        await database.handle.db
          .insertInto('webhooks')
          .values({
            id: 'wh_01kfa6zp3wexd1ytbq1g4s8v2d',
            project_id: 'proj_listen',
            url: 'https://example.com/hook',
            enabled: true,
            events: '[]',
            secret_sealed: null,
            created_at: now,
            updated_at: now,
          })
          .execute();
        const changed = await until(async () => {
          const stamp = await stamps.current('webhooks');
          return stamp !== before && stamp;
        });
        await settled();
        assert.equal(await stamps.current('webhooks'), changed);

        // A commit of this process's own: the next use reads, without waiting for the notification.
        const readsBefore = reads.count;
        stamps.noteOwnCommit();
        await stamps.current('webhooks');
        assert.equal(reads.count, readsBefore + 1);

        // The listener lost: every use reads (and sees writes at once) until it is back. Only this schema's
        // listener goes (by its application name), not other test runs'.
        await sql`select pg_terminate_backend(pid) from pg_stat_activity
          where application_name = ${`postwire listen ${STAMP_CHANNEL} `} || current_schema()`.execute(
          database.handle.db,
        );
        await until(async () => {
          const before = reads.count;
          await stamps.current('webhooks');
          await stamps.current('webhooks');
          return reads.count === before + 2;
        });
        await settled();
        await stamps.close();
      } finally {
        await database.drop();
      }
    });

    test("a deployment in another schema of the same database wakes none of this one's listeners", async () => {
      const [ours, theirs] = [await createTestDatabase('postgres'), await createTestDatabase('postgres')];
      const listeners: Array<{ close(): Promise<void> }> = [];
      try {
        const heard = { stamps: 0, sending: 0 };
        const subscribed = (channel: string, key: keyof typeof heard) =>
          ours.handle.listen!(channel, () => (heard[key] += 1), assert.fail);
        listeners.push(await subscribed(STAMP_CHANNEL, 'stamps'));
        listeners.push(await subscribed(QUEUE_CHANNELS.sending, 'sending'));
        const addProject = (database: typeof ours) =>
          database.handle.db
            .insertInto('projects')
            .values({
              id: 'proj_schema',
              name: 'Schema',
              is_default: false,
              created_at: new Date().toISOString(),
            })
            .execute();
        const addKey = (database: typeof ours, id: string) =>
          database.handle.db
            .insertInto('api_keys')
            .values({
              id,
              project_id: 'proj_schema',
              name: 'k',
              key_hash: id,
              key_prefix: 'pw_',
              created_at: new Date().toISOString(),
            })
            .execute();
        await addProject(ours);
        await addProject(theirs);

        // Theirs first, then ours: PostgreSQL delivers notifications in the order the transactions commit, so
        // once ours has been heard, theirs had arrived before it and was ignored.
        await addKey(theirs, 'key_theirs');
        await notifyOtherProcesses(theirs.handle.db, 'postgres', QUEUE_CHANNELS.sending);
        await addKey(ours, 'key_ours');
        await notifyOtherProcesses(ours.handle.db, 'postgres', QUEUE_CHANNELS.sending);
        await until(() => heard.stamps > 0 && heard.sending > 0);
        assert.deepEqual(heard, { stamps: 1, sending: 1 });
      } finally {
        for (const listener of listeners) await listener.close();
        await theirs.drop();
        await ours.drop();
      }
    });
  },
);

test('CACHE_STAMPS_LISTEN: on unless false; anything else is refused', () => {
  assert.equal(loadConfig({}).cacheStampsListen, true);
  assert.equal(loadConfig({ CACHE_STAMPS_LISTEN: 'false' }).cacheStampsListen, false);
  assert.throws(() => loadConfig({ CACHE_STAMPS_LISTEN: 'sometimes' }), /CACHE_STAMPS_LISTEN/);
});
