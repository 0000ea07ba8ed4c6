import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { DEFAULTS } from '../src/config.ts';
import { countArrivals, ENGINES, openOtherConnection, startTestApp, type TestApp } from './helpers/app.ts';

// Group commit (src/db/unit-of-work.ts), through real HTTP against the real server: concurrent sends share
// commits, each 202 comes only once its own email is committed (another connection sees it at that moment),
// a send refused inside a group takes nothing of the others with it, and a failed COMMIT answers 5xx to
// every send in the group, none of which is then stored.

const message = (i: number, to: string | string[] = `user${i}@example.org`) => ({
  from: 'Shop <shop@example.com>',
  to,
  subject: `Receipt #${i}`,
  text: `Receipt ${i}`,
});

for (const engine of ENGINES) {
  describe(`group commit (${engine})`, () => {
    let api: TestApp;
    let other: Awaited<ReturnType<typeof openOtherConnection>>;
    let commits = 0;
    let rollbacks = 0;
    /** Set: the next COMMIT fails (as a full disk or a lost connection would make it). */
    let failNextCommit = false;
    /** Resolves once every request of a burst has arrived, so they line up for the database together. */

    before(async () => {
      api = await startTestApp(engine, {
        sendDailyLimit: 1000,
        // PostgreSQL runs each unit in its own transaction unless asked; asked here, to test it there too,
        // with a window long enough for its slower units to meet in one.
        ...(engine === 'postgres' ? { groupCommit: { ...DEFAULTS.groupCommit, windowMs: 1000 } } : {}),
        observe(sql) {
          if (/^\s*commit/i.test(sql)) {
            commits += 1;
            if (failNextCommit) {
              failNextCommit = false;
              throw new Error('commit failed (test)');
            }
          }
          if (/^\s*rollback/i.test(sql)) rollbacks += 1;
        },
      });
      // Another connection: what it sees is committed.
      other = await openOtherConnection(api);
    });
    after(async () => {
      await other.close();
      await api.close();
    });

    const stored = (id: string) => other.emailStored(id);

    /**
     * Sends the bodies at once. On SQLite the test holds the one connection until all have arrived, so their
     * units queue together. Each answer is checked on arrival: a 202's email must already be committed.
     */
    async function burst(bodies: Array<{ path: string; body: unknown }>) {
      const arrivals = countArrivals(api, bodies.length);
      const gate = arrivals.all;
      const held =
        engine === 'sqlite' ? api.database.handle.db.connection().execute(() => gate) : Promise.resolve();
      const answers = Promise.all(
        bodies.map(async ({ path: url, body }) => {
          const response = await api.request('POST', url, { body });
          const ids: string[] =
            response.status === 202 ? (response.body.data ?? [response.body]).map((e: any) => e.id) : [];
          const durable = await Promise.all(ids.map(stored));
          return { status: response.status, body: response.body, ids, durable };
        }),
      );
      await gate;
      arrivals.stop();
      await held;
      return answers;
    }

    test('concurrent sends share commits, each answered once its own email is committed', async () => {
      const before = commits;
      const answers = await burst(
        Array.from({ length: 12 }, (_, i) => ({ path: '/v1/emails', body: message(i) })),
      );
      for (const answer of answers) {
        assert.equal(answer.status, 202, JSON.stringify(answer.body));
        assert.deepEqual(answer.durable, [true], 'answered 202 before its email was committed');
      }
      assert.ok(commits - before < answers.length, `${commits - before} commits for ${answers.length} sends`);
    });

    test('a send refused inside a group rolls back alone', async () => {
      const before = { commits, rollbacks };
      // The batch passes the daily limit: refused (429) after its rows were written, inside the unit.
      const over = {
        path: '/v1/emails/batch',
        body: Array.from({ length: 100 }, (_, i) => ({
          ...message(
            i,
            Array.from({ length: 11 }, (_, j) => `over${i}-${j}@example.org`),
          ),
        })),
      };
      const bodies: Array<{ path: string; body: unknown }> = Array.from({ length: 10 }, (_, i) => ({
        path: '/v1/emails',
        body: message(100 + i),
      }));
      bodies.splice(3, 0, over);
      const answers = await burst(bodies);
      const refused = answers[3]!;
      assert.equal(refused.status, 429, JSON.stringify(refused.body));
      assert.equal(refused.body.error.code, 'daily_send_limit');
      const accepted = answers.filter((_, index) => index !== 3);
      for (const answer of accepted) {
        assert.equal(answer.status, 202, JSON.stringify(answer.body));
        assert.deepEqual(answer.durable, [true]);
      }
      assert.ok(rollbacks > before.rollbacks, 'the refused send rolled back');
      assert.ok(commits - before.commits < accepted.length, `${commits - before.commits} commits`);
      const overRows = await other.db
        .selectFrom('email_recipients')
        .select('id')
        .where('address', 'like', 'over%')
        .execute();
      assert.equal(overRows.length, 0, 'nothing of the refused batch is stored');
    });

    test('a failed COMMIT answers 5xx to every send in its group, none stored', async () => {
      failNextCommit = true;
      const answers = await burst(
        Array.from({ length: 8 }, (_, i) => ({ path: '/v1/emails', body: message(200 + i) })),
      );
      const failed = answers.filter((answer) => answer.status === 500);
      assert.ok(failed.length >= 1, 'the group whose commit failed answered 500');
      for (const answer of answers) {
        if (answer.status === 202) assert.deepEqual(answer.durable, [true]);
        else assert.equal(answer.status, 500, JSON.stringify(answer.body));
      }
      // Every email the sends asked for is either answered 202 and stored, or answered 500 and absent.
      const subjects = await other.db
        .selectFrom('emails')
        .select('subject')
        .where('subject', 'like', 'Receipt #2__')
        .execute();
      assert.equal(subjects.length, answers.length - failed.length);
    });
  });
}
