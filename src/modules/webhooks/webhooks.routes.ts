import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import {
  CreateWebhookBody,
  DeletedWebhookEnvelope,
  UpdateWebhookBody,
  WebhookEnvelope,
  WebhookList,
  WebhookParams,
} from './webhooks.schemas.ts';
import type { WebhookService } from './webhooks.service.ts';

const tags = ['Webhooks'];

export function registerWebhookRoutes(
  server: FastifyInstance,
  { webhooks }: { webhooks: WebhookService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/v1/webhooks',
    {
      schema: {
        tags,
        summary: 'Create a webhook endpoint',
        body: CreateWebhookBody,
        response: { 201: WebhookEnvelope, ...errorResponses() },
      },
    },
    async (request, reply) => {
      const data = await webhooks.create(projectOf(request), request.body);
      return reply.code(201).send({ data });
    },
  );

  app.get(
    '/v1/webhooks',
    {
      schema: {
        tags,
        summary: 'List webhook endpoints, newest first',
        querystring: ListQuery,
        response: { 200: WebhookList, ...errorResponses() },
      },
    },
    async (request) => {
      const page = await webhooks.list(projectOf(request), toPageRequest(request.query));
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/webhooks/:webhook_id',
    {
      schema: {
        tags,
        summary: 'Retrieve a webhook endpoint',
        params: WebhookParams,
        response: { 200: WebhookEnvelope, ...errorResponses() },
      },
    },
    async (request) => ({ data: await webhooks.get(projectOf(request), request.params.webhook_id) }),
  );

  app.patch(
    '/v1/webhooks/:webhook_id',
    {
      schema: {
        tags,
        summary: 'Update a webhook endpoint',
        description: 'Only the fields sent change. `secret: null` removes the signing secret.',
        params: WebhookParams,
        body: UpdateWebhookBody,
        response: { 200: WebhookEnvelope, ...errorResponses() },
      },
    },
    async (request) => ({
      data: await webhooks.update(projectOf(request), request.params.webhook_id, request.body),
    }),
  );

  app.delete(
    '/v1/webhooks/:webhook_id',
    {
      schema: {
        tags,
        summary: 'Delete a webhook endpoint',
        params: WebhookParams,
        response: { 200: DeletedWebhookEnvelope, ...errorResponses() },
      },
    },
    async (request) => ({ data: await webhooks.delete(projectOf(request), request.params.webhook_id) }),
  );
}
