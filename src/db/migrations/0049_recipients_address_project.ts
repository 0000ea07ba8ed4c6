import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// The index by a recipient's address leads with the address, not the project (issue 43). Migration 0038's
// `email_recipients_project_address` on (project_id, lower(address)) served its lookups (a contact's mail and
// engagement: project and address both equal), but it was also a candidate for every condition on the
// project alone, and one such is in every accepted send: the project's last queue position (fair-queue.repo.ts),
// which the partial `email_recipients_project_ready` answers with one backward probe. On tables with no
// statistics yet (a fresh install's first minute, until autovacuum analyzes them) both are estimated at one
// row, and a connection that planned its accepting statement then kept whichever it took: with this index,
// every recipient the project ever had read and filtered in every send, growing with the project (bench/
// README.md, sixth session). Led by the address it serves the same lookups and cannot be taken for the
// project alone. Rebuilt by a pass over the table, once.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.dropIndex('email_recipients_project_address').execute();
    await sql`CREATE INDEX email_recipients_address_project
      ON email_recipients (lower(address), project_id)`.execute(db);
  },
};
