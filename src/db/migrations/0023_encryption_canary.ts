import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// One value sealed with the database's encryption key, recorded by the first process that starts on it: every
// later process opens it before it works, so a process with another key (a second data directory's generated
// key file, a mistyped POSTWIRE_ENCRYPTION_KEY) refuses to start instead of sealing secrets no other process
// can open. The table is created empty; its one row is written at the first start, not here, so a freshly
// migrated database (a copy-to target) still holds no rows.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('encryption_canary')
      .addColumn('id', 'integer', (col) => col.primaryKey())
      .addColumn('sealed', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();
  },
};
