import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// DMARC aggregate reports at a verified domain's own address (issue 38, item 6): `dmarc_reports` on domains,
// set by its project (PATCH /v1/domains/{id}), makes the inbound listener take `dmarc@<domain>` and read what
// arrives there as reports about that project's domains. Off (false) for every existing domain: an address
// that was refused, or went to an inbound route, keeps doing so until its owner asks.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('domains')
      .addColumn('dmarc_reports', 'boolean', (col) => col.notNull().defaultTo(false))
      .execute();
  },
};
