import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { openDatabase } from '../src/db/connection.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { copySqliteToPostgres } from '../src/ops/copy-to.ts';
import { engineSkip } from './helpers/app.ts';
import { runCliInProcess } from './helpers/cli-in-process.ts';
import { waitForEvent } from './helpers/engagement.ts';
import {
  requestJson,
  runCli,
  type ServerProcess,
  startServerProcess,
  startWorkerProcess,
} from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { startSmtpServer } from './helpers/smtp.ts';

const KEY = 'pw_db_tools_test_key_0123456789abcdef';
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const run = promisify(execFile);
const postgresOnly = { skip: engineSkip('postgres') };

const call = (base: string, method: string, route: string, body?: unknown) =>
  requestJson(`${base}/v1${route}`, KEY, method, body);

function temporaryDir(t: { after(fn: () => void): void }, prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Stops the processes at the end of the test, whatever happened. */
function track(t: { after(fn: () => Promise<unknown>): void }): (process: ServerProcess) => ServerProcess {
  const running: ServerProcess[] = [];
  t.after(async () => {
    for (const process of running) process.kill();
    await Promise.all(running.map((process) => process.exited));
  });
  return (process) => {
    running.push(process);
    return process;
  };
}

/** A new, empty PostgreSQL database of the test's own (a whole database: what copy-to and pg_restore fill). */
async function createPostgresDatabase(t: { after(fn: () => Promise<unknown>): void }): Promise<string> {
  const admin = process.env.TEST_DATABASE_URL!;
  const name = `pw_tools_${randomBytes(5).toString('hex')}`;
  await run('createdb', [`--maintenance-db=${admin}`, name]);
  t.after(async () => {
    const client = new pg.Client({ connectionString: admin });
    await client.connect();
    try {
      await client.query(`drop database if exists ${name} with (force)`);
    } finally {
      await client.end();
    }
  });
  const url = new URL(admin);
  url.pathname = `/${name}`;
  return url.toString();
}

/** The signed webhook request for this event, checked with the Standard Webhooks library and the secret. */
async function verifiedEvent(receiver: Receiver, predicate: (event: any) => boolean): Promise<any> {
  const event = await waitForEvent(receiver, predicate, 20_000);
  const request = receiver.requests.find((candidate) => JSON.parse(candidate.body).id === event.id)!;
  return new Webhook(SECRET).verify(request.body, request.headers as Record<string, string>);
}

describe('postwire backup (SQLite)', () => {
  test('copies the database while the server writes, with its key file; the copy restores, reads and signs', async (t) => {
    const receiver = await startReceiver();
    t.after(() => receiver.close());
    const started = track(t);
    const dataDir = temporaryDir(t, 'postwire-backup-live-');
    const backups = temporaryDir(t, 'postwire-backups-');
    const env = {
      POSTWIRE_DATA_DIR: dataDir,
      POSTWIRE_BOOTSTRAP_KEY: KEY,
      POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
    };
    const server = started(await startServerProcess(env, ['src/cli.ts', 'serve']));
    const webhook = await call(server.url, 'POST', '/webhooks', {
      url: receiver.url,
      events: ['email.sent'],
      secret: SECRET,
    });
    assert.equal(webhook.status, 201);

    // A writer that keeps committing while the backup runs: the copy must be the database as of one commit,
    // so the templates it holds are exactly the first ones created.
    const written: string[] = [];
    let writing = true;
    let enough: () => void = () => {};
    const warmedUp = new Promise<void>((resolve) => (enough = resolve));
    const writer = (async () => {
      while (writing) {
        const created = await call(server.url, 'POST', '/templates', {
          name: `t${written.length}`,
          html: '<p>{{ name }}</p>',
        });
        assert.equal(created.status, 201);
        written.push(created.body.id);
        if (written.length === 3) enough();
      }
    })();
    await warmedUp;
    const file = path.join(backups, 'postwire-backup.db');
    const backup = await runCli(['backup', file], { POSTWIRE_DATA_DIR: dataDir });
    writing = false;
    await writer;
    assert.equal(backup.code, 0, backup.stderr);
    assert.match(backup.stdout, /Backed up the database to .*postwire-backup\.db/);
    assert.match(backup.stdout, /Copied the encryption key file to .*postwire-backup\.db\.key/);
    assert.match(backup.stdout, /the key opens the secrets stored in the backup/);
    for (const copied of [file, `${file}.key`]) assert.equal(statSync(copied).mode & 0o777, 0o600, copied);
    assert.equal(
      readFileSync(`${file}.key`, 'utf8'),
      readFileSync(path.join(dataDir, 'encryption.key'), 'utf8'),
    );
    assert.equal(server.child.exitCode, null, 'the server kept running');

    const again = await runCli(['backup', file], { POSTWIRE_DATA_DIR: dataDir });
    assert.equal(again.code, 1);
    assert.match(again.stderr, /already exists; a backup never overwrites a file/);

    // With the key in the environment the backup holds no key file, and says where the key is.
    const key = readFileSync(path.join(dataDir, 'encryption.key'), 'utf8').trim();
    const envFile = path.join(backups, 'with-env-key.db');
    const withEnvKey = await runCli(['backup', envFile], {
      POSTWIRE_DATA_DIR: dataDir,
      POSTWIRE_ENCRYPTION_KEY: key,
    });
    assert.equal(withEnvKey.code, 0, withEnvKey.stderr);
    assert.match(withEnvKey.stderr, /POSTWIRE_ENCRYPTION_KEY, so it is not in the backup/);
    assert.equal(existsSync(`${envFile}.key`), false);

    // Restored as docs/operations.md says: the two files into an empty data directory.
    const restoredDir = temporaryDir(t, 'postwire-restored-');
    copyFileSync(file, path.join(restoredDir, 'postwire.db'));
    copyFileSync(`${file}.key`, path.join(restoredDir, 'encryption.key'));
    assert.equal(await server.stop(), 0);
    const restored = started(
      await startServerProcess({ ...env, POSTWIRE_DATA_DIR: restoredDir }, ['src/cli.ts', 'serve']),
    );
    const copied = new DatabaseSync(file, { readOnly: true });
    const inBackup = (
      copied.prepare('select id from templates order by id').all() as Array<{ id: string }>
    ).map((row) => row.id);
    copied.close();
    assert.ok(inBackup.length >= 3, `${inBackup.length} templates`);
    assert.deepEqual(inBackup, written.slice(0, inBackup.length), 'exactly the first templates written');
    const last = await call(restored.url, 'GET', `/templates/${inBackup.at(-1)}`);
    assert.equal(last.status, 200);
    const hook = await call(restored.url, 'GET', `/webhooks/${webhook.body.data.id}`);
    assert.equal(hook.body.data.has_secret, true);
    const tested = await call(restored.url, 'POST', `/webhooks/${webhook.body.data.id}/test`, {});
    assert.equal(tested.status, 200, JSON.stringify(tested.body));
    await verifiedEvent(receiver, () => true);
  });

  test('into a folder that does not exist: one line naming the folder, exit 1, no folder made', async (t) => {
    const dataDir = temporaryDir(t, 'postwire-backup-missing-');
    // Refusals in this process (the backup above is a process's, beside a server's): the same answers.
    const migrated = await runCliInProcess(['migrate'], { POSTWIRE_DATA_DIR: dataDir });
    assert.equal(migrated.code, 0, migrated.stderr);
    const missing = path.join(dataDir, 'backups', 'nightly');
    const result = await runCliInProcess(['backup', path.join(missing, 'postwire.db')], {
      POSTWIRE_DATA_DIR: dataDir,
    });
    assert.equal(result.code, 1);
    assert.equal(
      result.stderr,
      `postwire: the folder ${missing} does not exist; create it first (a backup makes no folders).\n`,
    );
    assert.equal(result.stdout, '');
    assert.equal(existsSync(path.join(dataDir, 'backups')), false);
  });

  test('refuses on PostgreSQL and names pg_dump', async (t) => {
    const dataDir = temporaryDir(t, 'postwire-backup-pg-');
    const result = await runCliInProcess(['backup', path.join(dataDir, 'x.db')], {
      POSTWIRE_DATA_DIR: dataDir,
      DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
    });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /pg_dump/);
  });
});

