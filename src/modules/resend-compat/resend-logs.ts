import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { ListQuery, listOf, toPageRequest } from '../../http/list.ts';
import type { ApiLogSummaryView, ApiLogView } from '../logs/logs.schemas.ts';
import type { ApiLogService } from '../logs/logs.service.ts';
import { hide, IdParams } from './resend-routing.ts';

// Resend's `logs` over GET /v1/logs: the requests every key of the project made, at /v1 and at /resend.

const PREFIX = '/resend';

/** The path as the SDK called it (relative to its base URL) for a /resend request; /v1's as it is. */
const endpointOf = (path: string): string =>
  path.startsWith(`${PREFIX}/`) ? path.slice(PREFIX.length) : path;

const toResendLogItem = (log: ApiLogSummaryView) => ({
  id: log.id,
  created_at: log.created_at,
  endpoint: endpointOf(log.path),
  method: log.method,
  response_status: log.status,
  user_agent: log.user_agent,
});

const toResendLog = (log: ApiLogView) => ({
  object: 'log' as const,
  ...toResendLogItem(log),
  request_body: log.request_body,
  response_body: log.response_body,
});

export function registerResendLogRoutes(
  server: FastifyInstance,
  { apiLogs }: { apiLogs: ApiLogService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/logs',
    { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
    async (request) =>
      listOf(await apiLogs.list(projectOf(request), toPageRequest(request.query, 'log')), toResendLogItem),
  );
  app.get(
    '/logs/:id',
    { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
    async (request) => toResendLog(await apiLogs.get(projectOf(request), request.params.id)),
  );
}
