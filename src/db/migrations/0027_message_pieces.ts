import { type Kysely, PostgresAdapter } from 'kysely';
import type { Migration } from 'kysely/migration';

// Large messages in pieces (issue 34): one statement writing or reading a 40 MiB value holds the event loop
// for about half a second on SQLite (node:sqlite runs each statement on the calling thread), so a submitted
// message, a captured MIME or a received message larger than a piece is kept in `message_pieces`, written and read a piece per
// statement with the event loop free between them (src/db/message-pieces.ts). The owning row names its
// pieces in `pieces_key`; null: the bytes are in the row itself (small messages, and rows written before).
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema
      .createTable('message_pieces')
      .addColumn('owner', 'text', (col) => col.notNull())
      .addColumn('seq', 'integer', (col) => col.notNull())
      .addColumn('bytes', postgres ? 'bytea' : 'blob', (col) => col.notNull())
      .addPrimaryKeyConstraint('message_pieces_pkey', ['owner', 'seq'])
      .execute();
    await db.schema.alterTable('email_submissions').addColumn('pieces_key', 'text').execute();
    await db.schema.alterTable('email_raw').addColumn('pieces_key', 'text').execute();
    await db.schema.alterTable('inbound_raw').addColumn('pieces_key', 'text').execute();
  },
};
