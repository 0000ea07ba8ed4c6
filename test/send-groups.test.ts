import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { DEFAULTS } from '../src/config.ts';
import {
  countArrivals,
  ALL_ENGINES,
  engineSkip,
  openOtherConnection,
  startTestApp,
  type TestApp,
} from './helpers/app.ts';
import { commitFailure } from './helpers/failing-commit.ts';

// Sends written in groups (src/modules/emails/send-groups.ts), through real HTTP: concurrent sends are
// written together (fewer INSERTs than sends), each is answered 202 with its own id only once its email is
// committed, a send over its project's daily limit among good ones is refused alone with the usual 429, and
// suppressed recipients get their `email.suppressed` event with their email, and a failed COMMIT answers 500
// to every send of its group, none of which is stored; a group the database refuses half-way (a trigger on
// either engine) is rolled back whole, nothing of any send stored. A send with an Idempotency-Key is written
// in its key's transaction, apart from the groups, and is replayed as usual. (Send groups are the one
// batching layer: the transaction-level group commit they sat on is gone.)

const DAILY_LIMIT = 20;

const message = (i: number, to: string | string[] = `user${i}@example.org`) => ({
  from: 'Shop <shop@example.com>',
  to,
  subject: `Receipt #${i}`,
  text: `Receipt ${i}`,
});

interface Send {
  body: unknown;
  key?: string;
  headers?: Record<string, string>;
}

/**
 * A group's one statement on PostgreSQL, autocommitted (send-store.ts): its emails' INSERT is a part of it,
 * the first without a daily limit, after the count with one (and the suppression list's guard before it).
 */