describe('PostgreSQL backup with pg_dump and restore with pg_restore, as documented', postgresOnly, () => {
  test('a dump taken while the server runs restores into a new database that serves and signs', async (t) => {
    const receiver = await startReceiver();
    t.after(() => receiver.close());
    const started = track(t);
    const workDir = temporaryDir(t, 'postwire-pgdump-');
    const sourceUrl = await createPostgresDatabase(t);
    const env = {
      POSTWIRE_DATA_DIR: workDir,
      POSTWIRE_BOOTSTRAP_KEY: KEY,
      POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
      POSTWIRE_ENCRYPTION_KEY: 'cd'.repeat(32),
    };
    const server = started(
      await startServerProcess({ ...env, DATABASE_URL: sourceUrl }, ['src/cli.ts', 'serve']),
    );
    const webhook = await call(server.url, 'POST', '/webhooks', {
      url: receiver.url,
      events: ['email.sent'],
      secret: SECRET,
    });
    const template = await call(server.url, 'POST', '/templates', { name: 'kept', html: '<p>hi</p>' });
    assert.equal(template.status, 201);

    const dump = path.join(workDir, 'postwire.dump');
    await run('pg_dump', ['--format=custom', `--file=${dump}`, sourceUrl]);
    assert.equal(await server.stop(), 0);
    const restoredUrl = await createPostgresDatabase(t);
    await run('pg_restore', ['--no-owner', '--no-privileges', `--dbname=${restoredUrl}`, dump]);

    const restored = started(
      await startServerProcess({ ...env, DATABASE_URL: restoredUrl }, ['src/cli.ts', 'serve']),
    );
    const kept = await call(restored.url, 'GET', `/templates/${template.body.id}`);
    assert.equal(kept.body.name, 'kept');
    const tested = await call(restored.url, 'POST', `/webhooks/${webhook.body.data.id}/test`, {});
    assert.equal(tested.status, 200, JSON.stringify(tested.body));
    await verifiedEvent(receiver, () => true);
  });
});

