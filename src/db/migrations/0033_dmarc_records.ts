import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// DMARC aggregate reports (issue 38) mailed to dmarc@<BOUNCE_DOMAIN>: a row per report record (a source IP
// and what the receiver saw of it), kept per sending domain of the project that holds the reported name.
// Rows, not whole reports, so GET /v1/domains/{id}/dmarc sums a date range with one GROUP BY. A report read
// twice (a retry) writes nothing the second time: (domain, reporter, report id, row) is unique.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('dmarc_records')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('domain_id', 'text', (col) => col.notNull().references('domains.id').onDelete('cascade'))
      .addColumn('reporter_org', 'text', (col) => col.notNull())
      .addColumn('report_id', 'text', (col) => col.notNull())
      .addColumn('row_index', 'integer', (col) => col.notNull())
      .addColumn('begin_at', 'text', (col) => col.notNull())
      .addColumn('end_at', 'text', (col) => col.notNull())
      .addColumn('source_ip', 'text', (col) => col.notNull())
      .addColumn('message_count', 'integer', (col) => col.notNull())
      .addColumn('disposition', 'text', (col) => col.notNull())
      .addColumn('dkim', 'text', (col) => col.notNull())
      .addColumn('spf', 'text', (col) => col.notNull())
      .addColumn('header_from', 'text', (col) => col.notNull())
      .addUniqueConstraint('dmarc_records_report_row', [
        'domain_id',
        'reporter_org',
        'report_id',
        'row_index',
      ])
      .execute();
    await db.schema
      .createIndex('dmarc_records_domain_period')
      .on('dmarc_records')
      .columns(['domain_id', 'begin_at'])
      .execute();
  },
};
