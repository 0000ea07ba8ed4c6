import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// Warm-up (issue 38): a sending domain's schedule of daily allowances per destination (`warmups`, one row per
// domain that ever had one; null schedule: WARMUP_SCHEDULE's), and what each destination took of a day's
// allowance (`warmup_counts`, per source, domain, destination and UTC day), shared by every sending worker:
// a worker takes a block of the allowance at a time (`last_grant` says how much the last take got), so the
// writes are bounded by the allowance, not the mail. `email_recipients.wait_reason`: why a waiting recipient
// waits when it is not a retry (`warmup`, `destination`), shown on the email as `throttled`. And the operator's
// destination overrides set through the API (`destination_overrides`, by MX pattern or recipient domain; a
// null limit keeps the default), read by every sending worker at most once a second beside DESTINATION_LIMITS.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('warmups')
      .addColumn('domain_id', 'text', (col) => col.primaryKey().references('domains.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('domain_name', 'text', (col) => col.notNull())
      .addColumn('enabled', 'boolean', (col) => col.notNull())
      .addColumn('schedule', 'text')
      .addColumn('started_at', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createTable('warmup_counts')
      .addColumn('source', 'text', (col) => col.notNull())
      .addColumn('domain_id', 'text', (col) => col.notNull().references('domains.id').onDelete('cascade'))
      .addColumn('destination', 'text', (col) => col.notNull())
      .addColumn('day', 'text', (col) => col.notNull())
      .addColumn('used', 'integer', (col) => col.notNull())
      .addColumn('last_grant', 'integer', (col) => col.notNull())
      .addPrimaryKeyConstraint('warmup_counts_pk', ['source', 'domain_id', 'destination', 'day'])
      .execute();
    await db.schema
      .createTable('destination_overrides')
      .addColumn('pattern', 'text', (col) => col.primaryKey())
      .addColumn('connections', 'integer')
      .addColumn('messages_per_connection', 'integer')
      .addColumn('per_minute', 'integer')
      .addColumn('per_hour', 'integer')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema.alterTable('email_recipients').addColumn('wait_reason', 'text').execute();
  },
};
