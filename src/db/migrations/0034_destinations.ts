import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// Destinations (issue 38): what the sending workers share of each destination they deliver to (its adaptive
// rate and connections, its suspension and last deferral), per sending source, written on a change and at
// most once a second per destination; and which destination each recipient domain's MX hosts roll up to,
// which the sending queue's claim reads to leave a suspended destination's recipients where they are.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('destinations')
      .addColumn('source', 'text', (col) => col.notNull())
      .addColumn('key', 'text', (col) => col.notNull())
      .addColumn('provider', 'text')
      .addColumn('mx_hosts', 'text', (col) => col.notNull())
      .addColumn('rate', 'integer', (col) => col.notNull())
      .addColumn('connections', 'integer', (col) => col.notNull())
      .addColumn('suspended_until', 'text')
      .addColumn('backoff_ms', 'integer', (col) => col.notNull())
      .addColumn('last_deferral', 'text')
      .addColumn('last_deferral_at', 'text')
      .addColumn('deferrals', 'integer', (col) => col.notNull())
      .addColumn('suspensions', 'integer', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .addPrimaryKeyConstraint('destinations_pk', ['source', 'key'])
      .execute();
    await db.schema
      .createIndex('destinations_suspended')
      .on('destinations')
      .columns(['suspended_until'])
      .execute();
    await db.schema
      .createTable('destination_domains')
      .addColumn('domain', 'text', (col) => col.primaryKey())
      .addColumn('destination', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('destination_domains_destination')
      .on('destination_domains')
      .columns(['destination'])
      .execute();
  },
};
