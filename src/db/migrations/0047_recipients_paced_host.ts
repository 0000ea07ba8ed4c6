import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// The paced lanes' index made to cost only direct delivery (issue 38; bench/README.md "the paced lanes'
// index"). 0044's `email_recipients_host_ready` held every queued row, so every accepted recipient wrote one
// more index entry (and its claim removed it), though only direct delivery's looks read it (relay and capture
// have no lanes): 6–14 % of the accepting rate on SQLite. `paced_host` is the recipient's domain when it is
// accepted for direct delivery (MAIL_TRANSPORT=direct, recipients.repo.ts), else null, and the index holds
// only those rows while they are queued: relay and capture write nothing to it.
//
// A running system's rows, and any accepted while the transport was not direct, get theirs from the first
// direct sending worker to start (sending.queue.ts markPaced), not here: a relay or capture system pays
// nothing for the upgrade. Until then, and for a row it could not mark, the look's part over the queue claims
// a row without one (sending.claims.ts): none is left behind.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('email_recipients').addColumn('paced_host', 'text').execute();
    await db.schema
      .createIndex('email_recipients_paced_ready')
      .on('email_recipients')
      .columns(['paced_host', 'ready_seq'])
      .where(sql<boolean>`paced_host IS NOT NULL AND ready_seq IS NOT NULL`)
      .execute();
    await db.schema.dropIndex('email_recipients_host_ready').execute();
  },
};
