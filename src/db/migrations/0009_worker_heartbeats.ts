import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// Workers say they are alive: a worker whose heartbeat stopped is dead, and the others give its leased jobs
// back at once instead of waiting for its leases (2 × SEND_TIMEOUT + 2 s) to run out.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('queue_workers')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('queue', 'text', (col) => col.notNull())
      .addColumn('heartbeat_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('queue_workers_heartbeat')
      .on('queue_workers')
      .columns(['queue', 'heartbeat_at'])
      .execute();
  },
};
