import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// A source IP's warm-up (issue 38, item 3; DIRECT_SOURCE_IPS): what each large-provider destination took of a
// warming address's day's allowance, whatever the sending domain, shared by every sending worker the way
// `warmup_counts` is for a domain's (taken a block at a time; `last_grant` is the last take's answer).
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('source_warmup_counts')
      .addColumn('source', 'text', (col) => col.notNull())
      .addColumn('destination', 'text', (col) => col.notNull())
      .addColumn('day', 'text', (col) => col.notNull())
      .addColumn('used', 'integer', (col) => col.notNull())
      .addColumn('last_grant', 'integer', (col) => col.notNull())
      .addPrimaryKeyConstraint('source_warmup_counts_pk', ['source', 'destination', 'day'])
      .execute();
  },
};
