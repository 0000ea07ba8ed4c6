import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Secret rotation: the secret a PATCH replaced keeps signing (next to the new one) until it expires, so
// receivers can switch over. A partial index on failed deliveries serves recovery ("every failed delivery
// of this webhook since …") and the `status=failed` filter of the delivery log without growing with the
// succeeded rows that make up almost all of the table.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    for (const column of ['previous_secret_sealed', 'previous_secret_expires_at']) {
      await db.schema.alterTable('webhooks').addColumn(column, 'text').execute();
    }
    await db.schema
      .createIndex('deliveries_webhook_failed')
      .on('deliveries')
      .columns(['webhook_id', 'id'])
      .where(sql.ref('status'), '=', 'failed')
      .execute();
  },
};
