import { mapPage, type Page, type PageRequest } from '../../db/pagination.ts';
import { notFound } from '../../lib/errors.ts';
import { isId } from '../../lib/ids.ts';
import type { ApiLogRecorder } from './log-recorder.ts';
import type { ApiLogRepo, ApiLogSummaryRow, ApiLogView as ApiLogStored } from './logs.repo.ts';
import type { ApiLogSummaryView, ApiLogView } from './logs.schemas.ts';

const toSummary = (row: ApiLogSummaryRow): ApiLogSummaryView => ({
  object: 'log',
  id: row.id,
  created_at: row.created_at,
  method: row.method,
  path: row.path,
  status: Number(row.status),
  duration_ms: Number(row.duration_us) / 1000,
  api_key_id: row.api_key_id,
  user_agent: row.user_agent,
});

const parsed = (text: string | null): unknown => (text === null ? null : JSON.parse(text));

/** The API requests a project's keys made (GET /v1/logs, Resend's `logs`), newest first. */
export function createApiLogService({ repo, recorder }: { repo: ApiLogRepo; recorder: ApiLogRecorder }) {
  return {
    /** Takes each authenticated request's log, after its answer (src/modules/logs/logs.hook.ts). */
    recorder,

    /** Newest first. This process's logs not written yet are written first, so a client sees its last requests. */
    async list(projectId: string, page: PageRequest): Promise<Page<ApiLogSummaryView>> {
      await recorder.flush();
      return mapPage(await repo.list(projectId, page), toSummary);
    },

    async get(projectId: string, id: string): Promise<ApiLogView> {
      await recorder.flush();
      const row: ApiLogStored | undefined = isId('log', id) ? await repo.get(projectId, id) : undefined;
      if (!row) throw notFound('log', id);
      return {
        ...toSummary(row),
        request_body: parsed(row.request_body),
        response_body: parsed(row.response_body),
      };
    },
  };
}

export type ApiLogService = ReturnType<typeof createApiLogService>;
