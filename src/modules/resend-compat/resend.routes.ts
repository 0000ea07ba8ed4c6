import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath, listUnderPath } from '../../http/path-handlers.ts';
import { conflict, DomainError } from '../../lib/errors.ts';
import { list, ListQuery, toPageRequest, listOf } from '../../http/list.ts';
import type { Services } from '../../services.ts';
import { registerResendContactImportRoutes } from './resend-contact-imports.ts';
import {
  BATCH_FILES,
  EMAIL_BODY_LIMIT_BYTES,
  RescheduleEmailBody,
  SEND_FILES,
  SendEmailBatchBody,
  SendEmailBody,
} from '../emails/emails.schemas.ts';
import { prepareFrom, storeSend } from '../emails/emails.routes.ts';
import { CreateTemplateBody, UpdateTemplateBody } from '../templates/templates.schemas.ts';
import { CreateWebhookBody, UpdateWebhookBody } from '../webhooks/webhooks.schemas.ts';
import { registerResendApiKeyRoutes } from './resend-api-keys.ts';
import { registerResendContactRoutes } from './resend-contacts.ts';
import { registerResendDomainRoutes } from './resend-domains.routes.ts';
import { hide, IdParams, translated, WebhookEventParams } from './resend-routing.ts';
import { createDownloadLinks } from './resend-downloads.ts';
import { registerResendReceivingRoutes } from './resend-receiving.ts';
import { registerResendSegmentRoutes } from './resend-segments.ts';
import { registerResendSuppressionRoutes } from './resend-suppressions.ts';
import { registerResendTopicRoutes } from './resend-topics.ts';
import { registerResendAutomationRoutes } from './resend-automations.ts';
import { registerResendBroadcastRoutes } from './resend-broadcasts.ts';
import { registerResendLogRoutes } from './resend-logs.ts';
import { registerResendUsageRoutes } from './resend-usage.ts';
import { registerResendMetricsRoutes } from './resend-metrics.ts';
import { toPostwireSend, toResendEmail, toResendListEmail } from './resend-emails.ts';
import { isPostwireErrorBody, notImplemented, toResendError } from './resend-errors.ts';
import { toPostwireTemplate, toResendTemplate, toResendTemplateListItem } from './resend-templates.ts';
import {
  newSigningSecret,
  toPostwireWebhook,
  pageOfAttempts,
  toResendEventDetail,
  toResendEventLog,
  toResendWebhook,
} from './resend-webhooks.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** /resend routes: Postwire field names in error messages, as the Resend field the client sent. */
    resendFields?: Record<string, string>;
  }
}

/** The base path: `RESEND_BASE_URL=https://host/resend` (or the SDK's `baseUrl`) is the whole migration. */
export const RESEND_PREFIX = '/resend';

// Resend's resources that Postwire has no equivalent of, by the first segment of their path.
const NOT_IN_POSTWIRE: Record<string, string> = {
  inboxes: 'inboxes',
  oauth: 'OAuth grants',
};
// Resources the adapter has, some of whose operations it does not (share, metrics, claims, key renames…).
const PARTLY: Record<string, string> = {
  emails: 'emails',
  domains: 'domains',
  templates: 'templates',
  webhooks: 'webhooks',
  'api-keys': 'API keys',
  contacts: 'contacts',
  segments: 'segments',
  topics: 'topics',
  // The SDK's audiences are its segments (at /segments); only a contact created, read or changed through an
  // audience's path (the SDK's deprecated `audienceId`) comes here.
  audiences: 'audiences',
};

/**
 * A Resend-compatible API at /resend, for Resend's SDK (resend@6): its request and response shapes over the
 * same services as /v1, every rule theirs; Postwire's error bodies become Resend's `{ statusCode, name,
 * message }` (see docs/api/resend.md). Hidden from the OpenAPI document, which describes /v1.
 */
