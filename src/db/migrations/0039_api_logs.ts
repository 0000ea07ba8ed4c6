import type { Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

// The API requests each key makes (issue 39: Resend's `logs`, and GET /v1/logs): a row per authenticated
// request, written after its answer in batches (src/modules/logs/log-recorder.ts), bounded per entry (the
// bodies are excerpts) and per project (API_LOG_MAX_ROWS), and pruned after API_LOG_RETENTION. Listed per
// project newest first, by (project_id, id); the old rows go by id (time-sortable), the primary key.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('api_logs')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('api_key_id', 'text', (col) => col.notNull())
      .addColumn('method', 'text', (col) => col.notNull())
      .addColumn('path', 'text', (col) => col.notNull())
      .addColumn('status', 'integer', (col) => col.notNull())
      .addColumn('duration_us', 'integer', (col) => col.notNull())
      .addColumn('user_agent', 'text')
      .addColumn('request_body', 'text')
      .addColumn('response_body', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema.createIndex('api_logs_project').on('api_logs').columns(['project_id', 'id']).execute();
  },
};
