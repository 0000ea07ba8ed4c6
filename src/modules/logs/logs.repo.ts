import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { rowsPerBatchInsert, writesInWith } from '../../db/engine/sql.ts';
import { joinedStatements, multiRowInsert } from '../../db/sql-text.ts';
import { type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { idAt } from '../../lib/ids.ts';

// The api_logs table: the API requests each key made, written in batches after their answers
// (log-recorder.ts), read by GET /v1/logs and Resend's `logs`, and pruned by age and by count per project.

export type ApiLogRow = Row<'api_logs'>;
/** An answer several logs of a batch share, stored once (api_log_answers). */
export type ApiLogAnswerRow = Row<'api_log_answers'>;

/**
 * An answer no log names any more stays this long after a batch last named it: a batch writes its answers
 * first and its logs after, in two statements, and the pruner must not take an answer in between.
 */
export const ANSWER_KEPT_UNUSED_MS = 10 * 60_000;

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
const COLUMNS = [
  ...LIST_COLUMNS,
  'request_body',
  'response_body',
  'response_answer_id',
] as const satisfies ReadonlyArray<keyof ApiLogRow>;
const ANSWER_COLUMNS = ['id', 'project_id', 'body', 'used_at'] as const satisfies ReadonlyArray<
  keyof ApiLogAnswerRow
>;

/** A log as it is read: its answer's excerpt in `response_body`, whether its own or shared. */
export type ApiLogView = Omit<ApiLogRow, 'response_answer_id'>;

export function createApiLogRepo(db: Kysely<Database>, engine: Engine) {
  // Written as SQL text, not built: the query builder's work for a batch of a hundred rows was most of what
  // the logs cost a request (bench/api-logs.ts).
  const insert = multiRowInsert(engine, 'api_logs', COLUMNS);
  // An answer already stored (the same page, read again in a later batch) is kept, its use noted.
  const insertAnswers = multiRowInsert(
    engine,
    'api_log_answers',
    ANSWER_COLUMNS,
    'ON CONFLICT (id) DO UPDATE SET used_at = excluded.used_at',
  );
  // PostgreSQL: the answers and the logs as one statement (one round trip, one commit), as parts of a WITH.
  const joined = writesInWith(engine) ? joinedStatements() : undefined;

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
    /** The logs a batch holds on this engine (log-recorder.ts). */
    rowsPerBatch: rowsPerBatchInsert(engine),

    /**
     * Writes a batch of logs in one statement (it may run alone: nothing else is written with it), after the
     * answers they share, in one statement (on PostgreSQL the two are one): an answer already stored (the same
     * page, read again in a later batch) is kept, its `used_at` moved.
     */
    async insertMany(
      rows: readonly ApiLogRow[],
      answers: readonly ApiLogAnswerRow[] = [],
      transaction?: Transaction,
    ): Promise<void> {
      const executor = transaction?.db ?? db;
      if (answers.length > 0 && rows.length > 0 && joined) {
        const shape = `${answers.length} ${rows.length}`;
        await executor.executeQuery(joined(shape, [insertAnswers(answers)], insert(rows)));
        return;
      }
      if (answers.length > 0) await executor.executeQuery(insertAnswers(answers));
      if (rows.length === 0) return;
      await executor.executeQuery(insert(rows));
    },

    /** A project's logs, newest first, without their bodies. */
    list(projectId: string, page: PageRequest): Promise<Page<ApiLogSummaryRow>> {
      return pageOfQuery(
        db.selectFrom('api_logs').select(LIST_COLUMNS).where('project_id', '=', projectId),
        page,
      );
    },

    /** One log of a project, bodies included (its answer, its own or shared); undefined for another project's. */
    get(projectId: string, id: string): Promise<ApiLogView | undefined> {
      return db
        .selectFrom('api_logs as log')
        .leftJoin('api_log_answers as answer', (join) =>
          join
            .onRef('answer.id', '=', 'log.response_answer_id')
            .onRef('answer.project_id', '=', 'log.project_id'),
        )
        .select(
          COLUMNS.filter((column) => column !== 'response_answer_id' && column !== 'response_body').map(
            (column) => `log.${column}` as const,
          ),
        )
        .select((eb) => eb.fn.coalesce('log.response_body', 'answer.body').as('response_body'))
        .where('log.project_id', '=', projectId)
        .where('log.id', '=', id)
        .executeTakeFirst();
    },

    /**
     * API_LOG_RETENTION and API_LOG_MAX_ROWS: logs older than the cutoff (their ids are made when they are
     * written), then each project's past its newest `maxRows`.
     */
    pruneTargets: (cutoff: Date, maxRows: number, now: Date): PruneTarget[] => [
      pruneTarget(db, 'api_logs', 'id', sql<boolean>`id < ${idAt('log', cutoff)}`),
      overCap(maxRows),
      // After the logs: the answers they shared that no log names any more.
      pruneTarget(
        db,
        'api_log_answers',
        'id',
        sql<boolean>`used_at < ${new Date(now.getTime() - ANSWER_KEPT_UNUSED_MS).toISOString()}
          AND NOT EXISTS (SELECT 1 FROM api_logs WHERE api_logs.response_answer_id = api_log_answers.id)`,
      ),
    ],
  };
}

export type ApiLogRepo = ReturnType<typeof createApiLogRepo>;
