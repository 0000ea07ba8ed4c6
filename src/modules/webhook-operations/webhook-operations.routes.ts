import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, toPageRequest } from '../../http/list.ts';
import { WebhookParams } from '../webhooks/webhooks.schemas.ts';
import {
  DeliveryList,
  DeliveryListQuery,
  RecoverWebhookBody,
  TestWebhookBody,
  WebhookRecovery,
  WebhookTest,
} from './webhook-operations.schemas.ts';
import type { WebhookOperations } from './webhook-operations.service.ts';

// Under /v1/webhooks/{id} with the webhook routes, and in their tag: apart from them because these use the
// event and delivery services, which depend on the webhooks module.
const routes = routeOptions(['Webhooks']);

export function registerWebhookOperationRoutes(
  server: FastifyInstance,
  { operations }: { operations: WebhookOperations },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/webhooks/:webhook_id/deliveries',
    routes.readOnly({
      operationId: 'listWebhookDeliveries',
      summary: "List a webhook's deliveries, newest first",
      description:
        'One delivery per event sent to the webhook (a redelivery adds another), each with every attempt: when, the status code, how long it took, the error and the start of the response.',
      params: WebhookParams,
      querystring: DeliveryListQuery,
      response: { 200: DeliveryList, ...errorResponses() },
    }),
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
    // It waits for a worker to attempt the event it emits, which must be committed for the worker to see.
    // The body is optional: without one, an `email.sent` test event is sent.
    routes.fullAccess(
      {
        operationId: 'testWebhook',
        summary: 'Send a test event to a webhook',
        description:
          'Emits an event of the given kind with sample data (`test: true`) to this webhook alone, subscribed to the kind or not, through the normal delivery queue (a failure is retried on the schedule). Waits for the first attempt, up to the webhook timeout plus a few seconds, and answers with its outcome; if no worker made it in that time, `success` is false and the delivery stays queued. A disabled webhook is a 409.',
        params: WebhookParams,
        body: TestWebhookBody,
        response: { 200: WebhookTest, ...errorResponses(409) },
      },
      { idempotencyOutsideTransaction: true, optionalBody: true },
    ),
    async (request) => operations.test(projectOf(request), request.params.webhook_id, request.body),
  );

  app.post(
    '/v1/webhooks/:webhook_id/recover',
    // A missing body then reads as a missing `since` (422 naming it), not as a body of the wrong type.
    routes.fullAccess(
      {
        operationId: 'recoverWebhook',
        summary: "Re-queue a webhook's failed deliveries",
        description:
          'Every failed delivery of the webhook created since `since` becomes pending again, due now, and starts the retry schedule over; its earlier attempts stay in its log. The webhook must be enabled (409 otherwise).',
        params: WebhookParams,
        body: RecoverWebhookBody,
        response: { 200: WebhookRecovery, ...errorResponses(409) },
      },
      { optionalBody: true },
    ),
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
