import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// The claim indexes hold pending deliveries only. Keyed on the status, every finished delivery moved its
// entries within both indexes (a delete and an insert each) and left them there for good, so the indexes
// grew with the history while the claims only ever read their pending part. Partial, a finished delivery
// just leaves them. The claim queries name the status as a literal ('pending'), which is what lets both
// engines use a partial index.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.dropIndex('deliveries_due').execute();
    await db.schema.dropIndex('deliveries_webhook_due').execute();
    await db.schema
      .createIndex('deliveries_due')
      .on('deliveries')
      .column('next_attempt_at')
      .where(sql.ref('status'), '=', 'pending')
      .execute();
    await db.schema
      .createIndex('deliveries_webhook_due')
      .on('deliveries')
      .columns(['webhook_id', 'next_attempt_at'])
      .where(sql.ref('status'), '=', 'pending')
      .execute();
  },
};
