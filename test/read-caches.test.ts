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
import { sql } from 'kysely';
import pg from 'pg';

// Every process keeps keys, webhooks, templates and sending domains in memory while the database's version stamps say they
// are current (src/db/validated-cache.ts). Two API processes share one database: whatever one of them (or
// the CLI) changes, the other serves on its very next request, having served the old value just before.

const KEY = 'pw_read_caches_bootstrap_key_0123456789';

// On PostgreSQL a stamp read vouches for the reads for a lease (1 s by default) while its process is
// registered as hearing of every cached write, and a process's answer after a write of its own waits for
// every other registered process's acknowledgement, or the lease. B's last read is always within its lease
// when the client's next request arrives: only A's waiting keeps B from serving what A's write replaced, so
// the checks below fail without it, whatever the load. With CACHE_STAMP_LEASE=0 every use reads.
const DEFAULT_LEASE_MS = 1000;
const VARIANTS = ALL_ENGINES.flatMap(
  (engine): Array<{ engine: Engine; label: string; env: Record<string, string>; leaseMs?: number }> =>
    engine === 'postgres'
      ? [
          { engine, label: engine, env: {} },
          { engine, label: `${engine}, CACHE_STAMP_LEASE=0`, env: { CACHE_STAMP_LEASE: '0' }, leaseMs: 0 },
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

    /** A key of the bootstrap project's, made in A, and accepted by B (so B holds it in memory). */
    const keyAcceptedByB = async (name: string) => {
      const created = await inA('POST', '/v1/api-keys', { name, permission: 'full_access' });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const key = created.body.token as string;
      for (let i = 0; i < 3; i++)
        assert.equal((await inB('GET', '/v1/webhooks', undefined, key)).status, 200);
      return { key, id: created.body.id as string };
    };
    const refusedByB = async (key: string) => {
      const refused = await inB('GET', '/v1/webhooks', undefined, key);
      assert.equal(refused.status, 401);
      assert.equal(refused.body.error.message, 'Unknown or revoked API key.');
    };

    test('a key revoked in one process is refused by the other at once', async () => {
      const { key, id } = await keyAcceptedByB('revoked in A');
      assert.equal((await inA('DELETE', `/v1/api-keys/${id}`)).status, 200);
      await refusedByB(key);
    });

    test(
      'a process that cannot acknowledge (stopped, its listener killed) holds the write for the lease, no longer',
      { skip: engine !== 'postgres' || leaseMs === 0 },
      async () => {
        const { key, id } = await keyAcceptedByB('revoked while B is stopped');
        const listeners = async () =>
          (
            await sql<{
              listener_pid: number;
            }>`select listener_pid from stamp_listeners where listener_pid in (select pid from pg_stat_activity)`.execute(
              db.database.handle.db,
            )
          ).rows.map((row) => row.listener_pid);
        assert.equal((await listeners()).length, 2, 'A and B are registered, listening');
        b.child.kill('SIGSTOP');
        let waitedMs: number;
        try {
          // Every listener's connection ends (A's and B's: which is whose is not told); B cannot see it yet.
          await sql`select pg_terminate_backend(listener_pid) from stamp_listeners`.execute(
            db.database.handle.db,
          );
          const started = performance.now();
          assert.equal((await inA('DELETE', `/v1/api-keys/${id}`)).status, 200);
          waitedMs = performance.now() - started;
        } finally {
          b.child.kill('SIGCONT');
        }
        assert.ok(waitedMs >= DEFAULT_LEASE_MS, `A answered after ${waitedMs} ms: B never acknowledged`);
        await refusedByB(key);

        // Both listen and register again, with new connections: B hears of the next write again.
        await until(async () => (await listeners()).length === 2, 20_000, 'A and B registered again');
        const next = await keyAcceptedByB('revoked once B listens again');
        assert.equal((await inA('DELETE', `/v1/api-keys/${next.id}`)).status, 200);
        await refusedByB(next.key);
      },
    );

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

        // Registered after the setup's writes, as a process that serves is: its reads vouch from here on.
        await worker.joinStampRegistry!();
        now += 1;
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
        const waiting = worker.stamps.outlastLeases();
        assert.ok(waiting, 'an answer after a cached write waits (for the acknowledgements: none here)');
        assert.notEqual(await worker.stamps.current('webhooks'), before);
        assert.equal(stampReads, readsBefore + 1);
        await waiting;
        now += 50;
        assert.equal(worker.stamps.outlastLeases(), undefined);
      } finally {
        // Closing waits out the leases by this clock.
        now += 60_000;
        await worker.close();
        await fixtures.drop();
      }
    });

    test("only the request that wrote waits for the other processes; another request's answer in that moment does not", async () => {
      // The stamps' clock stands still until the test moves it: a wait for the lease cannot end meanwhile.
      let now = 1000;
      const api = await startTestApp('postgres', {
        stampLeaseMs: 50,
        stampClock: () => now,
        allowPrivateUrls: true,
      });
      const silent = await registerSilentProcess(api.database);
      try {
        const create = (url: string) =>
          api.request('POST', '/v1/webhooks', { body: { url, events: ['email.sent'] } });
        let created: { status: number; body: any } | undefined;
        const creating = create('http://127.0.0.1:9/hook').then((response) => (created = response));
        // Committed and announced, and its answer held: the silent process does not acknowledge, and the lease
        // stands still.
        await silent.heardToken();
        const listed = await api.request('GET', '/v1/webhooks');
        assert.equal(listed.status, 200);
        assert.equal(listed.body.data.length, 1, "the process's own write is seen at once");
        assert.equal(created, undefined, "the writer's answer still waits");
        now += 50;
        await creating;
        assert.equal(created!.status, 201);

        // Once no other process is registered, a write's answer waits for nothing, the lease still standing.
        await silent.leave();
        assert.equal((await create('http://127.0.0.1:9/alone')).status, 201);
      } finally {
        now += 60_000;
        await silent.leave();
        await api.close();
      }
    });

    test("a write's answer waits for every registered process's acknowledgement, not the lease, and they heard of it", async () => {
      const fixtures = await createTestDatabase('postgres');
      // Both processes' clocks stand still unless the test moves them: their leases never run out by
      // themselves.
      let now = 1000;
      let readerReads = 0;
      const writer = await openProcess(fixtures, () => now);
      const reader = await openProcess(
        fixtures,
        () => now,
        () => readerReads++,
      );
      try {
        await writer.joinStampRegistry!();
        const [{ pid: writerPid }] = (await listenerPids(fixtures)) as [{ pid: number }];
        const written = new Date().toISOString();
        await writer.db
          .insertInto('projects')
          .values({ id: 'proj_acks', name: 'Acks', is_default: false, created_at: written })
          .execute();
        await writer.db
          .insertInto('webhooks')
          .values(webhookRow('wh_01kfa6zp3wexd1ytbq1g4s8v2f', 'proj_acks', written))
          .execute();
        await settles(writer.stamps.outlastLeases(), 'alone, the writer waits for nobody');

        await reader.joinStampRegistry!();
        now += 1;
        const before = await reader.stamps.current('webhooks');
        const reads = readerReads;
        now += 1;
        assert.equal(await reader.stamps.current('webhooks'), before);
        assert.equal(readerReads, reads, "registered: the reader's read vouches");

        /** The writer moves the webhook, and its answer waits for the acknowledgements. */
        const move = async (url: string, acknowledgedBy: string) => {
          await writer.db
            .updateTable('webhooks')
            .set({ url, updated_at: written })
            .where('id', '=', 'wh_01kfa6zp3wexd1ytbq1g4s8v2f')
            .execute();
          await settles(writer.stamps.outlastLeases(), acknowledgedBy);
        };
        await move('https://example.com/moved', "the reader's acknowledgement");
        const after = await reader.stamps.current('webhooks');
        assert.notEqual(after, before, 'it heard of the write before it acknowledged');
        assert.equal(readerReads, reads + 1);
        now += 1;
        await reader.stamps.current('webhooks');
        const vouched = readerReads;
        now += 1;
        await reader.stamps.current('webhooks');
        assert.equal(readerReads, vouched, 'a read made after it heard vouches again');

        // Its listener's connection lost: what it read before vouches no more, and it registers again with
        // another listener, which acknowledges the next write.
        const registered = (await listenerPids(fixtures)).find((row) => row.pid !== writerPid);
        await sql`select pg_terminate_backend(${registered!.pid})`.execute(fixtures.handle.db);
        await until(async () => {
          const seen = readerReads;
          await reader.stamps.current('webhooks');
          return readerReads > seen;
        });
        await until(async () => (await listenerPids(fixtures)).every((row) => row.pid !== registered!.pid));
        assert.equal((await listenerPids(fixtures)).length, 2);
        await move('https://example.com/moved-again', "the new listener's acknowledgement");
        assert.notEqual(await reader.stamps.current('webhooks'), after);
      } finally {
        now += 60_000;
        for (const handle of [reader, writer]) await handle.close();
        await fixtures.drop();
      }
    });

    test("a registered process's acknowledgement counts from its listening connection only; without one the answer waits the lease; an expired registration, nothing", async () => {
      const fixtures = await createTestDatabase('postgres');
      let now = 1000;
      const writer = await openProcess(fixtures, () => now);
      const silent = await registerSilentProcess(fixtures);
      try {
        await writer.joinStampRegistry!();
        const written = new Date().toISOString();
        await writer.db
          .insertInto('projects')
          .values({ id: 'proj_silent', name: 'Silent', is_default: false, created_at: written })
          .execute();
        const writeWebhook = async (enabled: boolean) => {
          if (enabled) {
            await writer.db
              .insertInto('webhooks')
              .values(webhookRow('wh_01kfa6zp3wexd1ytbq1g4s8v2g', 'proj_silent', written))
              .execute();
          } else {
            await writer.db
              .updateTable('webhooks')
              .set({ enabled, updated_at: written })
              .where('id', '=', 'wh_01kfa6zp3wexd1ytbq1g4s8v2g')
              .execute();
          }
          let answered = false;
          const waiting = writer.stamps.outlastLeases()!.then(() => (answered = true));
          return { waiting, answered: () => answered };
        };
        /** Round trips after the announcement: an answer that waited for nothing has come by then. */
        const roundTrips = async () => {
          for (let i = 0; i < 3; i++) await writer.db.selectFrom('webhooks').select('id').execute();
        };

        const first = await writeWebhook(true);
        const token = await silent.heardToken();
        await silent.acknowledge(token, 'another');
        await roundTrips();
        assert.equal(
          first.answered(),
          false,
          'acknowledged from a connection that is not the registered one',
        );
        await silent.acknowledge(token);
        await settles(first.waiting, 'the acknowledgement from the registered connection');

        const second = await writeWebhook(false);
        await silent.heardToken();
        await roundTrips();
        assert.equal(second.answered(), false, 'never acknowledged, and the lease stands still');
        now += 1000;
        await second.waiting;

        await silent.expire();
        const third = await writeWebhook(false);
        await settles(third.waiting, 'an expired registration is waited for by no one');
      } finally {
        now += 60_000;
        await silent.leave();
        await writer.close();
        await fixtures.drop();
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

test('CACHE_STAMP_LEASE: 1s unless given, 0 reads on every use, at most a second', () => {
  assert.equal(loadConfig({}).cacheStampLeaseMs, 1000);
  assert.equal(loadConfig({ CACHE_STAMP_LEASE: '0' }).cacheStampLeaseMs, 0);
  assert.equal(loadConfig({ CACHE_STAMP_LEASE: '250ms' }).cacheStampLeaseMs, 250);
  assert.throws(() => loadConfig({ CACHE_STAMP_LEASE: '5s' }), /CACHE_STAMP_LEASE must be at most 1000ms/);
  assert.throws(() => loadConfig({ CACHE_STAMP_LEASE: 'sometimes' }), /CACHE_STAMP_LEASE/);
});

/**
 * Another process's handle on `fixtures`' database, with a lease of a second by `clock`, which stands still
 * unless the test moves it; `onStampRead` is told of each stamp read it makes.
 */
function openProcess(
  fixtures: Awaited<ReturnType<typeof createTestDatabase>>,
  clock: () => number,
  onStampRead?: () => void,
) {
  return openDatabase({
    url: fixtures.env.DATABASE_URL!,
    stampLeaseMs: 1000,
    stampClock: clock,
    observe: (text) => {
      if (onStampRead && /\bfrom "cache_stamps"/.test(text)) onStampRead();
    },
  });
}

/** Resolves once `waiting` has, or at once when it is undefined; fails (in time) if it never does. */
async function settles(waiting: Promise<unknown> | undefined, what: string): Promise<void> {
  let settled = false;
  void waiting?.then(() => (settled = true));
  if (waiting) await until(() => settled, 8000, what);
}

/** The registered processes' listening connections, by their backend pid. */
async function listenerPids(database: Awaited<ReturnType<typeof createTestDatabase>>) {
  const { rows } = await sql<{ pid: number }>`select listener_pid as pid from stamp_listeners`.execute(
    database.handle.db,
  );
  return rows;
}

/**
 * A process registered as hearing of cached writes that acknowledges one only when the test says so, as one
 * whose listener is stuck until then: its row names a connection of the test's, which listens on the stamps'
 * channel and keeps the writers' tokens it hears.
 */
async function registerSilentProcess(database: Awaited<ReturnType<typeof createTestDatabase>>) {
  const client = new pg.Client({ connectionString: database.env.DATABASE_URL });
  await client.connect();
  const tokens: string[] = [];
  client.on('notification', (message) => {
    const token = message.payload?.split(' ')[1];
    if (token) tokens.push(token);
  });
  await client.query('LISTEN postwire_cache_stamps');
  await client.query(
    "insert into stamp_listeners (id, listener_pid, expires_at) values ('proc_silent', pg_backend_pid(), now() + interval '1 hour')",
  );
  let left = false;
  return {
    /** The next writer's token heard: its announcement has been committed. */
    heardToken: () => until(() => tokens.shift(), 8000, "a writer's announcement"),
    /** Acknowledges `token` from the registered connection, or from another one. */
    async acknowledge(token: string, from: 'registered' | 'another' = 'registered') {
      if (from === 'registered')
        return void (await client.query("select pg_notify('postwire_cache_acks', $1)", [token]));
      await sql`select pg_notify('postwire_cache_acks', ${token})`.execute(database.handle.db);
    },
    expire: () =>
      client.query(
        "update stamp_listeners set expires_at = now() - interval '1 second' where id = 'proc_silent'",
      ),
    async leave() {
      if (left) return;
      left = true;
      await client.query("delete from stamp_listeners where id = 'proc_silent'");
      await client.end();
    },
  };
}

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
