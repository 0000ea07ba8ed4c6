import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { ListQuery, toPageRequest, listOf } from '../../http/list.ts';
import {
  CreateInboundRouteBody,
  DeletedInboundRoute,
  InboundRoute,
  InboundRouteList,
  InboundRouteParams,
  UpdateInboundRouteBody,
} from './inbound-routes.schemas.ts';
import { type InboundRouteService, toInboundRouteView } from './inbound-routes.service.ts';

const routes = routeOptions(['Inbound routes']);

export function registerInboundRouteRoutes(
  server: FastifyInstance,
  { inboundRoutes }: { inboundRoutes: InboundRouteService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/v1/inbound-routes',
    routes.fullAccess({
      operationId: 'createInboundRoute',
      summary: 'Create an inbound route',
      description:
        "Which of this project's addresses take mail, and what happens to it. The listener refuses (550 5.1.1) every recipient no route takes, at RCPT: nothing is accepted and bounced later.",
      body: CreateInboundRouteBody,
      response: { 201: InboundRoute, ...errorResponses() },
    }),
    async (request, reply) => {
      const route = await inboundRoutes.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact(async (transaction) =>
        toInboundRouteView(await inboundRoutes.create(transaction, route)),
      );
    },
  );

  app.get(
    '/v1/inbound-routes',
    routes.readOnly({
      operationId: 'listInboundRoutes',
      summary: 'List inbound routes, newest first',
      description:
        "This project's routes, enabled or not; the listener tries them by priority, not in this order.",
      querystring: ListQuery,
      response: { 200: InboundRouteList, ...errorResponses() },
    }),
    async (request) => {
      const page = await inboundRoutes.list(projectOf(request), toPageRequest(request.query, 'rte'));
      return listOf(page, toInboundRouteView);
    },
  );

  app.get(
    '/v1/inbound-routes/:id',
    routes.readOnly({
      operationId: 'getInboundRoute',
      summary: 'Retrieve an inbound route',
      description: 'One route of this project; 404 for any other.',
      params: InboundRouteParams,
      response: { 200: InboundRoute, ...errorResponses() },
    }),
    async (request) => toInboundRouteView(await inboundRoutes.get(projectOf(request), request.params.id)),
  );

  app.patch(
    '/v1/inbound-routes/:id',
    routes.fullAccess({
      operationId: 'updateInboundRoute',
      summary: 'Update an inbound route',
      description: 'Only the fields sent change; the next RCPT uses them.',
      params: InboundRouteParams,
      body: UpdateInboundRouteBody,
      response: { 200: InboundRoute, ...errorResponses() },
    }),
    async (request) =>
      toInboundRouteView(await inboundRoutes.update(projectOf(request), request.params.id, request.body)),
  );

  app.delete(
    '/v1/inbound-routes/:id',
    routes.fullAccess({
      operationId: 'deleteInboundRoute',
      summary: 'Delete an inbound route',
      description: 'Its addresses are refused from the next RCPT on; mail already received stays.',
      params: InboundRouteParams,
      response: { 200: DeletedInboundRoute, ...errorResponses() },
    }),
    callUnderPath(inboundRoutes.remove),
  );
}
