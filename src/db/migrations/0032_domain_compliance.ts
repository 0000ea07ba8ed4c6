import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// A sending domain's compliance checks (issue 38): SPF, DKIM key size, DMARC, the sending host's reverse DNS,
// TLS and List-Unsubscribe, as the last domain check found them (JSON; null before it). Stored by the check
// rather than computed on read: the check already looks DNS up outside its transaction, on the re-check
// schedule and on POST /verify, so a GET never waits on DNS and every process shows the same answer.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('domains').addColumn('compliance', 'text').execute();
  },
};
