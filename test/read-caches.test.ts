import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { type Engine, openDatabase } from '../src/db/connection.ts';
import { createStamps } from '../src/db/validated-cache.ts';
import { createDomainRepo } from '../src/modules/domains/domains.repo.ts';
import { createDomainQueue } from '../src/modules/domains/domains.queue.ts';
import { createWebhookRepo } from '../src/modules/webhooks/webhooks.repo.ts';
import { notifyOtherProcesses, QUEUE_CHANNELS } from '../src/queue/notifier.ts';
import {
  ALL_ENGINES,
  createTestDatabase,
  engineSkip,
  startTestApp,
  TEST_ENCRYPTION_KEY,
} from './helpers/app.ts';
import {
  createProcessDatabase,
  type ProcessDatabase,
  requestJson,
  type ServerProcess,
  startServerProcess,
} from './helpers/process.ts';
import { runCliInProcess } from './helpers/cli-in-process.ts';
import { until } from './helpers/until.ts';
import { inTransaction } from '../src/db/transaction.ts';

// Every process keeps keys, webhooks, templates and sending domains in memory while the database's version stamps say they
// are current (src/db/validated-cache.ts). Two API processes share one database: whatever one of them (or
// the CLI) changes, the other serves on its very next request, having served the old value just before.

const KEY = 'pw_read_caches_bootstrap_key_0123456789';

// On PostgreSQL a stamp read vouches for the reads for a lease, and a process waits it out before answering
// after a write of its own. With a long lease B's last read is always within it when the client's next
// request arrives: only A's waiting keeps B from serving what A's write replaced, so the checks below fail
// without it, whatever the load.
const LONG_LEASE_MS = 400;
const VARIANTS = ALL_ENGINES.flatMap(
  (engine): Array<{ engine: Engine; label: string; env: Record<string, string>; leaseMs?: number }> =>
    engine === 'postgres'
      ? [
          { engine, label: engine, env: {} },
          {
            engine,
            label: `${engine}, CACHE_STAMP_LEASE=${LONG_LEASE_MS}ms`,
            env: { CACHE_STAMP_LEASE: `${LONG_LEASE_MS}ms` },
            leaseMs: LONG_LEASE_MS,
          },
        ]
      : [{ engine, label: engine, env: {} }],
);

