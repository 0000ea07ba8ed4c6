import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { sql } from 'kysely';
import { migrateToLatest } from '../src/db/migrate.ts';
import { idAt, newId } from '../src/lib/ids.ts';
import { createInboundRepo } from '../src/modules/inbound/inbound.repo.ts';
import { createInboundQueue } from '../src/modules/inbound/inbound.queue.ts';
import { createRetention } from '../src/modules/retention/retention.ts';
import { createTestDatabase, ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { createInboundService } from '../src/modules/inbound/inbound.service.ts';
import { createRepositories } from '../src/repositories.ts';

// A received message's bytes live in inbound_raw, apart from the queue row the inbound worker's claims and
// verdicts update (so those updates never rewrite megabytes). Migration 0022 moves the bytes of messages
// stored by the version before it; they stay readable, and go with their message.

/** Not valid UTF-8, with a NUL: stored as bytes, not text. */
const BINARY = Buffer.concat([
  Buffer.from('Subject: binary\r\n\r\n'),
  Buffer.from([0xff, 0xfe, 0, 0x80, 0x0a]),
]);

for (const engine of ALL_ENGINES) {
  test(
    `migration 0022 moves inbound messages' bytes to inbound_raw (${engine})`,
    { skip: engineSkip(engine) },
    async (t) => {
      // The schema as the version before this one left it: the migrations up to 0021, recorded as applied.
      const database = await createTestDatabase(engine, { migrationsBefore: '0022' });
      t.after(() => database.drop());
      const db = database.handle.db as any;
      assert.equal(
        (await db.selectFrom('postwire_migrations').select('name').execute()).length,
        21,
        'the migrations before 0022',
      );
      const now = new Date().toISOString();
      await db
        .insertInto('projects')
        .values(['proj_a', 'proj_b'].map((id) => ({ id, name: id, is_default: false, created_at: now })))
        .execute();
      // Ids of a year ago (read, so retention takes them) and of now (one pending, its worker gone).
      const yearAgo = Date.now() - 365 * 86_400_000;
      const [oldA, oldB] = [idAt('inb', new Date(yearAgo)), idAt('inb', new Date(yearAgo + 1))];
      const [pending, ofB] = [newId('inb'), newId('inb')];
      const message = (id: string, raw: Buffer, fields: Record<string, unknown>) => ({
        id,
        received_at: now,
        mail_from: '',
        rcpt_to: JSON.stringify(['postmaster@bounces.example']),
        remote_address: '192.0.2.1',
        size: raw.length,
        raw,
        status: 'unmatched',
        kind: 'unknown',
        detail: 'matched no email',
        subject: 'subject',
        project_id: null,
        email_id: null,
        recipient: null,
        attempts: 1,
        locked_until: null,
        locked_by: null,
        processed_at: now,
        ...fields,
      });
      const big = randomBytes(1 << 20);
      await db
        .insertInto('inbound_messages')
        .values([
          message(oldA, Buffer.from('Subject: old\r\n\r\nread long ago\r\n'), {}),
          message(oldB, BINARY, { project_id: 'proj_a', status: 'applied', kind: 'bounce' }),
          message(pending, big, {
            status: 'pending',
            kind: null,
            detail: null,
            subject: null,
            attempts: 2,
            locked_by: 'gone-worker',
            locked_until: '2000-01-01T00:00:00.000Z',
            processed_at: null,
          }),
          message(ofB, Buffer.from('Subject: b\r\n\r\nproject b\r\n'), { project_id: 'proj_b' }),
        ])
        .execute();

      // Later migrations apply after it too; this one goes first.
      assert.equal((await migrateToLatest(db))[0], '0022_inbound_raw');
      const repo = createInboundRepo(database.handle.db, engine);
      const bytesOf = async (id: string) => Buffer.concat((await repo.raw(id))!);
      assert.deepEqual(await bytesOf(oldA), Buffer.from('Subject: old\r\n\r\nread long ago\r\n'));
      assert.deepEqual(await bytesOf(oldB), BINARY);
      assert.ok((await bytesOf(pending)).equals(big));
      // The queue row keeps everything else, without the bytes.
      const rows = await db.selectFrom('inbound_messages').selectAll().orderBy('id').execute();
      assert.deepEqual(
        rows.map((row: any) => [row.id, row.status, row.project_id, Number(row.size), Number(row.attempts)]),
        [
          [oldA, 'unmatched', null, 31, 1],
          [oldB, 'applied', 'proj_a', BINARY.length, 1],
          [pending, 'pending', null, big.length, 2],
          [ofB, 'unmatched', 'proj_b', 25, 1],
        ],
      );
      assert.ok(rows.every((row: any) => !('raw' in row)));
      // Its indexes came with the rebuilt table (SQLite) or stayed (PostgreSQL).
      const indexes =
        engine === 'postgres'
          ? (
              await sql<{ name: string }>`select indexname as name from pg_indexes
              where schemaname = current_schema() and tablename = 'inbound_messages'`.execute(db)
            ).rows
          : (
              await sql<{ name: string }>`select name from sqlite_master
              where type = 'index' and tbl_name = 'inbound_messages' and sql is not null`.execute(db)
            ).rows;
      assert.deepEqual(
        indexes
          .map((row) => row.name)
          .filter((name) => !name.endsWith('_pkey'))
          .sort(),
        ['inbound_messages_project', 'inbound_messages_status'],
      );

      // The pending message, whose worker died, is claimed again; its bytes are read apart.
      const [claimed, ...others] = await createInboundQueue(database.handle.db, engine).claim(
        { workerId: 'w1', now: new Date(), until: new Date(Date.now() + 60_000) },
        10,
      );
      assert.equal(others.length, 0);
      assert.deepEqual(
        {
          id: claimed!.id,
          mailFrom: claimed!.mailFrom,
          rcptTo: claimed!.rcptTo,
          attempts: claimed!.attempts,
        },
        { id: pending, mailFrom: '', rcptTo: ['postmaster@bounces.example'], attempts: 3 },
      );
      // Read as a report: no routed recipients, no HELO or spam verdict before migration 0024.
      assert.deepEqual([claimed!.routing, claimed!.helo, claimed!.spam], [[], null, null]);

      // A message stored now is stored with its bytes, in inbound_raw.
      const stored = await createInboundService({ db: database.handle.db, repo }).store({
        receivedAt: now,
        mailFrom: '',
        rcptTo: ['postmaster@bounces.example'],
        remoteAddress: null,
        raw: BINARY,
      });
      assert.deepEqual(Buffer.concat((await repo.raw(stored))!), BINARY);

      // The bytes go with their message: a project's deletion, and retention.
      await db.deleteFrom('projects').where('id', '=', 'proj_b').execute();
      assert.equal(await repo.raw(ofB), undefined);
      const retention = createRetention({
        repositories: createRepositories(database.handle),
        clock: { now: () => new Date() },
        retentionMs: 30 * 86_400_000,
      });
      const pruned = Object.fromEntries((await retention.prune()).map((entry) => [entry.table, entry.rows]));
      assert.equal(pruned.inbound_raw, 2);
      assert.equal(pruned.inbound_messages, 2);
      const left = await db.selectFrom('inbound_raw').select('id').orderBy('id').execute();
      assert.deepEqual(
        left.map((row: any) => row.id),
        [pending, stored].sort(),
      );
    },
  );
}
