import { type Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// Events and their webhook deliveries (the outbox): an event and its delivery rows are written in one
// transaction; workers claim due rows with a lease. Every attempt is its own row for the delivery log.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('events')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('type', 'text', (col) => col.notNull())
      .addColumn('data', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema.createIndex('events_project_id').on('events').columns(['project_id', 'id']).execute();
    await db.schema
      .createIndex('events_project_type')
      .on('events')
      .columns(['project_id', 'type', 'id'])
      .execute();

    // Deleting a webhook deletes its deliveries (and their attempts): nothing is left to send to it.
    await db.schema
      .createTable('deliveries')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('event_id', 'text', (col) => col.notNull().references('events.id').onDelete('cascade'))
      .addColumn('webhook_id', 'text', (col) => col.notNull().references('webhooks.id').onDelete('cascade'))
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('next_attempt_at', 'text', (col) => col.notNull())
      .addColumn('locked_until', 'text')
      .addColumn('locked_by', 'text')
      .addColumn('last_attempt_at', 'text')
      .addColumn('last_status_code', 'integer')
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .addColumn('completed_at', 'text')
      .execute();
    // The claim query: pending rows in due order.
    await db.schema
      .createIndex('deliveries_due')
      .on('deliveries')
      .columns(['status', 'next_attempt_at'])
      .execute();
    await db.schema.createIndex('deliveries_event').on('deliveries').columns(['event_id', 'id']).execute();
    await db.schema
      .createIndex('deliveries_webhook')
      .on('deliveries')
      .columns(['webhook_id', 'id'])
      .execute();
    await db.schema
      .createIndex('deliveries_project')
      .on('deliveries')
      .columns(['project_id', 'id'])
      .execute();

    await db.schema
      .createTable('delivery_attempts')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('delivery_id', 'text', (col) =>
        col.notNull().references('deliveries.id').onDelete('cascade'),
      )
      .addColumn('project_id', 'text', (col) => col.notNull())
      .addColumn('webhook_id', 'text', (col) => col.notNull())
      .addColumn('event_id', 'text', (col) => col.notNull())
      .addColumn('attempted_at', 'text', (col) => col.notNull())
      .addColumn('status_code', 'integer')
      .addColumn('duration_ms', 'integer', (col) => col.notNull())
      .addColumn('error', 'text')
      .addColumn('response_excerpt', 'text')
      .execute();
    await db.schema
      .createIndex('delivery_attempts_delivery')
      .on('delivery_attempts')
      .columns(['delivery_id', 'id'])
      .execute();
    await db.schema
      .createIndex('delivery_attempts_webhook')
      .on('delivery_attempts')
      .columns(['webhook_id', 'id'])
      .execute();

    // SQLite adds one column per statement.
    for (const column of ['disabled_reason', 'last_success_at', 'failing_since']) {
      await db.schema.alterTable('webhooks').addColumn(column, 'text').execute();
    }
  },
};
