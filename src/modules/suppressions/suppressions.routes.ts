import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, toPageRequest, listOf } from '../../http/list.ts';
import {
  AddSuppressionsBody,
  DeletedSuppression,
  Suppression,
  SuppressionList,
  SuppressionListQuery,
  SuppressionParams,
} from './suppressions.schemas.ts';
import { type SuppressionService, toSuppressionView } from './suppressions.service.ts';

const routes = routeOptions(['Suppressions']);

export function registerSuppressionRoutes(
  server: FastifyInstance,
  { suppressions }: { suppressions: SuppressionService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/suppressions',
    routes.readOnly({
      operationId: 'listSuppressions',
      summary: 'List suppressed addresses, newest first',
      description: 'The addresses this project never sends to, newest first, optionally for one `reason`.',
      querystring: SuppressionListQuery,
      response: { 200: SuppressionList, ...errorResponses() },
    }),
    async (request) => {
      const { reason, ...query } = request.query;
      const page = await suppressions.list(projectOf(request), toPageRequest(query, 'sup'), reason);
      return listOf(page, toSuppressionView);
    },
  );

  app.get(
    '/v1/suppressions/:address',
    routes.readOnly({
      operationId: 'getSuppression',
      summary: 'Retrieve the suppression of an address',
      description: 'The suppression of one address (any case); 404 when it is not suppressed.',
      params: SuppressionParams,
      response: { 200: Suppression, ...errorResponses() },
    }),
    async (request) => toSuppressionView(await suppressions.get(projectOf(request), request.params.address)),
  );

  app.post(
    '/v1/suppressions',
    routes.fullAccess({
      operationId: 'createSuppressions',
      summary: 'Add addresses to the suppression list',
      description:
        'Sends to these addresses stop: their recipients are `suppressed` and an `email.suppressed` event says so. Answers every entry for them, new or already there.',
      body: AddSuppressionsBody,
      response: { 201: SuppressionList, ...errorResponses() },
    }),
    async (request, reply) => {
      const entries = suppressions.prepareAdd(projectOf(request), request.body);
      reply.code(201);
      return reply.transact(async (transaction) =>
        list((await suppressions.add(transaction, entries)).map(toSuppressionView), false),
      );
    },
  );

  app.delete(
    '/v1/suppressions/:address',
    routes.fullAccess({
      operationId: 'deleteSuppression',
      summary: 'Remove an address from the suppression list',
      description:
        'Sends to the address are allowed again. Hard bounces and complaints put it back if they happen again.',
      params: SuppressionParams,
      response: { 200: DeletedSuppression, ...errorResponses() },
    }),
    async (request) => suppressions.remove(projectOf(request), request.params.address),
  );
}
