import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { runCli } from '../src/cli.ts';
import { loadConfig } from '../src/config.ts';
import { idAt, newId } from '../src/lib/ids.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import { createRetention } from '../src/modules/retention/retention.ts';
import { createReceivedRepo } from '../src/modules/inbound/received.repo.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, ENGINES, startTestApp, type TestApp } from './helpers/app.ts';
import { contactImportWorker, uploadImport } from './helpers/contact-imports.ts';
import { attemptsIn } from './helpers/deliveries.ts';
import { createProcessDatabase } from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';
import { inTransaction } from '../src/db/transaction.ts';
import { startConfiguredSendingWorker } from './helpers/sending.ts';

// RETENTION: what is older goes (events with their deliveries and attempts, stored MIME, attachments, tracking
// rows, received reports), a batch at a time; emails, recipients and suppressions stay. Time is the injected
// clock's: the pruner is told it is a month later.

/** A file larger than one message piece (256 KiB), as base64. */
const LARGE_FILE = randomBytes(300 * 1024).toString('base64');
const DAY = 86_400_000;
const at = (ms: number) => ({ now: () => new Date(ms) });

for (const engine of ALL_ENGINES) {
  describe(`retention (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let receiver: Receiver;
    let worker: SendingWorker;
    const sent: string[] = [];

    const count = async (table: 'events' | 'deliveries' | 'delivery_attempts' | 'email_raw' | 'emails') =>
      Number(
        (
          await api.database.handle.db
            .selectFrom(table)
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );

    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true, worker: true });
      receiver = await startReceiver();
      await api.request('POST', '/v1/webhooks', { body: { url: receiver.url, events: EVENT_KIND_NAMES } });
      worker = await startConfiguredSendingWorker(api, loadConfig({}));
      for (const to of ['ada@example.org', 'bob@example.org', 'eve@example.org']) {
        // Ada's receipt comes with a scan larger than a piece: kept in message_pieces, and its MIME too.
        const scan = to.startsWith('ada') ? [{ filename: 'scan.bin', content: LARGE_FILE }] : [];
        const response = await api.request('POST', '/v1/emails', {
          body: {
            from: 'shop@example.com',
            to,
            subject: 'Receipt',
            text: 'Thanks',
            attachments: [{ filename: 'r.txt', content: 'VGhhbmtz' }, ...scan],
          },
        });
        assert.equal(response.status, 202);
        sent.push(response.body.id);
      }
      // Each email is sent and delivered (two events each), and every delivery has reached the receiver.
      await receiver.waitFor(6, 10_000);
      await until(async () => (await count('email_raw')) === 3, 8000, 'the captured MIME');
      // Received is not yet recorded: outcomes are written in batches.
      await until(
        async () =>
          (await api.database.handle.db
            .selectFrom('deliveries')
            .select('id')
            .where('status', '=', 'pending')
            .executeTakeFirst()) === undefined,
        8000,
        'every delivery to be recorded',
      );
    });

    after(async () => {
      await worker?.stop();
      await receiver?.close();
      await api?.close();
    });

    test('nothing is younger than the retention: nothing goes', async () => {
      const retention = createRetention({
        repositories: api.services.repositories,
        clock: at(Date.now() + 29 * DAY),
        retentionMs: 30 * DAY,
        // The API logs' own retention (7 days by default) is API_LOG_RETENTION's test (api-logs.test.ts).
        apiLogs: { retentionMs: 30 * DAY, maxRows: 10_000 },
      });
      for (const { table, rows } of await retention.dryRun()) assert.equal(rows, 0, table);
    });

    test('a month later: events, deliveries, attempts, MIME and attachments go, in batches; emails stay', async () => {
      // One event whose delivery still waits: it stays, whatever its age. Its next attempt is far ahead, so
      // the running delivery worker does not attempt it again meanwhile (a new attempt row would be counted).
      const waiting = await api.database.handle.db
        .selectFrom('deliveries')
        .select(['id', 'event_id'])
        .limit(1)
        .executeTakeFirstOrThrow();
      await api.database.handle.db
        .updateTable('deliveries')
        .set({ status: 'pending', next_attempt_at: new Date(Date.now() + 365 * DAY).toISOString() })
        .where('id', '=', waiting.id)
        .execute();

      const retention = createRetention({
        repositories: api.services.repositories,
        clock: at(Date.now() + 31 * DAY),
        retentionMs: 30 * DAY,
        batchSize: 2,
      });
      const counted = Object.fromEntries(
        (await retention.dryRun()).map((entry) => [entry.table, entry.rows]),
      );
      assert.equal(counted.events, 5, 'six events, one still being delivered');
      // Each delivery was attempted once, and its row keeps that attempt (it goes with the event): none logged apart.
      assert.equal(counted.delivery_attempts, 0);
      assert.equal(counted.email_raw, 3);
      assert.equal(counted.email_attachments, 4);
      const pieces = (kind: string) =>
        api.database.handle.db
          .selectFrom('message_pieces')
          .select('owner')
          .where('owner', 'like', `${kind}:%`)
          .execute();
      assert.equal((await pieces('attachment')).length, 2, "the scan's two pieces");
      assert.equal((await pieces('capture')).length, 2, "its MIME's two pieces");

      const pruned = Object.fromEntries((await retention.prune()).map((entry) => [entry.table, entry.rows]));
      assert.equal(pruned.events, 5);
      assert.equal(pruned.delivery_attempts, 0);
      assert.deepEqual(
        (await attemptsIn(api.database.handle)).map((attempt) => attempt.delivery_id),
        [waiting.id],
        'only the waiting delivery, and the attempt its row keeps, are left',
      );
      assert.equal(pruned.email_raw, 3);
      for (const { table, rows } of await retention.dryRun()) assert.equal(rows, 0, table);
      assert.deepEqual(await pieces('attachment'), [], "the scan's pieces went with its row");
      assert.deepEqual(await pieces('capture'), []);

      assert.equal(await count('events'), 1);
      assert.equal(await count('deliveries'), 1, 'the waiting one');
      assert.equal(await count('emails'), 3, 'emails stay');
      const email = await api.request('GET', `/v1/emails/${sent[0]}`);
      assert.equal(email.status, 200);
      assert.equal(email.body.recipients[0].status, 'delivered');
      assert.deepEqual(email.body.attachments, []);
    });

    test('a month later: received mail goes, its received emails first, then the message and its bytes', async () => {
      const db = api.database.handle.db;
      const project = await db.selectFrom('projects').select('id').executeTakeFirstOrThrow();
      const inboundId = await api.services.inbound.store({
        receivedAt: new Date().toISOString(),
        mailFrom: 'zoe@customer.example',
        rcptTo: ['support@acme.test'],
        remoteAddress: '127.0.0.1',
        raw: Buffer.from('From: zoe@customer.example\r\nSubject: Hi\r\n\r\nHello\r\nthere\r\n'),
      });
      await db
        .updateTable('inbound_messages')
        .set({ status: 'received', kind: 'received' })
        .where('id', '=', inboundId)
        .execute();
      await inTransaction(db, (transaction) =>
        createReceivedRepo(db).insert(
          [
            {
              id: newId('rcv'),
              projectId: project.id,
              inboundId,
              routeId: null,
              recipient: 'support@acme.test',
              mailboxHash: null,
              receivedAt: new Date().toISOString(),
              mailFrom: 'zoe@customer.example',
              fromAddress: 'zoe@customer.example',
              subject: 'Hi',
              messageId: null,
              inReplyToEmailId: null,
              inReplyToRecipient: null,
              status: 'received',
              size: 60,
              attachmentCount: 0,
              content: { readable: false, reason: 'a test row', subject: 'Hi' },
              authentication: null,
              spam: null,
              createdAt: new Date().toISOString(),
            },
          ],
          transaction,
        ),
      );
      const retention = createRetention({
        repositories: api.services.repositories,
        clock: at(Date.now() + 31 * DAY),
        retentionMs: 30 * DAY,
        batchSize: 2,
      });
      const counted = Object.fromEntries(
        (await retention.dryRun()).map((entry) => [entry.table, entry.rows]),
      );
      assert.deepEqual([counted.received_emails, counted.inbound_raw, counted.inbound_messages], [1, 1, 1]);
      await retention.prune();
      for (const table of ['received_emails', 'inbound_raw', 'inbound_messages'] as const) {
        const left = await db
          .selectFrom(table)
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .executeTakeFirstOrThrow();
        assert.equal(Number(left.n), 0, table);
      }
    });

    test('a month later: finished contact imports go; one still queued stays, with its CSV', async () => {
      const importer = contactImportWorker(api);
      await importer.start();
      const done = await uploadImport(api, 'email,first_name\r\nzoe@example.org,Zoë\r\nnot-an-address,X\r\n');
      assert.equal(done.status, 202, JSON.stringify(done.body));
      await importer.whenIdle();
      await importer.stop();
      const finished = await api.request('GET', `/v1/contacts/imports/${done.body.id}`);
      assert.equal(finished.body.status, 'completed');
      // No worker now: this one waits, its CSV in message_pieces.
      const waiting = await uploadImport(api, 'email\r\nyann@example.org\r\n');
      assert.equal(waiting.status, 202, JSON.stringify(waiting.body));

      const retention = createRetention({
        repositories: api.services.repositories,
        clock: at(Date.now() + 31 * DAY),
        retentionMs: 30 * DAY,
      });
      const counted = Object.fromEntries(
        (await retention.dryRun()).map((entry) => [entry.table, entry.rows]),
      );
      assert.equal(counted.contact_imports, 1);
      await retention.prune();
      assert.equal((await api.request('GET', `/v1/contacts/imports/${done.body.id}`)).status, 404);
      assert.equal(
        (await api.request('GET', `/v1/contacts/imports/${waiting.body.id}`)).body.status,
        'queued',
      );
      // The imported contact stays; the queued import still runs once a worker takes it.
      assert.equal((await api.request('GET', '/v1/contacts/zoe@example.org')).status, 200);
      await importer.start();
      await importer.whenIdle();
      await importer.stop();
      assert.equal(
        (await api.request('GET', `/v1/contacts/imports/${waiting.body.id}`)).body.status,
        'completed',
      );
      assert.equal((await api.request('GET', '/v1/contacts/yann@example.org')).status, 200);
    });
  });
}

test('postwire prune --dry-run counts, postwire prune deletes; RETENTION=off and bad values', async () => {
  const own = await createProcessDatabase(ENGINES[0]!);
  try {
    const db = own.database.handle.db;
    const project = await db.selectFrom('projects').select('id').executeTakeFirst();
    const projectId =
      project?.id ??
      (
        await db
          .insertInto('projects')
          .values({
            id: idAt('proj', new Date()),
            name: 'p',
            is_default: true,
            created_at: new Date().toISOString(),
          })
          .returning('id')
          .executeTakeFirstOrThrow()
      ).id;
    const old = new Date(Date.now() - 40 * DAY);
    await db
      .insertInto('events')
      .values({
        id: idAt('evt', old),
        project_id: projectId,
        type: 'email.sent',
        data: '{}',
        created_at: old.toISOString(),
        email_id: null,
      })
      .execute();
    const output: string[] = [];
    const io = {
      stdout: { write: (text: string) => output.push(text) },
      stderr: { write: (text: string) => output.push(text) },
      env: own.env,
    };
    const rowsOf = async (args: string[]) => {
      output.length = 0;
      assert.equal(await runCli(args, io), 0, output.join(''));
      return Object.fromEntries(
        (JSON.parse(output.join('')) as Array<{ table: string; rows: number }>).map((e) => [e.table, e.rows]),
      );
    };
    assert.equal((await rowsOf(['prune', '--dry-run', '--json'])).events, 1);
    assert.equal((await rowsOf(['prune', '--json'])).events, 1);
    assert.equal((await rowsOf(['prune', '--dry-run', '--json'])).events, 0);

    output.length = 0;
    assert.equal(await runCli(['prune'], { ...io, env: { ...own.env, RETENTION: 'off' } }), 0);
    assert.match(output.join(''), /RETENTION is off/);
    assert.throws(() => loadConfig({ RETENTION: '10m' }), /RETENTION must be a duration of at least 1h/);
    assert.equal(loadConfig({}).retentionMs, 30 * DAY);
  } finally {
    await own.cleanup();
  }
});
