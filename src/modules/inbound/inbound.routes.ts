import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { ListQuery, toPageRequest, listOf } from '../../http/list.ts';
import { InboundMessage, InboundMessageList, InboundMessageParams } from './inbound.schemas.ts';
import { type InboundService, toInboundView } from './inbound.service.ts';

const routes = routeOptions(['Inbound messages']);

export function registerInboundRoutes(
  server: FastifyInstance,
  { inbound }: { inbound: InboundService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/inbound-messages',
    routes.readOnly({
      operationId: 'listInboundMessages',
      summary: 'List the reports received about your emails, newest first',
      description:
        'Bounce, delay and success reports (RFC 3464) and complaints (RFC 5965) mailed back to the return paths of your emails, each with how it was read and what it changed. Reports that matched no email, or could not be read, belong to no project: the operator lists them with `postwire inbound list`.',
      querystring: ListQuery,
      response: { 200: InboundMessageList, ...errorResponses() },
    }),
    async (request) => {
      const page = await inbound.list(projectOf(request), toPageRequest(request.query, 'inb'));
      return listOf(page, toInboundView);
    },
  );

  app.get(
    '/v1/inbound-messages/:id',
    routes.readOnly({
      operationId: 'getInboundMessage',
      summary: 'Retrieve a received report',
      description: 'One report matched to an email of this project, with how it was read; 404 for any other.',
      params: InboundMessageParams,
      response: { 200: InboundMessage, ...errorResponses() },
    }),
    async (request) => toInboundView(await inbound.get(projectOf(request), request.params.id)),
  );
}
