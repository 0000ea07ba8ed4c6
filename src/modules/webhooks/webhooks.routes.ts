import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, ListQuery, sendSerialized, toPageRequest } from '../../http/list.ts';
import {
  CreateWebhookBody,
  DeletedWebhookEnvelope,
  DeliveryList,
  DeliveryListQuery,
  RecoverWebhookBody,
  TestWebhookBody,
  UpdateWebhookBody,
  WebhookEnvelope,
  WebhookList,
  WebhookParams,
  WebhookRecovery,
  WebhookTest,
  type WebhookView,
} from './webhooks.schemas.ts';
import type { WebhookOperations } from './webhook-operations.service.ts';
import type { WebhookService } from './webhooks.service.ts';
import type { Page } from '../../db/pagination.ts';
import { createIdentityMemo } from '../../lib/memo.ts';

const tags = ['Webhooks'];

export function registerWebhookRoutes(
  server: FastifyInstance,
  { webhooks, operations }: { webhooks: WebhookService; operations: WebhookOperations },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  /** The list body of each page of views the service serves again unchanged. */
  const serializedPages = createIdentityMemo<Page<WebhookView>, string>();

  app.post(
    '/v1/webhooks',
    {
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

  app.get(
    '/v1/webhooks/:webhook_id/deliveries',
    {
      schema: {
        tags,
        operationId: 'listWebhookDeliveries',
        summary: "List a webhook's deliveries, newest first",
        description:
          'One delivery per event sent to the webhook (a redelivery adds another), each with every attempt: when, the status code, how long it took, the error and the start of the response.',
        params: WebhookParams,
        querystring: DeliveryListQuery,
        response: { 200: DeliveryList, ...errorResponses() },
      },
    },
    async (request) => {
      const { status, ...query } = request.query;
      const page = await operations.listDeliveries(
        projectOf(request),
        request.params.webhook_id,
        toPageRequest(query, 'dlv'),
        status,
      );
      return list(page.items, page.hasMore);
    },
  );

  app.post(
    '/v1/webhooks/:webhook_id/test',
    {
      // It waits for a worker to attempt the event it emits, which must be committed for the worker to see.
      config: { idempotencyOutsideTransaction: true },
      // The body is optional: without one, an `email.sent` test event is sent.
      preValidation: async (request) => {
        request.body ??= {};
      },
      schema: {
        tags,
        operationId: 'testWebhook',
        summary: 'Send a test event to a webhook',
        description:
          'Emits an event of the given kind with sample data (`test: true`) to this webhook alone, subscribed to the kind or not, through the normal delivery queue (a failure is retried on the schedule). Waits for the first attempt, up to the webhook timeout plus a few seconds, and answers with its outcome; if no worker made it in that time, `success` is false and the delivery stays queued. A disabled webhook is a 409.',
        params: WebhookParams,
        body: TestWebhookBody,
        response: { 200: WebhookTest, ...errorResponses(409) },
      },
    },
    async (request) => operations.test(projectOf(request), request.params.webhook_id, request.body),
  );

  app.post(
    '/v1/webhooks/:webhook_id/recover',
    {
      // A missing body then reads as a missing `since` (422 naming it), not as a body of the wrong type.
      preValidation: async (request) => {
        request.body ??= {} as typeof request.body;
      },
      schema: {
        tags,
        operationId: 'recoverWebhook',
        summary: "Re-queue a webhook's failed deliveries",
        description:
          'Every failed delivery of the webhook created since `since` becomes pending again, due now, and starts the retry schedule over; its earlier attempts stay in its log. The webhook must be enabled (409 otherwise).',
        params: WebhookParams,
        body: RecoverWebhookBody,
        response: { 200: WebhookRecovery, ...errorResponses(409) },
      },
    },
    async (request, reply) => {
      const plan = await operations.prepareRecover(
        projectOf(request),
        request.params.webhook_id,
        request.body,
      );
      return reply.transact((transaction) => operations.recover(transaction, plan));
    },
  );
}
