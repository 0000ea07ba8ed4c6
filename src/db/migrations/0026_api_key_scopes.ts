import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// Scoped API keys (issue 28): a key's permission (`full_access`, `sending_access`, `read_only`), and for a
// sending key the one domain it may send from. Keys made before were allowed everything: they stay so.
//
// `domain_id` has no foreign key on purpose: deleting the domain must not widen the key (ON DELETE SET NULL
// would let it send from every domain) nor be refused (RESTRICT); the key keeps naming a domain that is gone,
// and so sends from nothing.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('api_keys')
      .addColumn('permission', 'text', (col) => col.notNull().defaultTo('full_access'))
      .execute();
    await db.schema.alterTable('api_keys').addColumn('domain_id', 'text').execute();
  },
};
