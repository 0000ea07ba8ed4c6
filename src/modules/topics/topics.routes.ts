import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import {
  callUnderPath,
  listUnderPath,
  writeUnderPath,
  writeUnderPathWithBody,
} from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import { ContactParams } from '../contacts/contacts.schemas.ts';
import {
  ContactTopicList,
  CreateTopicBody,
  DeletedTopic,
  Topic,
  type TopicChoiceInput,
  TopicList,
  TopicParams,
  UpdateContactTopicsBody,
  UpdateTopicBody,
} from './topics.schemas.ts';
import type { TopicService } from './topics.service.ts';

// Topics are the audience's data, as contacts are: writes (topics and contacts' choices) need a full_access
// key; read_only keys read.
export function registerTopicRoutes(server: FastifyInstance, { topics }: { topics: TopicService }): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  const routes = routeOptions(['Topics']);

  app.post(
    '/v1/topics',
    routes.fullAccess({
      operationId: 'createTopic',
      summary: 'Create a topic',
      description: 'Every contact without a choice of their own follows its `default_subscription`.',
      body: CreateTopicBody,
      response: { 201: Topic, ...errorResponses() },
    }),
    async (request, reply) => {
      const record = topics.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact((transaction) => topics.create(transaction, record));
    },
  );

  app.get(
    '/v1/topics',
    routes.readOnly({
      operationId: 'listTopics',
      summary: 'List topics, newest first',
      querystring: ListQuery,
      response: { 200: TopicList, ...errorResponses() },
    }),
    async (request) => {
      const page = await topics.list(projectOf(request), toPageRequest(request.query, 'top'));
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/topics/:id',
    routes.readOnly({
      operationId: 'getTopic',
      summary: 'Retrieve a topic',
      params: TopicParams,
      response: { 200: Topic, ...errorResponses() },
    }),
    callUnderPath(topics.get),
  );

  app.patch(
    '/v1/topics/:id',
    routes.fullAccess({
      operationId: 'updateTopic',
      summary: 'Update a topic’s name or description',
      description:
        'The default subscription stays as created: changing it would move every contact without a choice at once.',
      params: TopicParams,
      body: UpdateTopicBody,
      response: { 200: Topic, ...errorResponses() },
    }),
    async (request, reply) =>
      reply.transact((transaction) =>
        topics.update(transaction, projectOf(request), request.params.id, request.body),
      ),
  );

  app.delete(
    '/v1/topics/:id',
    routes.fullAccess({
      operationId: 'deleteTopic',
      summary: 'Delete a topic',
      description: 'The topic and every contact’s choice for it go; the contacts stay.',
      params: TopicParams,
      response: { 200: DeletedTopic, ...errorResponses() },
    }),
    writeUnderPath(topics.delete),
  );

  app.get(
    '/v1/contacts/:id/topics',
    routes.readOnly({
      operationId: 'listContactTopics',
      summary: 'A contact’s subscription to each topic, newest topic first',
      description: 'Every topic of the project, with the contact’s choice or, without one, the default.',
      params: ContactParams,
      querystring: ListQuery,
      response: { 200: ContactTopicList, ...errorResponses() },
    }),
    listUnderPath('top', topics.ofContact),
  );

  app.patch(
    '/v1/contacts/:id/topics',
    routes.fullAccess({
      operationId: 'updateContactTopics',
      summary: 'Subscribe a contact to topics or unsubscribe it',
      description:
        'Each topic named once, each the project’s (otherwise nothing changes); answers the topics chosen for. Emits `contact.topics_updated` when a subscription changed.',
      params: ContactParams,
      body: UpdateContactTopicsBody,
      response: { 200: ContactTopicList, ...errorResponses() },
    }),
    writeUnderPathWithBody(
      async (transaction, projectId, id, body: { topics: readonly TopicChoiceInput[] }) =>
        list((await topics.choose(transaction, projectId, id, body.topics)).topics, false),
    ),
  );
}
