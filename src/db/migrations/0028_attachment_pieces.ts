import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// An API send's large files in pieces (issue 34), as 0027 keeps large messages: a file larger than a piece is
// written to `message_pieces` a piece per statement, before the transaction that stores its email, and its
// `email_attachments` row names them in `pieces_key` (its `content` left empty); null: the bytes are in the row.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('email_attachments').addColumn('pieces_key', 'text').execute();
  },
};
