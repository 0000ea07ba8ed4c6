import { type Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// The delivery worker tops up each webhook it knows has work with that webhook's next due rows: this index
// finds them directly, where deliveries_due would walk past every other webhook's pending rows.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createIndex('deliveries_webhook_due')
      .on('deliveries')
      .columns(['status', 'webhook_id', 'next_attempt_at'])
      .execute();
  },
};
