import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list } from '../../http/list.ts';
import type { ProjectService } from '../projects/projects.service.ts';
import {
  ApiKey,
  ApiKeyList,
  ApiKeyParams,
  CreateApiKeyBody,
  CreatedApiKey,
  DeletedApiKey,
  toApiKeyView,
} from './api-keys.schemas.ts';

const routes = routeOptions(['API keys']);

// The project's own keys over HTTP; the service and the api_keys table stay the projects module's (the CLI
// makes keys through the same service).
export function registerApiKeyRoutes(
  server: FastifyInstance,
  { projects }: { projects: ProjectService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/v1/api-keys',
    routes.fullAccess({
      operationId: 'createApiKey',
      summary: 'Create an API key',
      description:
        'A key of this project with a permission (and, for a sending key, optionally one domain). The key itself (`token`) is in this answer only: store it now.',
      body: CreateApiKeyBody,
      response: { 201: CreatedApiKey, ...errorResponses() },
    }),
    async (request, reply) => {
      const { key, plaintext } = await projects.createKey(projectOf(request), {
        name: request.body.name,
        permission: request.body.permission,
        domainId: request.body.domain_id ?? null,
      });
      reply.code(201);
      return { ...toApiKeyView(key), token: plaintext };
    },
  );

  app.get(
    '/v1/api-keys',
    routes.readOnly({
      operationId: 'listApiKeys',
      summary: 'List API keys',
      description: "This project's keys, revoked ones too, oldest first; never the keys themselves.",
      response: { 200: ApiKeyList, ...errorResponses() },
    }),
    async (request) => list((await projects.listKeys(projectOf(request))).map(toApiKeyView), false),
  );

  app.get(
    '/v1/api-keys/current',
    routes.readOnly({
      operationId: 'getCurrentApiKey',
      summary: 'Retrieve the key making this request',
      description:
        'What the calling key may do (the dashboard reads it to hide what the key cannot do). A sending_access key gets 403, as for every read.',
      response: { 200: ApiKey, ...errorResponses() },
    }),
    async (request) => toApiKeyView(await projects.getKey(projectOf(request), request.caller!.keyId)),
  );

  app.get(
    '/v1/api-keys/:id',
    routes.readOnly({
      operationId: 'getApiKey',
      summary: 'Retrieve an API key',
      description: 'One key of this project (never the key itself); 404 for any other.',
      params: ApiKeyParams,
      response: { 200: ApiKey, ...errorResponses() },
    }),
    async (request) => toApiKeyView(await projects.getKey(projectOf(request), request.params.id)),
  );

  app.delete(
    '/v1/api-keys/:id',
    routes.fullAccess({
      operationId: 'deleteApiKey',
      summary: 'Revoke an API key',
      description:
        "Every process refuses it (401) from the next request on; it stays listed with `revoked_at`. A key may revoke itself. The project's last working full_access key cannot be revoked here (409 `last_full_access_key`): only with the CLI.",
      params: ApiKeyParams,
      response: { 200: DeletedApiKey, ...errorResponses(409) },
    }),
    async (request) => {
      const key = await projects.revokeKey(projectOf(request), request.params.id);
      return { object: 'api_key' as const, id: key.id, deleted: true as const };
    },
  );
}
