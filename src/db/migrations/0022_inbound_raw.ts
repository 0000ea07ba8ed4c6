import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// A received message's bytes move out of its queue row into a table of their own (inbound_raw), written once
// with the row and read only by what needs them (the inbound worker's read). The queue's claims, postponements
// and verdicts update inbound_messages: with the bytes in the row, SQLite rewrote the whole row (10 MB for a
// hostile message, ~100 ms on the process's one connection) at each of them, and the API stalled meanwhile.
//
// The bytes go with their message (ON DELETE CASCADE): when a project is deleted, or retention deletes a row.
//
// SQLite: the table is rebuilt without the column, with its indexes (as 0021 rebuilds domains). The old table
// is renamed out of the way first, rather than dropped after a copy, so that inbound_raw references the new
// table by its final name from the start (with foreign keys on, dropping a referenced table would delete the
// rows that reference it), and the bytes are copied once, straight from the old table. PostgreSQL drops the
// column.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    if (postgres) {
      await createRawTable(db, 'bytea');
      await sql`insert into inbound_raw (id, raw) select id, raw from inbound_messages`.execute(db);
      await db.schema.alterTable('inbound_messages').dropColumn('raw').execute();
      return;
    }
    await db.schema.dropIndex('inbound_messages_status').execute();
    await db.schema.dropIndex('inbound_messages_project').execute();
    await db.schema.alterTable('inbound_messages').renameTo('inbound_messages_old').execute();
    await db.schema
      .createTable('inbound_messages')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('received_at', 'text', (col) => col.notNull())
      .addColumn('mail_from', 'text', (col) => col.notNull())
      .addColumn('rcpt_to', 'text', (col) => col.notNull())
      .addColumn('remote_address', 'text')
      .addColumn('size', 'integer', (col) => col.notNull())
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('kind', 'text')
      .addColumn('detail', 'text')
      .addColumn('subject', 'text')
      .addColumn('project_id', 'text', (col) => col.references('projects.id').onDelete('cascade'))
      .addColumn('email_id', 'text')
      .addColumn('recipient', 'text')
      .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('locked_until', 'text')
      .addColumn('locked_by', 'text')
      .addColumn('processed_at', 'text')
      .execute();
    await sql`
      insert into inbound_messages (id, received_at, mail_from, rcpt_to, remote_address, size, status, kind,
        detail, subject, project_id, email_id, recipient, attempts, locked_until, locked_by, processed_at)
      select id, received_at, mail_from, rcpt_to, remote_address, size, status, kind,
        detail, subject, project_id, email_id, recipient, attempts, locked_until, locked_by, processed_at
      from inbound_messages_old`.execute(db);
    await createRawTable(db, 'blob');
    await sql`insert into inbound_raw (id, raw) select id, raw from inbound_messages_old`.execute(db);
    await db.schema.dropTable('inbound_messages_old').execute();
    await db.schema
      .createIndex('inbound_messages_status')
      .on('inbound_messages')
      .columns(['status', 'id'])
      .execute();
    await db.schema
      .createIndex('inbound_messages_project')
      .on('inbound_messages')
      .columns(['project_id', 'id'])
      .execute();
  },
};

async function createRawTable(db: Kysely<unknown>, type: 'bytea' | 'blob') {
  await db.schema
    .createTable('inbound_raw')
    .addColumn('id', 'text', (col) => col.primaryKey().references('inbound_messages.id').onDelete('cascade'))
    // Hostile input need not be valid UTF-8: bytes, not text.
    .addColumn('raw', type, (col) => col.notNull())
    .execute();
}
