import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { DecodedFields } from '../../lib/base64.ts';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, toPageRequest } from '../../http/list.ts';
import { jsonWithTextOf } from '../../lib/byte-chunks.ts';
import {
  AcceptedEmail,
  AcceptedEmailList,
  Email,
  BATCH_FILES,
  EMAIL_BODY_LIMIT_BYTES,
  EmailList,
  EmailListQuery,
  EmailParams,
  RawEmail,
  RescheduleEmailBody,
  SEND_FILES,
  SendEmailBatchBody,
  SendEmailBody,
} from './emails.schemas.ts';
import type { EmailService, KeySender, SendPlan } from './emails.service.ts';

const routes = routeOptions(['Emails']);

/**
 * Stores a prepared send and answers `answer`: with an Idempotency-Key, in the key's transaction (the emails
 * and the saved answer commit together); without one, through the send groups (`accept`). Its large files are
 * written to their pieces first, outside either transaction. For every route that sends (/v1 and /resend).
 */
export function storeSend<T>(
  reply: FastifyReply,
  emails: EmailService,
  plan: SendPlan,
  answer: T,
): Promise<T | FastifyReply> {
  // A replay of the key answers before the route runs; one that races this request to the key answers
  // without `write`, leaving pieces no row names, which retention removes.
  return emails.withContentInPieces(plan, (kept) =>
    reply.transact(
      async (transaction) => {
        await emails.writeSend(transaction, kept);
        return answer;
      },
      {
        withoutKey: async () => {
          await emails.accept(kept);
          return answer;
        },
      },
    ),
  );
}

/**
 * Prepares the send of an authenticated request's body with `prepare` (the service's prepareSend or
 * prepareBatch): as its key's project and sender, with the files decoded with its body. For every route that
 * sends (/v1 and /resend).
 */
export function prepareFrom<B>(
  request: FastifyRequest & { body: B },
  prepare: (projectId: string, body: B, sender: KeySender, decoded?: DecodedFields) => Promise<SendPlan>,
): Promise<SendPlan> {
  return prepare(projectOf(request), request.body, request.caller!, request.decodedFields);
}

export function registerEmailRoutes(server: FastifyInstance, { emails }: { emails: EmailService }): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/v1/emails',
    {
      ...routes.sendingAccess(
        {
          operationId: 'sendEmail',
          summary: 'Send an email',
          description:
            'Stores the email, then answers 202: it is sent in the background (or at `scheduled_at`). What happens to it arrives on webhooks as `email.*` events and shows in `GET /v1/emails/{id}`.',
          body: SendEmailBody,
          response: { 202: AcceptedEmail, ...errorResponses() },
        },
        { base64Fields: SEND_FILES },
      ),
      bodyLimit: EMAIL_BODY_LIMIT_BYTES,
    },
    async (request, reply) => {
      const plan = await prepareFrom(request, emails.prepareSend);
      reply.code(202);
      const [accepted] = emails.acceptedViews(plan);
      return storeSend(reply, emails, plan, accepted!);
    },
  );

  app.post(
    '/v1/emails/batch',
    {
      ...routes.sendingAccess(
        {
          operationId: 'sendEmailBatch',
          summary: 'Send up to 100 emails at once',
          description:
            'All or nothing: when one email is refused, none is stored (`param` starts with its index).',
          body: SendEmailBatchBody,
          response: { 202: AcceptedEmailList, ...errorResponses() },
        },
        { base64Fields: BATCH_FILES },
      ),
      bodyLimit: EMAIL_BODY_LIMIT_BYTES,
    },
    async (request, reply) => {
      const plan = await prepareFrom(request, emails.prepareBatch);
      reply.code(202);
      const accepted = list(emails.acceptedViews(plan), false);
      return storeSend(reply, emails, plan, accepted);
    },
  );

  app.get(
    '/v1/emails',
    routes.readOnly({
      operationId: 'listEmails',
      summary: 'List emails, newest first',
      description:
        "The project's emails, newest first, each with its overall status; filtered by status, recipient, tag and time when asked.",
      querystring: EmailListQuery,
      response: { 200: EmailList, ...errorResponses() },
    }),
    async (request) => {
      const { limit, after, before, ...filters } = request.query;
      const page = await emails.list(
        projectOf(request),
        toPageRequest({ limit, after, before }, 'msg'),
        filters,
      );
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/emails/:id',
    routes.readOnly({
      operationId: 'getEmail',
      summary: 'Retrieve an email with its recipients and events',
      description: "An email with each recipient's status and the events that happened to it.",
      params: EmailParams,
      response: { 200: Email, ...errorResponses() },
    }),
    callUnderPath(emails.get),
  );

  app.get(
    '/v1/emails/:id/raw',
    routes.readOnly({
      operationId: 'getRawEmail',
      summary: 'Retrieve the captured MIME of an email (capture transport)',
      description:
        'With the capture transport (no SMTP_URL, no direct delivery) messages are kept instead of sent; this returns one as it would have left the machine.',
      params: EmailParams,
      response: { 200: RawEmail, ...errorResponses() },
    }),
    async (request, reply) => {
      const { head, raw } = await emails.raw(projectOf(request), request.params.id);
      // Streamed: the message may be 40 MiB, never made one string here (lib/byte-chunks.ts). The schema above
      // still describes the answer; a stream is sent as it is, so the reply is taken untyped for it.
      const streamed: FastifyReply = reply;
      return streamed.type('application/json; charset=utf-8').send(jsonWithTextOf(head, 'raw', raw));
    },
  );

  app.patch(
    '/v1/emails/:id',
    routes.fullAccess({
      operationId: 'rescheduleEmail',
      summary: 'Reschedule a scheduled email',
      description:
        'Moves `scheduled_at` (in the future, up to 30 days ahead), only before the current `scheduled_at`; 409 afterwards.',
      params: EmailParams,
      body: RescheduleEmailBody,
      response: { 200: Email, ...errorResponses(409) },
    }),
    async (request, reply) => {
      const plan = await emails.prepareReschedule(projectOf(request), request.params.id, request.body);
      return reply.transact((transaction) => emails.reschedule(transaction, plan));
    },
  );

  app.post(
    '/v1/emails/:id/cancel',
    routes.fullAccess({
      operationId: 'cancelEmail',
      summary: 'Cancel a scheduled email',
      description: 'Only before its `scheduled_at`; 409 afterwards.',
      params: EmailParams,
      response: { 200: Email, ...errorResponses(409) },
    }),
    async (request, reply) => {
      const plan = await emails.prepareCancel(projectOf(request), request.params.id);
      return reply.transact((transaction) => emails.cancel(transaction, plan));
    },
  );
}
