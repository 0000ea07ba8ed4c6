import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// An automation's graph in numbered versions (issue 40): each save of a new graph is a row of
// automation_graphs, never changed after, and `automations.graph_version` names the current one. A run keeps
// the version it started with (`automation_runs.graph_version`): an update does not move runs under way onto
// steps they were never meant to reach, and a worker may keep a version it read in memory. The automations
// and runs stored before this are version 1. And the runs held under a lease by when it ends (few: a lease is
// given back with the attempt's outcome), so the runs worker finds the earliest without reading every run.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('automation_graphs')
      .addColumn('automation_id', 'text', (col) =>
        col.notNull().references('automations.id').onDelete('cascade'),
      )
      .addColumn('version', 'integer', (col) => col.notNull())
      .addColumn('graph', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addPrimaryKeyConstraint('automation_graphs_pk', ['automation_id', 'version'])
      .execute();
    await db.schema
      .alterTable('automations')
      .addColumn('graph_version', 'integer', (col) => col.notNull().defaultTo(1))
      .execute();
    await db.schema
      .alterTable('automation_runs')
      .addColumn('graph_version', 'integer', (col) => col.notNull().defaultTo(1))
      .execute();
    await db.schema
      .createIndex('automation_runs_leased')
      .on('automation_runs')
      .columns(['locked_until'])
      .where(sql.ref('locked_until'), 'is not', null)
      .execute();
    await sql`INSERT INTO automation_graphs (automation_id, version, graph, created_at)
      SELECT id, 1, graph, updated_at FROM automations`.execute(db);
  },
};
