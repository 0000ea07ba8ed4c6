import { type Kysely, sql } from 'kysely';
import { bulkInsert } from '../../db/bulk-insert.ts';
import type { Engine } from '../../db/connection.ts';
import { type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { idAt } from '../../lib/ids.ts';

// The api_logs table: the API requests each key made, written in batches after their answers
// (log-recorder.ts), read by GET /v1/logs and Resend's `logs`, and pruned by age and by count per project.

export type ApiLogRow = Row<'api_logs'>;

/** The columns a list shows: no bodies, which only the log itself answers. */
const LIST_COLUMNS = [
  'id',
  'project_id',
  'api_key_id',
  'method',
  'path',
  'status',
  'duration_us',
  'user_agent',
  'created_at',
] as const;
export type ApiLogSummaryRow = Pick<ApiLogRow, (typeof LIST_COLUMNS)[number]>;

/** Every column, in the order the batch INSERT names them. */
const COLUMNS = [...LIST_COLUMNS, 'request_body', 'response_body'] as const satisfies ReadonlyArray<
  keyof ApiLogRow
>;

export function createApiLogRepo(db: Kysely<Database>, engine: Engine) {
  // Written as SQL text, not built: the query builder's work for a batch of a hundred rows was most of what
  // the logs cost a request (bench/api-logs.ts). The bodies' excerpts are shared: a page served again is the
  // same answer in every row, sent to PostgreSQL once a batch.
  const insert = bulkInsert(engine, 'api_logs', COLUMNS, ['request_body', 'response_body']);

  /**
   * The rows of each project past its newest `maxRows`, deleted a project at a time. The projects over the
   * cap are found once per pruning run (a GROUP BY over the (project_id, id) index), not per batch.
   */
  function overCap(maxRows: number): PruneTarget {
    let projects: string[] | undefined;
    const findProjects = async () =>
      (
        await db
          .selectFrom('api_logs')
          .select('project_id')
          .groupBy('project_id')
          .having(sql<number>`count(*)`, '>', maxRows)
          .orderBy('project_id')
          .execute()
      ).map((row) => row.project_id);
    // The newest row of the project that is past the cap; everything from it down goes.
    const boundary = async (projectId: string) =>
      (
        await db
          .selectFrom('api_logs')
          .select('id')
          .where('project_id', '=', projectId)
          .orderBy('id', 'desc')
          .limit(1)
          .offset(maxRows)
          .executeTakeFirst()
      )?.id;
    return {
      table: 'api_logs (over API_LOG_MAX_ROWS)',
      async count() {
        const result = await sql<{ n: string | number | null }>`SELECT sum(n - ${maxRows}) AS n FROM (
          SELECT count(*) AS n FROM api_logs GROUP BY project_id) counts WHERE n > ${maxRows}`.execute(db);
        return Number(result.rows[0]?.n ?? 0);
      },
      async deleteBatch(limit) {
        projects ??= await findProjects();
        let deleted = 0;
        while (deleted < limit && projects.length > 0) {
          const projectId = projects[0]!;
          const last = await boundary(projectId);
          if (last === undefined) {
            projects.shift();
            continue;
          }
          const result = await sql<{ id: string }>`DELETE FROM api_logs WHERE id IN (
            SELECT id FROM api_logs WHERE project_id = ${projectId} AND id <= ${last}
            ORDER BY id LIMIT ${limit - deleted}) RETURNING id`.execute(db);
          deleted += result.rows.length;
          if (result.rows.length === 0) projects.shift();
        }
        return deleted;
      },
    };
  }

  return {
    /** Writes a batch of logs in one statement (it may run alone: nothing else is written with it). */
    async insertMany(rows: readonly ApiLogRow[], transaction?: Transaction): Promise<void> {
      if (rows.length === 0) return;
      await (transaction?.db ?? db).executeQuery(insert(rows));
    },

    /** A project's logs, newest first, without their bodies. */
    list(projectId: string, page: PageRequest): Promise<Page<ApiLogSummaryRow>> {
      return pageOfQuery(
        db.selectFrom('api_logs').select(LIST_COLUMNS).where('project_id', '=', projectId),
        page,
      );
    },

    /** One log of a project, bodies included; undefined for another project's. */
    get(projectId: string, id: string): Promise<ApiLogRow | undefined> {
      return db
        .selectFrom('api_logs')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /**
     * API_LOG_RETENTION and API_LOG_MAX_ROWS: logs older than the cutoff (their ids are made when they are
     * written), then each project's past its newest `maxRows`.
     */
    pruneTargets: (cutoff: Date, maxRows: number): PruneTarget[] => [
      pruneTarget(db, 'api_logs', 'id', sql<boolean>`id < ${idAt('log', cutoff)}`),
      overCap(maxRows),
    ],
  };
}

export type ApiLogRepo = ReturnType<typeof createApiLogRepo>;
