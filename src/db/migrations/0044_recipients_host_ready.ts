import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// The sending queue's rows of one recipient domain in queue order (issue 38): a look over the queue claims a
// paced destination's rows up to what it can start (sending.claims.ts, its lane's part), which without this
// index read the queue in order past every other destination's rows ahead of them. Partial, like
// email_recipients_ready: only the queued rows, so it stays small however many sent rows the table keeps.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createIndex('email_recipients_host_ready')
      .on('email_recipients')
      .columns(['host', 'ready_seq'])
      .where(sql.ref('ready_seq'), 'is not', null)
      .execute();
  },
};
