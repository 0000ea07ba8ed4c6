import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, ListQuery, sendSerialized, toPageRequest } from '../../http/list.ts';
import {
  CreateWebhookBody,
  DeletedWebhookEnvelope,
  UpdateWebhookBody,
  WebhookEnvelope,
  WebhookList,
  WebhookParams,
  type WebhookView,
} from './webhooks.schemas.ts';
import type { WebhookService } from './webhooks.service.ts';
import type { Page } from '../../db/pagination.ts';
import { createIdentityMemo } from '../../lib/memo.ts';

const routes = routeOptions(['Webhooks']);

export function registerWebhookRoutes(
  server: FastifyInstance,
  { webhooks }: { webhooks: WebhookService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  /** The list body of each page of views the service serves again unchanged, as the bytes sent. */
  const serializedPages = createIdentityMemo<Page<WebhookView>, Buffer>();

  app.post(
    '/v1/webhooks',
    routes.fullAccess({
      operationId: 'createWebhook',
      summary: 'Create a webhook endpoint',
      description:
        'Registers a URL to receive the event kinds in `events`, signed with `secret` when one is given (Standard Webhooks). The secret is never returned; `has_secret` says whether one is stored.',
      body: CreateWebhookBody,
      response: { 201: WebhookEnvelope, ...errorResponses() },
    }),
    async (request, reply) => {
      const record = await webhooks.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact(async (transaction) => ({ data: await webhooks.create(transaction, record) }));
    },
  );

  app.get(
    '/v1/webhooks',
    routes.readOnly({
      operationId: 'listWebhooks',
      summary: 'List webhook endpoints, newest first',
      description:
        "The project's webhook endpoints, newest first, in pages of `limit` (cursors `after` / `before`).",
      querystring: ListQuery,
      response: { 200: WebhookList, ...errorResponses() },
    }),
    async (request, reply) => {
      const page = await webhooks.list(projectOf(request), toPageRequest(request.query, 'wh'));
      // The same page (unchanged webhooks, from memory) is the same body: serialized once.
      const body = serializedPages(page, () =>
        Buffer.from(String(reply.serialize(list(page.items, page.hasMore)))),
      );
      return sendSerialized(reply, body);
    },
  );

  app.get(
    '/v1/webhooks/:webhook_id',
    routes.readOnly({
      operationId: 'getWebhook',
      summary: 'Retrieve a webhook endpoint',
      description: "One webhook endpoint of the project; another project's id is a 404.",
      params: WebhookParams,
      response: { 200: WebhookEnvelope, ...errorResponses() },
    }),
    async (request) => ({ data: await webhooks.get(projectOf(request), request.params.webhook_id) }),
  );

  app.patch(
    '/v1/webhooks/:webhook_id',
    routes.fullAccess({
      operationId: 'updateWebhook',
      summary: 'Update a webhook endpoint',
      description: 'Only the fields sent change. `secret: null` removes the signing secret.',
      params: WebhookParams,
      body: UpdateWebhookBody,
      response: { 200: WebhookEnvelope, ...errorResponses() },
    }),
    async (request) => ({
      data: await webhooks.update(projectOf(request), request.params.webhook_id, request.body),
    }),
  );

  app.delete(
    '/v1/webhooks/:webhook_id',
    routes.fullAccess({
      operationId: 'deleteWebhook',
      summary: 'Delete a webhook endpoint',
      description:
        'Deletes the endpoint with its delivery log; nothing more is sent to it. Answers `{ data: { id, deleted: true } }`.',
      params: WebhookParams,
      response: { 200: DeletedWebhookEnvelope, ...errorResponses() },
    }),
    async (request) => ({ data: await webhooks.delete(projectOf(request), request.params.webhook_id) }),
  );
}
