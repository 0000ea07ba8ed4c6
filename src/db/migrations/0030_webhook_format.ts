import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';
import { watchTables } from './0015_cache_stamps.ts';

// A webhook's payload format (issue 39): `postwire`, or `resend` for handlers written for Resend's webhooks.
// Webhooks made before were Postwire's.
//
// The delivery workers read webhooks through the stamped cache (src/db/cached-tables.ts), so a change of the
// format alone must move the webhooks stamp: the table's triggers are made again with the column watched.
const WEBHOOK_COLUMNS = [
  'id',
  'project_id',
  'url',
  'enabled',
  'events',
  'secret_sealed',
  'created_at',
  'updated_at',
  'disabled_reason',
  'previous_secret_sealed',
  'previous_secret_expires_at',
  'format',
];

export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('webhooks')
      .addColumn('format', 'text', (col) => col.notNull().defaultTo('postwire'))
      .execute();
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    for (const operation of ['insert', 'update', 'delete']) {
      const name = `webhooks_${operation}_stamp`;
      await sql.raw(postgres ? `drop trigger ${name} on webhooks` : `drop trigger ${name}`).execute(db);
    }
    await watchTables(db, [{ table: 'webhooks', scope: 'webhooks', columns: WEBHOOK_COLUMNS }]);
  },
};
