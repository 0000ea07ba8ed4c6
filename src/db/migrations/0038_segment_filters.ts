import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Filter segments and a contact's activity (issue 37, items 1 and 2).
//
// - segments.filter: a segment that is a filter over contacts (JSON text, segment-filter.ts's stored form)
//   instead of a list; null for a list. Its members are whoever matches when a broadcast is sent.
// - recipient_engagement.last_clicked_at: "clicked in the last N days" needs the last click, as opens have it;
//   rows from before know only their first click, which stands in for it.
// - email_recipients (project_id, lower(address)): the mail an address received, for a contact's engagement
//   (filters) and its activity, found without reading every recipient of the project. Built on existing
//   rows: on a large database this migration takes a while, once.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('segments').addColumn('filter', 'text').execute();
    await db.schema.alterTable('recipient_engagement').addColumn('last_clicked_at', 'text').execute();
    await sql`UPDATE recipient_engagement SET last_clicked_at = first_clicked_at
      WHERE first_clicked_at IS NOT NULL`.execute(db);
    await sql`CREATE INDEX email_recipients_project_address
      ON email_recipients (project_id, lower(address))`.execute(db);
  },
};
