import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Transaction } from '../../db/transaction.ts';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath, writeUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, listOf, ListQuery, toPageRequest } from '../../http/list.ts';
import type {
  BroadcastRecipientRow,
  BroadcastRecord,
  ExclusionRecord,
  Personalization,
} from './broadcasts.repo.ts';
import { type BroadcastService, toBroadcastSummary } from './broadcasts.service.ts';
import {
  Broadcast,
  BroadcastExclusionList,
  BroadcastList,
  BroadcastParams,
  BroadcastRecipientList,
  BroadcastRef,
  BroadcastSummary,
  ClickedLinkList,
  CreateBroadcastBody,
  type CreateBroadcastInput,
  DeletedBroadcast,
  RecipientsQuery,
  SendBroadcastBody,
  UpdateBroadcastBody,
  type UpdateBroadcastInput,
} from './broadcasts.schemas.ts';

/**
 * The handlers of a broadcast's create, update and send, for /v1 and Resend's API alike: each checked and
 * prepared before the transaction (rendering, the sender), written in the request's (`reply.transact`: with an
 * Idempotency-Key, the answer is saved with the write), and answered as the API answers a written broadcast
 * (`answer`). A create reads its template in `personalization`'s dialect and answers with `status`.
 */
export function broadcastWriteHandlers<A>(
  broadcasts: BroadcastService,
  answer: (record: BroadcastRecord) => A,
) {
  const written = (reply: FastifyReply, write: (transaction: Transaction) => Promise<BroadcastRecord>) =>
    reply.transact(async (transaction) => answer(await write(transaction)));
  type OnBroadcast = FastifyRequest & { params: { id: string } };
  return {
    create:
      (personalization: Personalization, status: 200 | 201) =>
      async (request: FastifyRequest & { body: CreateBroadcastInput }, reply: FastifyReply) => {
        const plan = await broadcasts.prepareCreate(
          projectOf(request),
          request.body,
          request.caller!,
          personalization,
        );
        reply.code(status);
        return written(reply, (transaction) => broadcasts.create(transaction, plan));
      },
    async update(request: OnBroadcast & { body: UpdateBroadcastInput }, reply: FastifyReply) {
      const next = await broadcasts.prepareUpdate(projectOf(request), request.params.id, request.body);
      return written(reply, (transaction) => broadcasts.update(transaction, next));
    },
    async send(request: OnBroadcast & { body: { scheduled_at?: string | undefined } }, reply: FastifyReply) {
      const plan = await broadcasts.prepareSend(
        projectOf(request),
        request.params.id,
        request.body.scheduled_at,
        request.caller!,
      );
      return written(reply, (transaction) => broadcasts.send(transaction, plan));
    },
  };
}

const toRecipientView = (row: BroadcastRecipientRow) => ({
  object: 'broadcast_recipient' as const,
  email_id: row.emailId,
  contact_id: row.contactId,
  email: row.address,
  status: row.status,
  opens: row.openCount,
  clicks: row.clickCount,
  unsubscribed_at: row.unsubscribedAt,
});

const toExclusionView = (row: ExclusionRecord) => ({
  object: 'broadcast_exclusion' as const,
  contact_id: row.contactId,
  email: row.email,
  reason: row.reason,
  created_at: row.createdAt,
});

