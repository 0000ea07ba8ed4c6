import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { listUnderPath, writeUnderPath, writeUnderPathWithBody } from '../../http/path-handlers.ts';
import { ListQuery, toPageRequest, listOf } from '../../http/list.ts';
import {
  CreateTopicBody,
  type TopicChoiceInput,
  TopicChoices,
  type TopicView,
  UpdateTopicBody,
} from '../topics/topics.schemas.ts';
import type { TopicService } from '../topics/topics.service.ts';
import { hide, IdParams } from './resend-routing.ts';

/** A topic as Resend's API answers it (`Topic`). */
const toResendTopic = (topic: TopicView) => ({
  id: topic.id,
  name: topic.name,
  description: topic.description,
  default_subscription: topic.default_subscription,
  created_at: topic.created_at,
});

/**
 * Resend's topics and a contact's topics over the /v1 services, inside the /resend scope (resend.routes.ts).
 */
export function registerResendTopicRoutes(
  scope: FastifyInstance,
  { topics }: { topics: TopicService },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const write = { permission: 'full_access' } as const;
  const read = { permission: 'read_only' } as const;

  app.post(
    '/topics',
    { config: write, schema: { ...hide, body: CreateTopicBody } },
    async (request, reply) => {
      const record = topics.prepareCreate(projectOf(request), request.body);
      return reply.transact(async (transaction) => ({ id: (await topics.create(transaction, record)).id }));
    },
  );

  app.get('/topics', { config: read, schema: { ...hide, querystring: ListQuery } }, async (request) => {
    const page = await topics.list(projectOf(request), toPageRequest(request.query, 'top'));
    return listOf(page, toResendTopic);
  });

  app.get('/topics/:id', { config: read, schema: { ...hide, params: IdParams } }, async (request) => ({
    object: 'topic',
    ...toResendTopic(await topics.get(projectOf(request), request.params.id)),
  }));

  app.patch(
    '/topics/:id',
    {
      config: write,
      schema: { ...hide, params: IdParams, body: UpdateTopicBody },
      // The SDK sends the topic's id in the body too (it is the path's).
      preValidation: async (request) => {
        const body = request.body;
        if (typeof body === 'object' && body !== null && !Array.isArray(body) && 'id' in body) {
          const { id: _id, ...rest } = body as Record<string, unknown>;
          request.body = rest as typeof request.body;
        }
      },
    },
    async (request, reply) =>
      reply.transact(async (transaction) => ({
        id: (await topics.update(transaction, projectOf(request), request.params.id, request.body)).id,
      })),
  );

  app.delete(
    '/topics/:id',
    { config: write, schema: { ...hide, params: IdParams } },
    writeUnderPath(topics.delete),
  );

  app.get(
    '/contacts/:id/topics',
    { config: read, schema: { ...hide, params: IdParams, querystring: ListQuery } },
    listUnderPath('top', topics.ofContact, (each) => ({
      id: each.topic_id,
      name: each.name,
      description: each.description,
      subscription: each.subscription,
    })),
  );

  // contacts.topics.update sends the choices as the body itself, an array.
  app.patch(
    '/contacts/:id/topics',
    { config: write, schema: { ...hide, params: IdParams, body: TopicChoices } },
    writeUnderPathWithBody(async (transaction, projectId, id, body: readonly TopicChoiceInput[]) => ({
      id: (await topics.choose(transaction, projectId, id, body)).contactId,
    })),
  );
}