describe('postwire copy-to (SQLite → PostgreSQL)', postgresOnly, () => {
  test(
    'copies a used SQLite database; an API process and a worker on the copy list, send and deliver as before',
    { timeout: 120_000 },
    async (t) => {
      const receiver = await startReceiver();
      const smtp = await startSmtpServer();
      t.after(async () => {
        await receiver.close();
        await smtp.close();
      });
      const started = track(t);
      const sqliteDir = temporaryDir(t, 'postwire-copy-source-');
      const common = {
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        SMTP_URL: `smtp://127.0.0.1:${smtp.port}`,
      };

      // Used as one machine uses it: a webhook with a secret, a published template, a sent email with an
      // attachment (bytes), its events and webhook deliveries.
      const single = started(
        await startServerProcess({ ...common, POSTWIRE_DATA_DIR: sqliteDir }, ['src/cli.ts', 'serve']),
      );
      const webhook = await call(single.url, 'POST', '/webhooks', {
        url: receiver.url,
        events: ['email.sent'],
        secret: SECRET,
      });
      assert.equal(webhook.status, 201);
      const template = await call(single.url, 'POST', '/templates', {
        name: 'welcome',
        alias: 'welcome',
        subject: 'Hello {{ name }}',
        html: '<p>Hello {{ name }}</p>',
      });
      assert.equal(
        (await call(single.url, 'POST', `/templates/${template.body.id}/publish`, {})).status,
        200,
      );
      const attachment = randomBytes(3000);
      const first = await call(single.url, 'POST', '/emails', {
        from: 'shop@acme.test',
        to: 'ada@example.org',
        subject: 'Before the move',
        text: 'one machine',
        attachments: [{ filename: 'data.bin', content: attachment.toString('base64') }],
      });
      assert.equal(first.status, 202, JSON.stringify(first.body));
      await smtp.waitFor(1, 20_000);
      await verifiedEvent(receiver, (event) => event.data.email_id === first.body.id);
      // A contact with property values and a boolean (SQLite's 0 and 1, PostgreSQL's boolean).
      const seats = await call(single.url, 'POST', '/contact-properties', { key: 'seats', type: 'number' });
      assert.equal(seats.status, 201);
      const contact = await call(single.url, 'POST', '/contacts', {
        email: 'ada@example.org',
        unsubscribed: true,
        properties: { seats: 3 },
      });
      assert.equal(contact.status, 201, JSON.stringify(contact.body));
      // In a segment, with a choice for a topic.
      const segment = await call(single.url, 'POST', '/segments', { name: 'Movers' });
      assert.equal(segment.status, 201);
      const member = await call(single.url, 'POST', `/contacts/ada@example.org/segments/${segment.body.id}`);
      assert.equal(member.status, 200, JSON.stringify(member.body));
      const topic = await call(single.url, 'POST', '/topics', {
        name: 'News',
        default_subscription: 'opt_in',
      });
      assert.equal(topic.status, 201);
      const choice = await call(single.url, 'PATCH', '/contacts/ada@example.org/topics', {
        topics: [{ id: topic.body.id, subscription: 'opt_out' }],
      });
      assert.equal(choice.status, 200, JSON.stringify(choice.body));
      assert.equal(await single.stop(), 0);

      const targetUrl = await createPostgresDatabase(t);
      const copy = await runCli(['copy-to', targetUrl], { POSTWIRE_DATA_DIR: sqliteDir });
      assert.equal(copy.code, 0, copy.stdout + copy.stderr);
      assert.match(copy.stdout, /^emails\s+1\s+1$/m);
      assert.match(copy.stdout, /^email_attachments\s+1\s+1$/m);
      assert.match(copy.stdout, /^webhooks\s+1\s+1$/m);
      assert.match(copy.stdout, /^contacts\s+1\s+1$/m);
      assert.match(copy.stdout, /^contact_properties\s+1\s+1$/m);
      for (const table of ['segments', 'segment_contacts', 'topics', 'contact_topics']) {
        assert.match(copy.stdout, new RegExp(`^${table}\\s+1\\s+1$`, 'm'));
      }
      assert.match(copy.stdout, /All \d+ tables have the same row counts: the copy is complete\./);
      assert.doesNotMatch(copy.stdout + copy.stderr, /[0-9a-f]{64}/, 'the key itself is never printed');

      // Several machines: an API process and a worker share the copy and the key, as the copy's last line says.
      const key = readFileSync(path.join(sqliteDir, 'encryption.key'), 'utf8').trim();
      const shared = {
        ...common,
        DATABASE_URL: targetUrl,
        POSTWIRE_ENCRYPTION_KEY: key,
        POSTWIRE_DATA_DIR: temporaryDir(t, 'postwire-copy-api-'),
      };
      const api = started(await startServerProcess(shared, ['src/cli.ts', 'serve', '--no-worker']));
      started(
        await startWorkerProcess({ ...shared, POSTWIRE_DATA_DIR: temporaryDir(t, 'postwire-copy-worker-') }),
      );

      const listed = await call(api.url, 'GET', '/emails');
      assert.deepEqual(
        listed.body.data.map((email: { id: string }) => email.id),
        [first.body.id],
      );
      const shown = await call(api.url, 'GET', `/emails/${first.body.id}`);
      assert.equal(shown.body.subject, 'Before the move');
      assert.deepEqual((await call(api.url, 'GET', '/contacts/ada@example.org')).body, contact.body);
      assert.deepEqual((await call(api.url, 'GET', '/contacts/ada@example.org/segments')).body.data, [
        segment.body,
      ]);
      assert.deepEqual(
        (await call(api.url, 'GET', '/contacts/ada@example.org/topics')).body.data,
        choice.body.data,
      );
      const hook = await call(api.url, 'GET', `/webhooks/${webhook.body.data.id}`);
      assert.equal(hook.body.data.has_secret, true);

      const second = await call(api.url, 'POST', '/emails', {
        from: 'shop@acme.test',
        to: 'bob@example.org',
        template: { id: 'welcome', variables: { name: 'Bob' } },
      });
      assert.equal(second.status, 202, JSON.stringify(second.body));
      const [, delivered] = await smtp.waitFor(2, 20_000);
      assert.match(delivered!.raw, /Subject: Hello Bob/);
      // The webhook secret sealed on SQLite, copied as it was, still signs on PostgreSQL.
      const event = await verifiedEvent(receiver, (candidate) => candidate.data.email_id === second.body.id);
      assert.equal((event as any).type, 'email.sent');
      const both = await call(api.url, 'GET', '/emails');
      assert.deepEqual(
        both.body.data.map((email: { id: string }) => email.id),
        [second.body.id, first.body.id],
      );
    },
  );

  test('an interrupted copy continues where it stopped; other targets are refused', async (t) => {
    const sourceDir = temporaryDir(t, 'postwire-resume-');
    const sqlitePath = path.join(sourceDir, 'postwire.db');
    await populate(sqlitePath, 'a');
    const targetUrl = await createPostgresDatabase(t);
    const copy = (options: Partial<Parameters<typeof copySqliteToPostgres>[0]> = {}) =>
      copySqliteToPostgres({ sqlitePath, targetUrl, workerDeadAfterMs: 15_000, batchRows: 2, ...options });
    const stopAt = (stop: (progress: { table: string; rowsCopied: number }) => boolean) => ({
      afterBatch: (progress: { table: string; rowsCopied: number }) => {
        if (stop(progress)) throw new Error('interrupted on purpose');
      },
    });

    // A worker still running on the SQLite file: nothing is copied.
    const source = await openDatabase({ sqlitePath });
    await source.db
      .insertInto('queue_workers')
      .values({ id: 'old-host/1/abc', queue: 'deliveries', heartbeat_at: new Date().toISOString() })
      .execute();
    await assert.rejects(copy(), /a Postwire worker is still running on this database/);
    await source.db
      .updateTable('queue_workers')
      .set({ heartbeat_at: new Date(Date.now() - 3_600_000).toISOString() })
      .execute();
    await source.close();

    // Stopped in projects (text keys), then in template_versions (a text and an integer key).
    await assert.rejects(
      copy(stopAt(({ table, rowsCopied }) => table === 'projects' && rowsCopied === 4)),
      /on purpose/,
    );
    const target = new pg.Client({ connectionString: targetUrl });
    await target.connect();
    // The database is dropped with its connections when the test ends: this one then ends with an error.
    target.on('error', () => {});
    t.after(() => target.end().catch(() => {}));
    const count = async (table: string) =>
      Number((await target.query(`select count(*) as n from ${table}`)).rows[0].n);
    assert.equal(await count('projects'), 4);
    await assert.rejects(
      copy(stopAt(({ table, rowsCopied }) => table === 'template_versions' && rowsCopied === 2)),
      /on purpose/,
    );
    assert.equal(await count('projects'), 7);
    assert.equal(await count('template_versions'), 2);

    // Another SQLite database cannot finish this one's copy.
    const otherDir = temporaryDir(t, 'postwire-resume-other-');
    await populate(path.join(otherDir, 'postwire.db'), 'b');
    await assert.rejects(
      copySqliteToPostgres({
        sqlitePath: path.join(otherDir, 'postwire.db'),
        targetUrl,
        workerDeadAfterMs: 15_000,
      }),
      /interrupted copy of another SQLite database/,
    );

    const finished = await copy();
    assert.equal(finished.resumed, true);
    assert.equal(finished.matched, true, JSON.stringify(finished.tables));
    const nonEmpty = finished.tables.filter((count) => count.sqlite > 0);
    assert.deepEqual(
      Object.fromEntries(nonEmpty.map((count) => [count.table, [count.sqlite, count.postgres]])),
      {
        projects: [7, 7],
        inbound_messages: [3, 3],
        inbound_raw: [3, 3],
        queue_workers: [1, 1],
        templates: [1, 1],
        template_versions: [5, 5],
      },
    );
    const versions = await target.query('select version from template_versions order by version');
    assert.deepEqual(
      versions.rows.map((row) => row.version),
      [1, 2, 3, 4, 5],
    );
    const raw = await target.query<{ id: string; raw: Buffer }>(
      'select id, raw from inbound_raw order by id',
    );
    assert.deepEqual(
      raw.rows.map((row) => [row.id, row.raw.toString('hex')]),
      [0, 1, 2].map((index) => [`inb_a${index}`, rawBytes(index).toString('hex')]),
    );
    const progress = await target.query("select to_regclass('postwire_copy_progress') as progress");
    assert.equal(progress.rows[0].progress, null, 'a complete copy leaves no bookkeeping behind');

    await assert.rejects(copy(), /not empty \(table \w+ has rows\) and holds no interrupted copy/);
  });
});

