import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// The reputation breaker (issue 38): a row per project ('' domain: the project as a whole) and per sending
// domain whose rates were judged, holding its state (`ok`, `warning`, `paused`), why, and what the rates were
// when it last changed. The rates themselves come from the daily counts (email_stats_daily), so a send reads
// this row (cached) and nothing else. A resume keeps the day and that day's counts then (`baseline_*`): the
// window after a resume counts only what happened after it. `pause_all_sending` (project row only): a pause
// holds every send, not only broadcasts; null follows REPUTATION_PAUSE_ALL_SENDING.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('reputation_states')
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('domain', 'text', (col) => col.notNull())
      .addColumn('state', 'text', (col) => col.notNull())
      .addColumn('reason', 'text')
      .addColumn('hard_bounce_rate', 'real')
      .addColumn('complaint_rate', 'real')
      .addColumn('changed_at', 'text', (col) => col.notNull())
      .addColumn('resumed_at', 'text')
      .addColumn('baseline_day', 'text')
      .addColumn('baseline_sent', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('baseline_bounced', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('baseline_bounced_hard', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('baseline_complained', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('pause_all_sending', 'boolean')
      .addPrimaryKeyConstraint('reputation_states_pk', ['project_id', 'domain'])
      .execute();
  },
};