const GROUP_STATEMENT =
  /^\s*with (?:part0 as \(select id from suppressions [\s\S]*?\), )?(?:part\d as \(insert into send_quota [\s\S]*?\), )?part\d as \(insert into emails /i;

/**
 * Whether a statement writes more than one email: a multi-row INSERT's text (`…), (…`), or on PostgreSQL the
 * group's statement, whose rows are arrays (one per column, so its text is the same for any number of rows):
 * ids of more than one email among them.
 */
const ofManyEmails = (text: string, parameters: readonly unknown[]): boolean =>
  parameters.some(Array.isArray)
    ? parameters.some(
        (value) =>
          Array.isArray(value) &&
          value.every((id) => typeof id === 'string' && id.startsWith('msg_')) &&
          new Set(value).size > 1,
      )
    : text.includes('), (');

// Each engine with a daily limit, and PostgreSQL without one: on PostgreSQL a group of one project's sends is
// one autocommitted statement either way.
const SUITES = [
  ...ALL_ENGINES.map((engine) => ({ engine, dailyLimit: DAILY_LIMIT })),
  { engine: 'postgres' as const, dailyLimit: 0 },
];

for (const { engine, dailyLimit } of SUITES) {
  const name = dailyLimit > 0 ? engine : `${engine}, no daily limit`;
  /** Whether a group (of one project's sends) is one autocommitted statement (send-store.ts). */
  const autocommittedGroups = engine === 'postgres';
  describe(`send groups (${name})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let other: Awaited<ReturnType<typeof openOtherConnection>>;
    let emailInserts = 0;
    /** INSERTs of more than one email: sends written together. */
    let groupedInserts = 0;
    let rollbacks = 0;
    /**
     * Set: the next COMMIT fails (as a full disk or a lost connection would make it), or on PostgreSQL the
     * group's statement, which is its own commit.
     */
    const failingCommit = commitFailure(
      autocommittedGroups ? new RegExp(`^\\s*commit|${GROUP_STATEMENT.source}`, 'i') : undefined,
    );
    /** Set: the next statement of many sends is refused by the database (as a serialization failure would be). */
    let refuseNext = false;

    before(async () => {
      api = await startTestApp(engine, {
        sendDailyLimit: dailyLimit,
        sendGroups: DEFAULTS.sendGroups,
        observe(text, _connection, parameters) {
          // Alone, or as the first part of one statement with the recipients and the count (PostgreSQL).
          if (/^\s*insert into "?emails"? /i.test(text) || GROUP_STATEMENT.test(text)) {
            emailInserts += 1;
            if (ofManyEmails(text, parameters)) groupedInserts += 1;
          }
          if (/^\s*rollback/i.test(text)) rollbacks += 1;
          if (refuseNext && GROUP_STATEMENT.test(text) && ofManyEmails(text, parameters)) {
            refuseNext = false;
            // As pg reports the database's refusal: a SQLSTATE and a severity.
            throw Object.assign(new Error('could not serialize access (test)'), {
              code: '40001',
              severity: 'ERROR',
            });
          }
          failingCommit.check(text);
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
     * Sends the first, then the others once it has arrived, holding its write back until every request has
     * arrived, so the others wait for it and are written together after it: SQLite's one connection is held;
     * on PostgreSQL the projects' daily count rows are locked from another connection. A 202's email must be
     * committed on arrival.
     */
    async function burst(sends: Send[], projectIds: string[]) {
      const arrivals = countArrivals(api, sends.length);
      const gate = arrivals.all;
      let held: Promise<unknown>;
      if (engine === 'sqlite') {
        held = api.database.handle.db.connection().execute(() => gate);
      } else {
        const day = new Date().toISOString().slice(0, 10);
        const shards = projectIds.flatMap((projectId) =>
          Array.from({ length: 8 }, (_, shard) => ({ project_id: projectId, day, shard, used: 0 })),
        );
        await other.db
          .insertInto('send_quota')
          .values(shards)
          .onConflict((conflict) => conflict.doNothing())
          .execute();
        let locked!: () => void;
        const lockTaken = new Promise<void>((resolve) => (locked = resolve));
        held = other.db.transaction().execute(async (trx) => {
          await sql`SELECT used FROM send_quota WHERE project_id IN (${sql.join(projectIds)}) FOR UPDATE`.execute(
            trx,
          );
          locked();
          await gate;
        });
        await lockTaken;
      }
      const send = async ({ body, key, headers }: Send) => {
        const response = await api.request('POST', '/v1/emails', {
          body,
          ...(key ? { key } : {}),
          ...(headers ? { headers } : {}),
        });
        const durable = response.status === 202 ? await stored(response.body.id) : false;
        return { status: response.status, body: response.body, headers: response.headers, durable };
      };
      const firstAnswer = send(sends[0]!);
      await arrivals.first;
      const answers = Promise.all([firstAnswer, ...sends.slice(1).map(send)]);
      await gate;
      arrivals.stop();
      await held;
      return answers;
    }

    test('concurrent sends are written together, each answered 202 with its own id once committed', async () => {
      const before = emailInserts;
      const answers = await burst(
        Array.from({ length: 12 }, (_, i) => ({ body: message(i) })),
        [api.projectId],
      );
      for (const answer of answers) {
        assert.equal(answer.status, 202, JSON.stringify(answer.body));
        assert.equal(answer.durable, true, 'answered 202 before its email was committed');
      }
      const ids = answers.map((answer) => answer.body.id);
      assert.equal(new Set(ids).size, ids.length, 'each send has its own id');
      for (const [i, id] of ids.entries()) {
        const email = await api.request('GET', `/v1/emails/${id}`);
        assert.equal(email.body.subject, `Receipt #${i}`);
        assert.deepEqual(
          email.body.recipients.map((r: any) => [r.address, r.status]),
          [[`user${i}@example.org`, 'queued']],
        );
      }
      assert.ok(emailInserts - before < answers.length, `${emailInserts - before} INSERTs for 12 sends`);
      assert.ok(groupedInserts > 0);
    });

    test('a failed COMMIT answers 500 to every send in its group, none stored', async () => {
      const project = await api.createProject('Failing commit');
      failingCommit.arm();
      const answers = await burst(
        Array.from({ length: 8 }, (_, i) => ({ body: message(200 + i), key: project.key })),
        [project.projectId],
      );
      const failed = answers.filter((answer) => answer.status === 500);
      assert.ok(failed.length >= 1, 'the group whose commit failed answered 500');
      for (const answer of answers) {
        if (answer.status === 202) assert.equal(answer.durable, true);
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

    test('a group the database refuses half-way is rolled back whole, each send answered 500, none stored', async () => {
      const project = await api.createProject('Refused half-way');
      // The database itself refuses these recipients' rows: a trigger, as a constraint would, after the
      // group's emails are written (on PostgreSQL by the same statement, on SQLite in the same transaction).
      // Every send has such a recipient, so every one fails in its group and again alone.
      const refusedDomain = 'refused.example.org';
      if (engine === 'sqlite') {
        await sql
          .raw(
            `CREATE TRIGGER refuse_test_recipients BEFORE INSERT ON email_recipients
             WHEN NEW.address LIKE '%@${refusedDomain}'
             BEGIN SELECT RAISE(ABORT, 'recipient refused (test)'); END`,
          )
          .execute(other.db);
      } else {
        await sql
          .raw(
            `CREATE FUNCTION refuse_test_recipients() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.address LIKE '%@${refusedDomain}' THEN RAISE EXCEPTION 'recipient refused (test)'; END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_test_recipients BEFORE INSERT ON email_recipients
               FOR EACH ROW EXECUTE FUNCTION refuse_test_recipients()`,
          )
          .execute(other.db);
      }
      try {
        const before = { groupedInserts, rollbacks, rows: await api.rowCounts() };
        const answers = await burst(
          Array.from({ length: 6 }, (_, i) => ({
            body: message(600 + i, [`user${i}@example.org`, `user${i}@${refusedDomain}`]),
            key: project.key,
          })),
          [project.projectId],
        );
        for (const answer of answers) {
          assert.deepEqual(answer.body, {
            error: {
              code: 'internal_error',
              message: 'Something went wrong on our side; it has been logged.',
              request_id: answer.headers.get('x-request-id'),
            },
          });
          assert.equal(answer.status, 500);
        }
        assert.ok(groupedInserts > before.groupedInserts, 'the sends were written together first');
        // SQLite rolls the group's transaction back; PostgreSQL its one statement, the emails it had written
        // included: either way nothing of any send is stored, neither its email nor its other recipient.
        if (engine === 'sqlite') assert.ok(rollbacks > before.rollbacks, 'the group rolled back');
        const { send_quota: _quotaBefore, ...rowsBefore } = before.rows;
        const { send_quota: _quotaAfter, ...rowsAfter } = await api.rowCounts();
        assert.deepEqual(rowsAfter, rowsBefore, 'nothing stored');
        const written = await other.db
          .selectFrom('emails')
          .select('id')
          .where('subject', 'like', 'Receipt #6__')
          .execute();
        assert.deepEqual(written, []);
        const counted = await other.db
          .selectFrom('send_quota')
          .select((eb) => eb.fn.sum<number | string | null>('used').as('used'))
          .where('project_id', '=', project.projectId)
          .executeTakeFirstOrThrow();
        assert.equal(Number(counted.used ?? 0), 0, 'no send counted against the daily limit');
      } finally {
        await sql
          .raw('DROP TRIGGER refuse_test_recipients' + (engine === 'sqlite' ? '' : ' ON email_recipients'))
          .execute(other.db);
        if (engine !== 'sqlite') await sql.raw('DROP FUNCTION refuse_test_recipients()').execute(other.db);
      }
    });

    test(
      'a group statement refused by the database stores each send alone',
      { skip: !autocommittedGroups && 'a group is autocommitted on PostgreSQL only' },
      async () => {
        const project = await api.createProject('Refused group');
        refuseNext = true;
        const answers = await burst(
          Array.from({ length: 6 }, (_, i) => ({ body: message(500 + i), key: project.key })),
          [project.projectId],
        );
        assert.equal(refuseNext, false, 'a group statement was refused');
        for (const answer of answers) {
          assert.equal(answer.status, 202, JSON.stringify(answer.body));
          assert.equal(answer.durable, true);
        }
      },
    );

    test(
      'a send over its daily limit among good ones is refused alone, the others stored',
      {
        skip: dailyLimit === 0 && 'no daily limit',
      },
      async () => {
        const good = await api.createProject('Good');
        const full = await api.createProject('Full');
        const filled = await api.request('POST', '/v1/emails', {
          key: full.key,
          body: message(
            0,
            Array.from({ length: DAILY_LIMIT }, (_, j) => `fill${j}@example.org`),
          ),
        });
        assert.equal(filled.status, 202);
        const before = { groupedInserts, rollbacks };
        const sends: Send[] = Array.from({ length: 8 }, (_, i) => ({
          body: message(100 + i),
          key: good.key,
        }));
        sends.splice(3, 0, { body: message(99, 'over@example.org'), key: full.key });
        const answers = await burst(sends, [good.projectId, full.projectId]);
        const refused = answers[3]!;
        assert.equal(refused.status, 429, JSON.stringify(refused.body));
        assert.deepEqual(refused.body, {
          error: {
            code: 'daily_send_limit',
            message: `This project may send to ${DAILY_LIMIT} recipients a day (UTC); ${DAILY_LIMIT} are used and this request has 1. The limit resets at midnight UTC.`,
            request_id: refused.headers.get('x-request-id'),
          },
        });
        const retryAfter = Number(refused.headers.get('retry-after'));
        assert.ok(retryAfter >= 1 && retryAfter <= 86_400, String(retryAfter));
        for (const answer of answers.filter((_, index) => index !== 3)) {
          assert.equal(answer.status, 202, JSON.stringify(answer.body));
          assert.equal(answer.durable, true);
        }
        const over = await other.db
          .selectFrom('email_recipients')
          .select('id')
          .where('address', '=', 'over@example.org')
          .execute();
        assert.equal(over.length, 0, 'nothing of the refused send is stored');
        const counted = await other.db
          .selectFrom('send_quota')
          .select((eb) => eb.fn.sum<number | string>('used').as('used'))
          .where('project_id', '=', good.projectId)
          .executeTakeFirstOrThrow();
        assert.equal(Number(counted.used), 8, 'each good send counted once');
        // The sends after the first were tried together, refused, and stored one by one. A group is refused
        // by a rollback, or on PostgreSQL, when the sends that met in it were of one project (a loaded
        // machine groups them so), by its one statement writing nothing: both store nothing (asserted above).
        assert.ok(groupedInserts > before.groupedInserts, 'the sends were written together first');
        if (engine === 'sqlite') assert.ok(rollbacks > before.rollbacks, 'the group rolled back');
      },
    );

    test('suppressed recipients in a group are stored suppressed, with their event', async () => {
      const project = await api.createProject('Suppressing');
      const added = await api.request('POST', '/v1/suppressions', {
        key: project.key,
        body: { addresses: ['gone@example.org'] },
      });
      assert.equal(added.status, 201);
      // The same address in another project is not suppressed there.
      const sends: Send[] = [
        { body: message(300, ['gone@example.org', 'here@example.org']), key: project.key },
        { body: message(301, 'GONE@example.org'), key: project.key },
        { body: message(302, 'gone@example.org') },
        { body: message(303, 'here@example.org'), key: project.key },
      ];
      const answers = await burst(sends, [project.projectId, api.projectId]);
      for (const answer of answers) assert.equal(answer.status, 202, JSON.stringify(answer.body));
      const view = async (index: number, key?: string) =>
        (await api.request('GET', `/v1/emails/${answers[index]!.body.id}`, key ? { key } : {})).body;
      const mixed = await view(0, project.key);
      assert.equal(mixed.status, 'queued');
      assert.deepEqual(
        mixed.recipients.map((r: any) => [r.address, r.status]),
        [
          ['gone@example.org', 'suppressed'],
          ['here@example.org', 'queued'],
        ],
      );
      assert.deepEqual(
        mixed.events.map((e: any) => [e.type, e.recipient]),
        [['email.suppressed', 'gone@example.org']],
      );
      const all = await view(1, project.key);
      assert.equal(all.status, 'suppressed');
      assert.deepEqual(
        all.events.map((e: any) => [e.type, e.recipient]),
        [['email.suppressed', 'GONE@example.org']],
      );
      const elsewhere = await view(2);
      assert.deepEqual(
        elsewhere.recipients.map((r: any) => r.status),
        ['queued'],
      );
      assert.deepEqual(elsewhere.events, []);
      assert.deepEqual((await view(3, project.key)).events, []);
    });

    test("a send with an Idempotency-Key among grouped ones is written in its key's transaction and replayed", async () => {
      const keyed: Send = { body: message(400), headers: { 'idempotency-key': 'send-groups-1' } };
      const answers = await burst(
        [{ body: message(401) }, keyed, { body: message(402) }, { body: message(403) }],
        [api.projectId],
      );
      for (const answer of answers) {
        assert.equal(answer.status, 202, JSON.stringify(answer.body));
        assert.equal(answer.durable, true);
      }
      const again = await api.request('POST', '/v1/emails', keyed);
      assert.equal(again.status, 202);
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.equal(again.body.id, answers[1]!.body.id);
    });
  });
}
