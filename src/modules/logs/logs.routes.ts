import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import { ApiLog, ApiLogList } from './logs.schemas.ts';
import type { ApiLogService } from './logs.service.ts';

const routes = routeOptions(['Logs']);

export function registerApiLogRoutes(server: FastifyInstance, { logs }: { logs: ApiLogService }): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  // read_only keys read them, as they read every other record of the project (a read_only key may already read
  // the emails whose sends the logs show); the secrets of bodies are never stored.
  app.get(
    '/v1/logs',
    routes.readOnly({
      operationId: 'listLogs',
      summary: "List the API requests the project's keys made, newest first",
      description:
        'Every request made with a key of this project (at `/v1` and `/resend`), newest first, without bodies. Kept `API_LOG_RETENTION` (7 days by default), at most `API_LOG_MAX_ROWS` per project (10,000 by default). Written in batches after the answers: a request may take a fraction of a second to show from another process.',
      querystring: ListQuery,
      response: { 200: ApiLogList, ...errorResponses() },
    }),
    async (request) => {
      const page = await logs.list(projectOf(request), toPageRequest(request.query, 'log'));
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/logs/:id',
    routes.readOnly({
      operationId: 'getLog',
      summary: 'Get an API request’s log, with excerpts of its bodies',
      params: Type.Object({ id: Type.String({ description: 'Log identifier (`log_…`).' }) }),
      response: { 200: ApiLog, ...errorResponses(404) },
    }),
    callUnderPath(logs.get),
  );
}
