import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// An answer that several API logs share (issue 43: a page read again and again), stored once per project:
// a log of such a request names its answer (`api_logs.response_answer_id`) instead of holding a copy of it.
// The logs of a read of 20 webhooks were 1.5 KiB of the same answer each, most of what writing them cost.
// An answer goes when no log names it any more and it has not been used for a while (`used_at`, moved by
// each batch that names it), so a batch that has just written it finds it when its logs follow.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('api_log_answers')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('body', 'text', (col) => col.notNull())
      .addColumn('used_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema.alterTable('api_logs').addColumn('response_answer_id', 'text').execute();
    // For the pruner's "does any log still name it": only the logs that name one are in it.
    await db.schema
      .createIndex('api_logs_response_answer')
      .on('api_logs')
      .column('response_answer_id')
      .where(sql.ref('response_answer_id'), 'is not', null)
      .execute();
  },
};