export async function registerResendRoutes(server: FastifyInstance, services: Services): Promise<void> {
  const { emails, templates, webhooks, webhookOperations, events } = services;
  await server.register(
    async (scope) => {
      // Every error answered under /resend (validation, the auth hook's 401, rate limits, idempotency,
      // services' refusals) passes here as Postwire's body, and leaves in Resend's.
      scope.addHook('preSerialization', async (request, reply, payload) => {
        if (reply.statusCode < 400 || !isPostwireErrorBody(payload)) return payload;
        const error = toResendError(reply.statusCode, payload.error);
        for (const [from, to] of Object.entries(request.routeOptions.config.resendFields ?? {})) {
          error.message = error.message.replaceAll(`'${from}'`, `'${to}'`);
        }
        return error;
      });

      const app = scope.withTypeProvider<TypeBoxTypeProvider>();

      // Emails.
      app.post(
        '/emails',
        {
          bodyLimit: EMAIL_BODY_LIMIT_BYTES,
          config: { permission: 'sending_access', base64Fields: SEND_FILES },
          schema: { ...hide, body: SendEmailBody },
          preValidation: translated((body) => toPostwireSend(body)),
        },
        async (request, reply) => {
          const plan = await prepareFrom(request, emails.prepareSend);
          const [accepted] = emails.acceptedViews(plan);
          const answer = { id: accepted!.id };
          return storeSend(reply, emails, plan, answer);
        },
      );

      app.post(
        '/emails/batch',
        {
          bodyLimit: EMAIL_BODY_LIMIT_BYTES,
          config: { permission: 'sending_access', base64Fields: BATCH_FILES },
          schema: { ...hide, body: SendEmailBatchBody },
          preValidation: translated((body) =>
            Array.isArray(body) ? body.map((email, index) => toPostwireSend(email, `[${index}].`)) : body,
          ),
        },
        async (request, reply) => {
          const plan = await prepareFrom(request, emails.prepareBatch);
          // Postwire's batch is all or nothing (Resend's `strict`); asked for `permissive`, an accepted
          // batch answers with no errors, as Resend's does.
          const permissive = request.headers['x-batch-validation'] === 'permissive';
          const answer = {
            data: emails.acceptedViews(plan).map(({ id }) => ({ id })),
            ...(permissive ? { errors: [] } : {}),
          };
          return storeSend(reply, emails, plan, answer);
        },
      );

      app.get(
        '/emails',
        { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
        async (request) => {
          const page = await emails.list(projectOf(request), toPageRequest(request.query, 'msg'));
          return listOf(page, toResendListEmail);
        },
      );

      registerResendMetricsRoutes(scope, services);
      registerResendReceivingRoutes(scope, {
        ...services,
        downloads: createDownloadLinks(services),
      });

      app.get(
        '/emails/:id',
        { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
        async (request) => toResendEmail(await emails.get(projectOf(request), request.params.id)),
      );

      app.patch(
        '/emails/:id',
        {
          config: { permission: 'full_access' },
          schema: { ...hide, params: IdParams, body: RescheduleEmailBody },
        },
        async (request, reply) => {
          const plan = await emails.prepareReschedule(projectOf(request), request.params.id, request.body);
          return reply.transact(async (transaction) => {
            const email = await emails.reschedule(transaction, plan);
            return { object: 'email', id: email.id };
          });
        },
      );

      app.post(
        '/emails/:id/cancel',
        { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
        async (request, reply) => {
          const plan = await emails.prepareCancel(projectOf(request), request.params.id);
          return reply.transact(async (transaction) => {
            const email = await emails.cancel(transaction, plan);
            return { object: 'email', id: email.id };
          });
        },
      );

      // Templates.
      app.post(
        '/templates',
        {
          config: { permission: 'full_access' },
          schema: { ...hide, body: CreateTemplateBody },
          preValidation: translated(toPostwireTemplate),
        },
        async (request, reply) => {
          const record = templates.prepareCreate(projectOf(request), request.body);
          return reply.transact(async (transaction) => {
            const template = await templates.create(transaction, record);
            return { object: 'template', id: template.id };
          });
        },
      );

      app.get(
        '/templates',
        { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
        async (request) => {
          const page = await templates.list(projectOf(request), toPageRequest(request.query, 'tpl'));
          return listOf(page, toResendTemplateListItem);
        },
      );

      app.get(
        '/templates/:id',
        { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
        async (request) => toResendTemplate(await templates.get(projectOf(request), request.params.id)),
      );

      app.patch(
        '/templates/:id',
        {
          config: { permission: 'full_access' },
          schema: { ...hide, params: IdParams, body: UpdateTemplateBody },
          preValidation: translated(toPostwireTemplate),
        },
        async (request) => {
          const template = await templates.update(projectOf(request), request.params.id, request.body);
          return { object: 'template', id: template.id };
        },
      );

      app.delete(
        '/templates/:id',
        { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
        callUnderPath(templates.delete),
      );

      app.post(
        '/templates/:id/publish',
        { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
        async (request, reply) => {
          const plan = await templates.preparePublish(projectOf(request), request.params.id, {});
          return reply.transact(async (transaction) => {
            const published = await templates.publish(transaction, plan);
            return { object: 'template', id: published.id };
          });
        },
      );

      // A copy of the draft under a new name (aliases are unique, so the copy has none), through the same
      // create as any template.
      app.post(
        '/templates/:id/duplicate',
        { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
        async (request, reply) => {
          const projectId = projectOf(request);
          const original = await templates.get(projectId, request.params.id);
          const record = templates.prepareCreate(projectId, {
            name: `${original.name} (copy)`.slice(0, 200),
            subject: original.subject,
            html: original.html,
            text: original.text,
            variables: original.variables,
            variable_defaults: original.variable_defaults,
          });
          return reply.transact(async (transaction) => {
            const template = await templates.create(transaction, record);
            return { object: 'template', id: template.id };
          });
        },
      );

      registerResendDomainRoutes(scope, services);

      // Webhooks.
      const webhookFields = { resendFields: { url: 'endpoint', enabled: 'status' } };
      app.post(
        '/webhooks',
        {
          config: { permission: 'full_access', ...webhookFields },
          schema: { ...hide, body: CreateWebhookBody },
          preValidation: translated((body) => {
            const webhook = toPostwireWebhook(body);
            // Resend's handlers read Resend's payloads: an endpoint made here gets them unless it says otherwise.
            return typeof webhook === 'object' && webhook !== null
              ? { format: 'resend', ...webhook, secret: newSigningSecret() }
              : webhook;
          }),
        },
        async (request, reply) => {
          const record = await webhooks.prepareCreate(projectOf(request), request.body);
          const secret = request.body.secret!;
          return reply.transact(async (transaction) => {
            const webhook = await webhooks.create(transaction, record);
            return { object: 'webhook', id: webhook.id, signing_secret: secret };
          });
        },
      );

      app.get(
        '/webhooks',
        { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
        async (request) => {
          const page = await webhooks.list(projectOf(request), toPageRequest(request.query, 'wh'));
          return listOf(page, (webhook) => {
            const { object: _object, ...item } = toResendWebhook(webhook);
            return item;
          });
        },
      );

      app.get(
        '/webhooks/:id',
        { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
        async (request) => toResendWebhook(await webhooks.get(projectOf(request), request.params.id)),
      );

      app.patch(
        '/webhooks/:id',
        {
          config: { permission: 'full_access', ...webhookFields },
          schema: { ...hide, params: IdParams, body: UpdateWebhookBody },
          preValidation: translated(toPostwireWebhook),
        },
        async (request) => {
          const webhook = await webhooks.update(projectOf(request), request.params.id, request.body);
          return { object: 'webhook', id: webhook.id };
        },
      );

      // Resend makes the new secret and answers it once. It is /v1's rotation (PATCH with `secret`): the old
      // secret signs next to the new one until WEBHOOK_SECRET_ROTATION_WINDOW ends, then stops.
      app.post(
        '/webhooks/:id/signing-secret/rotate',
        { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
        async (request) => {
          const secret = newSigningSecret();
          const webhook = await webhooks.update(projectOf(request), request.params.id, { secret });
          return { object: 'webhook', id: webhook.id, signing_secret: secret };
        },
      );

      // The event log: Postwire's delivery log of the webhook (GET /v1/webhooks/{id}/deliveries).
      app.get(
        '/webhooks/:id/events',
        {
          config: { permission: 'read_only' },
          schema: { ...hide, params: IdParams, querystring: ListQuery },
        },
        listUnderPath('dlv', webhookOperations.listDeliveries, toResendEventLog),
      );

      app.get(
        '/webhooks/:id/events/:eventId',
        { config: { permission: 'read_only' }, schema: { ...hide, params: WebhookEventParams } },
        async (request) => {
          const { id, eventId } = request.params;
          const delivery = await webhookOperations.getDelivery(projectOf(request), id, eventId);
          const event = await events.get(projectOf(request), delivery.event_id);
          return toResendEventDetail(delivery, event);
        },
      );

      // A replay is /v1's redelivery of the event to this webhook alone: a new delivery, due now.
      app.post(
        '/webhooks/:id/events/:eventId/replay',
        { config: { permission: 'full_access' }, schema: { ...hide, params: WebhookEventParams } },
        async (request, reply) => {
          const { id, eventId } = request.params;
          const delivery = await webhookOperations.getDelivery(projectOf(request), id, eventId);
          const plan = await events
            .prepareRedeliver(projectOf(request), delivery.event_id, { webhookId: id })
            .catch((error: unknown) => {
              // /v1's wording names /v1's field; a Resend client enables a webhook with its `status`.
              if (error instanceof DomainError && error.code === 'webhook_disabled') {
                throw conflict(
                  error.code,
                  `Webhook '${id}' is disabled; enable it (webhooks.update with status 'enabled') to replay events to it.`,
                  'webhookId',
                );
              }
              throw error;
            });
          const redelivery = await reply.transact((transaction) => events.redeliver(transaction, plan));
          return { object: 'webhook_event', id: redelivery.delivery_ids[0]! };
        },
      );

      app.get(
        '/webhooks/:id/events/:eventId/attempts',
        {
          config: { permission: 'read_only' },
          schema: { ...hide, params: WebhookEventParams, querystring: ListQuery },
        },
        async (request) => {
          const { id, eventId } = request.params;
          const delivery = await webhookOperations.getDelivery(projectOf(request), id, eventId);
          const page = pageOfAttempts(delivery, request.query);
          return list(page.items, page.hasMore);
        },
      );

      app.delete(
        '/webhooks/:id',
        { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
        async (request) => {
          const { id } = await webhooks.delete(projectOf(request), request.params.id);
          return { object: 'webhook', id, deleted: true };
        },
      );

      // Contacts and contact properties; /contacts/imports before /contacts/:id, which would take it for one.
      registerResendContactImportRoutes(scope, services);
      registerResendContactRoutes(scope, services);
      registerResendSegmentRoutes(scope, services);
      registerResendTopicRoutes(scope, services);
      registerResendSuppressionRoutes(scope, services);
      registerResendBroadcastRoutes(scope, services);
      registerResendAutomationRoutes(scope, services);

      registerResendApiKeyRoutes(scope, services);
      registerResendLogRoutes(scope, services);
      registerResendUsageRoutes(scope, services);

      // Everything else: 501 for what Resend has and Postwire does not, 404 for what neither has.
      app.route({
        method: ['GET', 'POST', 'PATCH', 'PUT', 'DELETE'],
        url: '/*',
        config: { permission: 'read_only' },
        schema: hide,
        handler: async (request, reply) => {
          const path = request.url.split('?')[0]!.slice(RESEND_PREFIX.length);
          const resource = path.split('/')[1] ?? '';
          const missing = NOT_IN_POSTWIRE[resource];
          if (missing) {
            return notImplemented(
              reply,
              `Postwire does not implement ${missing}; at /resend it answers emails, batch, templates, domains, webhooks, API keys, contacts, contact properties, segments, topics, suppressions, received emails, broadcasts, automations, events, logs and usage (docs/api/resend.md).`,
            );
          }
          const partly = PARTLY[resource];
          if (partly) {
            return notImplemented(
              reply,
              `Postwire does not implement ${request.method} ${path} of Resend's ${partly} API (docs/api/resend.md says what /resend answers).`,
            );
          }
          reply.code(404);
          return { statusCode: 404, name: 'not_found', message: `No route ${request.method} ${path}.` };
        },
      });
    },
    { prefix: RESEND_PREFIX },
  );
}