/** Bytes that are not UTF-8, as hostile received mail can be. */
const rawBytes = (index: number) => Buffer.from([0xff, 0x00, 0xfe, index, 0x80]);

/** A SQLite database with rows in tables keyed by text, by text and integer, and holding bytes. */
async function populate(sqlitePath: string, tag: string): Promise<void> {
  const handle = await openDatabase({ sqlitePath });
  try {
    await migrateToLatest(handle.db);
    const now = new Date().toISOString();
    for (let index = 0; index < 7; index++) {
      await handle.db
        .insertInto('projects')
        .values({ id: `proj_${tag}${index}`, name: `p${index}`, is_default: index === 0, created_at: now })
        .execute();
    }
    await handle.db
      .insertInto('templates')
      .values({
        id: `tpl_${tag}`,
        project_id: `proj_${tag}0`,
        name: 'versions',
        alias: null,
        subject: null,
        html: '<p>x</p>',
        text: null,
        variables: '[]',
        created_at: now,
        updated_at: now,
        published_at: now,
        published_version: 5,
      })
      .execute();
    for (let version = 1; version <= 5; version++) {
      await handle.db
        .insertInto('template_versions')
        .values({
          template_id: `tpl_${tag}`,
          version,
          project_id: `proj_${tag}0`,
          name: 'versions',
          subject: null,
          html: `<p>${version}</p>`,
          text: null,
          variables: '[]',
          published_at: now,
        })
        .execute();
    }
    for (let index = 0; index < 3; index++) {
      await handle.db
        .insertInto('inbound_messages')
        .values({
          id: `inb_${tag}${index}`,
          received_at: now,
          mail_from: '',
          rcpt_to: '[]',
          remote_address: null,
          size: 5,
          status: 'unreadable',
          kind: null,
          detail: null,
          subject: null,
          project_id: null,
          email_id: null,
          recipient: null,
          attempts: 0,
          locked_until: null,
          locked_by: null,
          processed_at: now,
        })
        .execute();
      await handle.db
        .insertInto('inbound_raw')
        .values({ id: `inb_${tag}${index}`, raw: rawBytes(index) })
        .execute();
    }
  } finally {
    await handle.close();
  }
}