// Broadcasts are the audience's data: writing one (create, update, duplicate, cancel, delete) needs a
// full_access key; sending a draft needs sending_access (or full_access), and a key limited to a domain sends
// only a broadcast whose From is of that domain; read_only keys read.
export function registerBroadcastRoutes(
  server: FastifyInstance,
  { broadcasts }: { broadcasts: BroadcastService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  const routes = routeOptions(['Broadcasts']);
  // Each write answers with the broadcast's summary, made in the request's transaction: with an
  // Idempotency-Key, the summary is the answer saved with the write.
  const summaryAfter = (reply: FastifyReply, write: (transaction: Transaction) => Promise<BroadcastRecord>) =>
    reply.transact(async (transaction) => toBroadcastSummary(await write(transaction)));
  const writes = broadcastWriteHandlers(broadcasts, toBroadcastSummary);

  app.post(
    '/v1/broadcasts',
    routes.fullAccess({
      operationId: 'createBroadcast',
      summary: 'Create a broadcast',
      description:
        'A draft to a segment (and, optionally, only to the contacts subscribed to a topic); with `send: true` it is sent at once, or at `scheduled_at`.',
      body: CreateBroadcastBody,
      response: { 201: BroadcastSummary, ...errorResponses() },
    }),
    writes.create('liquid', 201),
  );

  app.get(
    '/v1/broadcasts',
    routes.readOnly({
      operationId: 'listBroadcasts',
      summary: 'List broadcasts, newest first',
      querystring: ListQuery,
      response: { 200: BroadcastList, ...errorResponses() },
    }),
    async (request) => {
      const page = await broadcasts.list(projectOf(request), toPageRequest(request.query, 'bc'));
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/broadcasts/:id',
    routes.readOnly({
      operationId: 'getBroadcast',
      summary: 'Retrieve a broadcast, with its counts',
      params: BroadcastParams,
      response: { 200: Broadcast, ...errorResponses() },
    }),
    callUnderPath(broadcasts.get),
  );

  app.patch(
    '/v1/broadcasts/:id',
    routes.fullAccess({
      operationId: 'updateBroadcast',
      summary: 'Update a draft',
      description: 'Only a draft changes (409 `broadcast_not_draft` otherwise); null clears a field.',
      params: BroadcastParams,
      body: UpdateBroadcastBody,
      response: { 200: BroadcastSummary, ...errorResponses(409) },
    }),
    writes.update,
  );

  app.delete(
    '/v1/broadcasts/:id',
    routes.fullAccess({
      operationId: 'deleteBroadcast',
      summary: 'Delete a draft (or a canceled broadcast)',
      params: BroadcastParams,
      response: { 200: DeletedBroadcast, ...errorResponses(409) },
    }),
    writeUnderPath(broadcasts.delete),
  );

  app.post(
    '/v1/broadcasts/:id/send',
    routes.sendingAccess({
      operationId: 'sendBroadcast',
      summary: 'Send a draft, now or at a time',
      description:
        'Needs a sending_access or full_access key; a key limited to a domain sends only a broadcast from that domain. Every copy carries its own one-click unsubscribe, so PUBLIC_URL must be set.',
      params: BroadcastParams,
      body: SendBroadcastBody,
      response: { 200: BroadcastSummary, ...errorResponses(409) },
    }),
    writes.send,
  );

  app.post(
    '/v1/broadcasts/:id/cancel',
    routes.fullAccess({
      operationId: 'cancelBroadcast',
      summary: 'Cancel a scheduled broadcast before it starts',
      params: BroadcastParams,
      response: { 200: BroadcastRef, ...errorResponses(409) },
    }),
    writeUnderPath(broadcasts.cancel),
  );

  app.post(
    '/v1/broadcasts/:id/duplicate',
    routes.fullAccess({
      operationId: 'duplicateBroadcast',
      summary: 'Duplicate a broadcast as a new draft',
      params: BroadcastParams,
      response: { 201: BroadcastSummary, ...errorResponses() },
    }),
    async (request, reply) => {
      reply.code(201);
      return summaryAfter(reply, (transaction) =>
        broadcasts.duplicate(transaction, projectOf(request), request.params.id),
      );
    },
  );

  app.get(
    '/v1/broadcasts/:id/recipients',
    routes.readOnly({
      operationId: 'listBroadcastRecipients',
      summary: 'List the recipients of a broadcast’s copies, newest first',
      params: BroadcastParams,
      querystring: RecipientsQuery,
      response: { 200: BroadcastRecipientList, ...errorResponses() },
    }),
    async (request) => {
      const { status, email } = request.query;
      const page = await broadcasts.recipients(
        projectOf(request),
        request.params.id,
        status,
        email,
        toPageRequest(request.query, 'msg'),
      );
      return listOf(page, toRecipientView);
    },
  );

  app.get(
    '/v1/broadcasts/:id/exclusions',
    routes.readOnly({
      operationId: 'listBroadcastExclusions',
      summary: 'List the contacts a broadcast did not go to, and why',
      description: 'By contact id; `after` takes the last contact id of the page before.',
      params: BroadcastParams,
      querystring: ListQuery,
      response: { 200: BroadcastExclusionList, ...errorResponses() },
    }),
    async (request) => {
      const { limit, after } = toPageRequest(request.query, 'con');
      const page = await broadcasts.exclusions(projectOf(request), request.params.id, after, limit);
      return listOf(page, toExclusionView);
    },
  );

  app.get(
    '/v1/broadcasts/:id/clicked-links',
    routes.readOnly({
      operationId: 'listBroadcastClickedLinks',
      summary: 'List the links clicked in a broadcast’s copies, most clicked first',
      params: BroadcastParams,
      response: { 200: ClickedLinkList, ...errorResponses() },
    }),
    async (request) => {
      const links = await broadcasts.clickedLinks(projectOf(request), request.params.id);
      return list(
        links.map((link) => ({
          object: 'clicked_link' as const,
          url: link.url,
          clicks: link.clicks,
          unique_clicks: link.uniqueClicks,
        })),
        false,
      );
    },
  );
}
