import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ConfigError, DEFAULTS, loadConfig } from '../src/config.ts';
import { inTransaction } from '../src/db/transaction.ts';
import {
  createTestDatabase,
  ALL_ENGINES,
  engineSkip,
  openOtherConnection,
  startTestApp,
  type TestApp,
} from './helpers/app.ts';
import { commitFailure } from './helpers/failing-commit.ts';

// Explicit transactions (src/db/transaction.ts, src/http/idempotency.ts): a POST prepares its work outside
// any transaction (validation, DNS, rendering, reads) and only then writes in one, with its Idempotency-Key
// when it has one. So a webhook create waiting on DNS holds no transaction, and an unrelated send is not kept
// waiting behind it (it was: 1.4 s behind a 1.5 s resolver on SQLite, when the whole request ran in one). A
// write's answer comes after its COMMIT, and a failed COMMIT stores nothing, not even the key. A transaction
// open past TRANSACTION_WARN is reported with the stack that opened it. On SQLite, no query runs inside
// another's transaction.

const message = (i: number) => ({
  from: 'Shop <shop@example.com>',
  to: `user${i}@example.org`,
  subject: `Receipt #${i}`,
  text: `Receipt ${i}`,
});

/** A promise and the function that settles it: the signals the tests wait on instead of time. */
function signal<T = void>(): { promise: Promise<T>; settle: (value: T) => void } {
  let settle!: (value: T) => void;
  const promise = new Promise<T>((resolve) => (settle = resolve));
  return { promise, settle };
}

for (const engine of ALL_ENGINES) {
  describe(`explicit transactions (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let other: Awaited<ReturnType<typeof openOtherConnection>>;
    const slowHost = 'slow-dns.example.com';
    /** Settled when the resolver is asked for slowHost, and the answer it then waits for. */
    let dnsAsked = signal();
    let dnsAnswer = signal();
    /** Set: the next COMMIT fails (as a full disk or a lost connection would make it). */
    const failingCommit = commitFailure();

    before(async () => {
      api = await startTestApp(engine, {
        sendGroups: DEFAULTS.sendGroups,
        resolver: async (hostname) => {
          if (hostname === slowHost) {
            dnsAsked.settle();
            await dnsAnswer.promise;
          }
          return ['93.184.216.34'];
        },
        observe(sql) {
          failingCommit.check(sql);
        },
      });
      other = await openOtherConnection(api);
    });
    after(async () => {
      await other.close();
      await api.close();
    });

    test('a send completes while a webhook create waits on DNS', async () => {
      dnsAsked = signal();
      dnsAnswer = signal();
      let webhookAnswered = false;
      const webhook = api
        .request('POST', '/v1/webhooks', {
          body: { url: `https://${slowHost}/hooks`, events: ['email.sent'] },
          headers: { 'idempotency-key': 'slow-dns-webhook' },
        })
        .finally(() => (webhookAnswered = true));
      await dnsAsked.promise;

      const plain = await api.request('POST', '/v1/emails', { body: message(1) });
      assert.equal(plain.status, 202, JSON.stringify(plain.body));
      const keyed = await api.request('POST', '/v1/emails', {
        body: message(2),
        headers: { 'idempotency-key': 'send-beside-slow-dns' },
      });
      assert.equal(keyed.status, 202, JSON.stringify(keyed.body));
      assert.equal(webhookAnswered, false, 'the webhook create was still waiting on DNS');
      assert.equal(await other.emailStored(plain.body.id), true);
      assert.equal(await other.emailStored(keyed.body.id), true);

      dnsAnswer.settle();
      const created = await webhook;
      assert.equal(created.status, 201, JSON.stringify(created.body));
    });

    test('a keyed send whose COMMIT fails answers 500, stores nothing and leaves its key free', async () => {
      const headers = { 'idempotency-key': 'commit-fails' };
      failingCommit.arm();
      const failed = await api.request('POST', '/v1/emails', { body: message(3), headers });
      assert.equal(failed.status, 500, JSON.stringify(failed.body));
      const stored = () =>
        other.db.selectFrom('emails').select('id').where('subject', '=', 'Receipt #3').execute();
      assert.deepEqual(await stored(), []);
      const retried = await api.request('POST', '/v1/emails', { body: message(3), headers });
      assert.equal(retried.status, 202, JSON.stringify(retried.body));
      assert.equal(retried.headers.get('idempotent-replayed'), null);
      assert.deepEqual(
        (await stored()).map((row) => row.id),
        [retried.body.id],
      );
    });
  });

  describe(`transaction watch (${engine})`, { skip: engineSkip(engine) }, () => {
    test('a transaction open past the bound reports the stack that opened it', async () => {
      const report = signal<{ openMs: number; stack: string }>();
      // Armed once the database is migrated: the migrations' transaction may well pass 1 ms too.
      let armed = false;
      const database = await createTestDatabase(engine, {
        transactionWarnMs: 1,
        onLongTransaction: (reported) => {
          if (armed) report.settle(reported);
        },
      });
      try {
        // Open until its report arrives: the bound is passed by construction, with no clock in the test.
        async function openTheLongTransaction() {
          await inTransaction(database.handle.db, async (transaction) => {
            await transaction.db.selectFrom('projects').select('id').execute();
            await report.promise;
          });
        }
        armed = true;
        await openTheLongTransaction();
        const { openMs, stack } = await report.promise;
        assert.ok(openMs >= 1, `open ${openMs} ms`);
        assert.match(stack, /openTheLongTransaction/);
      } finally {
        await database.drop();
      }
    });
  });
}

describe('transactions on SQLite', () => {
  test("no query runs inside another's transaction on the one connection", async () => {
    const database = await createTestDatabase('sqlite');
    const { db } = database.handle;
    try {
      const order: string[] = [];
      let outside: Promise<number> | undefined;
      await inTransaction(db, async (transaction) => {
        await transaction.db
          .insertInto('projects')
          .values({
            id: 'proj_inside',
            name: 'inside',
            is_default: false,
            created_at: new Date().toISOString(),
          })
          .execute();
        // Asked while the transaction is open and has written: it must wait for the commit, or it would
        // see (and be part of) the uncommitted row.
        outside = db
          .selectFrom('projects')
          .select('id')
          .where('id', '=', 'proj_inside')
          .execute()
          .then((rows) => {
            order.push('outside');
            return rows.length;
          });
        // More queries of the transaction: every await is a turn in which the outside one could run.
        for (let i = 0; i < 5; i += 1) await transaction.db.selectFrom('projects').select('id').execute();
        order.push('commit');
      });
      assert.equal(await outside, 1, 'the outside query saw the committed row');
      assert.deepEqual(order, ['commit', 'outside']);
    } finally {
      await database.drop();
    }
  });
});

describe('TRANSACTION_WARN', () => {
  test('on by default outside production, off or a duration when set', () => {
    assert.equal(loadConfig({}, { stdoutIsTTY: false }).transactionWarnMs, DEFAULTS.transactionWarnMs);
    assert.equal(loadConfig({ NODE_ENV: 'production' }).transactionWarnMs, undefined);
    assert.equal(loadConfig({ NODE_ENV: 'production', TRANSACTION_WARN: '250ms' }).transactionWarnMs, 250);
    assert.equal(loadConfig({ TRANSACTION_WARN: 'off' }).transactionWarnMs, undefined);
    assert.throws(() => loadConfig({ TRANSACTION_WARN: 'soon' }), ConfigError);
  });
});