for (const { engine, label, env: variantEnv, leaseMs } of VARIANTS) {
  describe(`in-memory reads across processes (${label})`, { skip: engineSkip(engine) }, () => {
    let db: ProcessDatabase;
    let a: ServerProcess;
    let b: ServerProcess;
    const inA = (method: string, path: string, body?: unknown, key = KEY) =>
      requestJson(`${a.url}${path}`, key, method, body);
    const inB = (method: string, path: string, body?: unknown, key = KEY) =>
      requestJson(`${b.url}${path}`, key, method, body);

    before(async () => {
      db = await createProcessDatabase(engine, leaseMs === undefined ? {} : { stampLeaseMs: leaseMs });
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

    /**
     * The CLI as an operator runs it, with the deployment's settings (the stamps' lease among them: its write
     * waits that out too), in this process: what it is about is another writer than A and B.
     */
    const cliEnv = () => ({ ...db.env, ...variantEnv });

    test('a key revoked by the CLI is refused by a server that has just accepted it', async () => {
      const project = (await runCliInProcess(['projects', 'create', 'Caches'], cliEnv())).lastLine;
      const key = (
        await runCliInProcess(['keys', 'create', '--project', project, '--name', 'soon revoked'], cliEnv())
      ).lastLine;
      for (let i = 0; i < 3; i++)
        assert.equal((await inB('GET', '/v1/webhooks', undefined, key)).status, 200);
      const listed = await runCliInProcess(['keys', 'list', '--project', project, '--json'], cliEnv());
      const keyId = (JSON.parse(listed.stdout) as Array<{ id: string }>)[0]!.id;
      assert.equal((await runCliInProcess(['keys', 'revoke', keyId], cliEnv())).code, 0);

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
      const holder = (await runCliInProcess(['projects', 'create', 'Holder'], cliEnv())).lastLine;
      const holderKey = (
        await runCliInProcess(['keys', 'create', '--project', holder, '--name', 'holder'], cliEnv())
      ).lastLine;
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
      // Going on is this writer's answer: like a server's, it waits out the other processes' leases.
      await db.database.handle.stamps.outlastLeases();
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
    skip: engineSkip('postgres'),
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
          .values(webhookRow('wh_01kfa6zp3wexd1ytbq1g4s8v2c', 'proj_none', new Date().toISOString()))
          .execute();
        assert.notEqual(await stamps.current('webhooks'), before);
      } finally {
        await database.drop();
      }
    });

    test('a read serves every use within its lease; a commit of its own ends that and its answers wait out the lease', async () => {
      const database = await createTestDatabase('postgres');
      try {
        const reads = countReads(database);
        let now = 1000;
        const stamps = createStamps(reads.db, { leaseMs: 10, now: () => now });
        const before = await stamps.current('webhooks');
        const afterFirst = reads.count;
        for (let i = 0; i < 20; i++, now += 0.2) await stamps.current('api_keys');
        assert.equal(reads.count, afterFirst, 'within the first half of the lease: no read');

        // Past half the lease, a use is served at once and renews the lease in the background.
        now = 1005;
        assert.equal(await stamps.current('webhooks'), before);
        await until(() => reads.count === afterFirst + 1);

        // Another writer (the handle's own pool, whose commits these stamps do not track) answers only once
        // the lease of a read made before its commit has run out; until then that read may stand.
        now = 1006;
        const written = new Date().toISOString();
        await database.handle.db
          .insertInto('projects')
          .values({ id: 'proj_lease', name: 'Lease', is_default: false, created_at: written })
          .execute();
        await database.handle.db
          .insertInto('webhooks')
          .values(webhookRow('wh_01kfa6zp3wexd1ytbq1g4s8v2d', 'proj_lease', written))
          .execute();
        assert.equal(await stamps.current('webhooks'), before);
        now = 1015;
        const changed = await stamps.current('webhooks');
        assert.notEqual(changed, before);
        assert.equal(reads.count, afterFirst + 2);

        // A commit of this process's own: the next use reads, and answers wait until the lease of every read
        // another process may have made before it has run out.
        assert.equal(stamps.outlastLeases(), undefined, 'no commit of its own yet');
        now = 1016;
        stamps.noteOwnCommit();
        await stamps.current('webhooks');
        assert.equal(reads.count, afterFirst + 3);
        const waiting = stamps.outlastLeases();
        assert.ok(waiting, 'an answer now waits');
        now = 1025.9;
        assert.ok(stamps.outlastLeases(), 'still within the lease');
        now = 1026;
        assert.equal(stamps.outlastLeases(), undefined);
        await waiting;
      } finally {
        await database.drop();
      }
    });

    test("a worker's bookkeeping on webhooks and domains makes no answer wait and keeps the vouched reads", async () => {
      const fixtures = await createTestDatabase('postgres');
      // A worker process's handle, with its own monotonic clock: a read it makes vouches until the clock moves.
      let now = 1000;
      let stampReads = 0;
      const worker = await openDatabase({
        url: fixtures.env.DATABASE_URL!,
        stampLeaseMs: 50,
        stampClock: () => now,
        observe: (text) => {
          if (/\bfrom "cache_stamps"/.test(text)) stampReads++;
        },
      });
      try {
        const written = new Date().toISOString();
        await fixtures.handle.db
          .insertInto('projects')
          .values({ id: 'proj_books', name: 'Books', is_default: false, created_at: written })
          .execute();
        await fixtures.handle.db
          .insertInto('webhooks')
          .values(webhookRow('wh_01kfa6zp3wexd1ytbq1g4s8v2e', 'proj_books', written))
          .execute();
        await createDomainRepo(fixtures.handle.db, 'postgres').insert({
          id: 'dom_01kfa6zp3wexd1ytbq1g4s8v2e',
          projectId: 'proj_books',
          name: 'books.example',
          dkimSelector: 'pw1',
          dkimPublicKey: 'key',
          dkimPrivateKeySealed: 'sealed',
          nextDkimSelector: null,
          nextDkimPublicKey: null,
          nextDkimPrivateKeySealed: null,
          nextCheckAt: written,
          createdAt: written,
          updatedAt: written,
          challengeToken: 'token',
          receiving: false,
        });

        const before = await worker.stamps.current('webhooks');
        const readsBefore = stampReads;
        // What the delivery worker writes after a success and a failure (in its outcomes' transaction), and
        // the domain worker's lease.
        const webhooks = createWebhookRepo(worker.db);
        await inTransaction(worker.db, async (transaction) => {
          await webhooks.recordSuccess('wh_01kfa6zp3wexd1ytbq1g4s8v2e', written, written, transaction);
          await webhooks.recordFailures(
            'wh_01kfa6zp3wexd1ytbq1g4s8v2e',
            { firstAt: written, now: written, disableAfterMs: 86_400_000 },
            transaction,
          );
        });
        const lease = { workerId: 'books', now: new Date(), until: new Date(Date.now() + 60_000) };
        assert.equal((await createDomainQueue(worker.db, 'postgres').claimDue(lease, 10)).length, 1);

        assert.equal(worker.stamps.outlastLeases(), undefined, 'no answer waits for bookkeeping');
        now += 10;
        assert.equal(await worker.stamps.current('webhooks'), before);
        assert.equal(stampReads, readsBefore, 'the read made before the bookkeeping still vouches');

        // A write the cached reads hold still counts: the next use reads, and answers wait out the lease.
        await worker.db
          .updateTable('webhooks')
          .set({ enabled: false, updated_at: written })
          .where('id', '=', 'wh_01kfa6zp3wexd1ytbq1g4s8v2e')
          .execute();
        assert.ok(worker.stamps.outlastLeases(), 'an answer after a cached write waits');
        assert.notEqual(await worker.stamps.current('webhooks'), before);
        assert.equal(stampReads, readsBefore + 1);
        now += 50;
        assert.equal(worker.stamps.outlastLeases(), undefined);
      } finally {
        // Closing waits out the leases by this clock.
        now += 60_000;
        await worker.close();
        await fixtures.drop();
      }
    });

    test("only the request that wrote waits out the lease; another request's answer in that moment does not", async () => {
      // The stamps' clock stands still until the test moves it: a wait for the lease cannot end meanwhile.
      let now = 1000;
      const api = await startTestApp('postgres', {
        stampLeaseMs: 50,
        stampClock: () => now,
        allowPrivateUrls: true,
      });
      try {
        let created: { status: number; body: any } | undefined;
        const creating = api
          .request('POST', '/v1/webhooks', {
            body: { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] },
          })
          .then((response) => (created = response));
        // Committed, and its answer held: it waits for the clock to pass the lease.
        await until(
          async () =>
            (await api.database.handle.db.selectFrom('webhooks').select('id').execute()).length === 1,
        );
        const listed = await api.request('GET', '/v1/webhooks');
        assert.equal(listed.status, 200);
        assert.equal(listed.body.data.length, 1, "the process's own write is seen at once");
        assert.equal(created, undefined, "the writer's answer still waits");
        now += 50;
        await creating;
        assert.equal(created!.status, 201);
      } finally {
        now += 60_000;
        await api.close();
      }
    });

    test('without a lease every use reads and nothing waits', async () => {
      const database = await createTestDatabase('postgres');
      try {
        const reads = countReads(database);
        const stamps = createStamps(reads.db);
        const before = reads.count;
        for (let i = 0; i < 5; i++) await stamps.current('webhooks');
        assert.equal(reads.count, before + 5);
        stamps.noteOwnCommit();
        assert.equal(stamps.outlastLeases(), undefined);
      } finally {
        await database.drop();
      }
    });

    test("a deployment in another schema of the same database wakes none of this one's listeners", async () => {
      const ours = await createTestDatabase('postgres');
      const theirs = await createTestDatabase('postgres', { besideOf: ours });
      const listeners: Array<{ close(): Promise<void> }> = [];
      try {
        let heard = 0;
        listeners.push(await ours.handle.listen!(QUEUE_CHANNELS.sending, () => (heard += 1), assert.fail));
        // Theirs first, then ours: PostgreSQL delivers notifications in the order the transactions commit, so
        // once ours has been heard, theirs had arrived before it and was ignored.
        await notifyOtherProcesses(theirs.handle.db, 'postgres', QUEUE_CHANNELS.sending);
        await notifyOtherProcesses(ours.handle.db, 'postgres', QUEUE_CHANNELS.sending);
        await until(() => heard > 0);
        assert.equal(heard, 1);
      } finally {
        for (const listener of listeners) await listener.close();
        await theirs.drop();
        await ours.drop();
      }
    });
  },
);

test('CACHE_STAMP_LEASE: 10ms unless given, 0 reads on every use, at most a second', () => {
  assert.equal(loadConfig({}).cacheStampLeaseMs, 10);
  assert.equal(loadConfig({ CACHE_STAMP_LEASE: '0' }).cacheStampLeaseMs, 0);
  assert.equal(loadConfig({ CACHE_STAMP_LEASE: '250ms' }).cacheStampLeaseMs, 250);
  assert.throws(() => loadConfig({ CACHE_STAMP_LEASE: '5s' }), /CACHE_STAMP_LEASE must be at most 1000ms/);
  assert.throws(() => loadConfig({ CACHE_STAMP_LEASE: 'sometimes' }), /CACHE_STAMP_LEASE/);
});

/** An enabled webhook of `projectId`'s without a secret, as a test writes it straight into the table. */
function webhookRow(id: string, projectId: string, at: string) {
  return {
    id,
    project_id: projectId,
    url: 'https://example.com/hook',
    enabled: true,
    events: '[]',
    secret_sealed: null,
    created_at: at,
    updated_at: at,
  };
}
