import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
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

const tags = ['Webhooks'];

export function registerWebhookRoutes(
  server: FastifyInstance,
  { webhooks }: { webhooks: WebhookService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  /** The list body of each page of views the service serves again unchanged. */
  const serializedPages = createIdentityMemo<Page<WebhookView>, string>();

  app.post(
    '/v1/webhooks',
    {
      config: { permission: 'full_access' },
      schema: {
        tags,
        operationId: 'createWebhook',
        summary: 'Create a webhook endpoint',
        description:
          'Registers a URL to receive the event kinds in `events`, signed with `secret` when one is given (Standard Webhooks). The secret is never returned; `has_secret` says whether one is stored.',
        body: CreateWebhookBody,
        response: { 201: WebhookEnvelope, ...errorResponses() },
      },
    },
    async (request, reply) => {
      const record = await webhooks.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact(async (transaction) => ({ data: await webhooks.create(transaction, record) }));
    },
  );

  app.get(
    '/v1/webhooks',
    {
      config: { permission: 'read_only' },
      schema: {
        tags,
        operationId: 'listWebhooks',
        summary: 'List webhook endpoints, newest first',
        description:
          "The project's webhook endpoints, newest first, in pages of `limit` (cursors `after` / `before`).",
        querystring: ListQuery,
        response: { 200: WebhookList, ...errorResponses() },
      },
    },
    async (request, reply) => {
      const page = await webhooks.list(projectOf(request), toPageRequest(request.query, 'wh'));
      // The same page (unchanged webhooks, from memory) is the same body: serialized once.
      const body = serializedPages(page, () => String(reply.serialize(list(page.items, page.hasMore))));
      return sendSerialized(reply, body);
    },
  );

  app.get(
    '/v1/webhooks/:webhook_id',
    {
      config: { permission: 'read_only' },
      schema: {
        tags,
        operationId: 'getWebhook',
        summary: 'Retrieve a webhook endpoint',
        description: "One webhook endpoint of the project; another project's id is a 404.",
        params: WebhookParams,
        response: { 200: WebhookEnvelope, ...errorResponses() },
      },
    },
    async (request) => ({ data: await webhooks.get(projectOf(request), request.params.webhook_id) }),
  );

  app.patch(
    '/v1/webhooks/:webhook_id',
    {
      config: { permission: 'full_access' },
      schema: {
        tags,
        operationId: 'updateWebhook',
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
      config: { permission: 'full_access' },
      schema: {
        tags,
        operationId: 'deleteWebhook',
        summary: 'Delete a webhook endpoint',
        description:
          'Deletes the endpoint with its delivery log; nothing more is sent to it. Answers `{ data: { id, deleted: true } }`.',
        params: WebhookParams,
        response: { 200: DeletedWebhookEnvelope, ...errorResponses() },
      },
    },
    async (request) => ({ data: await webhooks.delete(projectOf(request), request.params.webhook_id) }),
  );
}
