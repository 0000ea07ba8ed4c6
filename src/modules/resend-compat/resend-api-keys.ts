import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { list, ListQuery } from '../../http/list.ts';
import { notFound } from '../../lib/errors.ts';
import type { ApiKeyRecord } from '../projects/projects.repo.ts';
import type { ProjectService } from '../projects/projects.service.ts';
import { hide, IdParams } from './resend-routing.ts';

const CreateApiKeyBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    permission: Type.Optional(Type.Union([Type.Literal('full_access'), Type.Literal('sending_access')])),
    domain_id: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
);

const RenameApiKeyBody = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 200 }) },
  { additionalProperties: false },
);

export interface ResendCreateKey {
  name: string;
  permission?: 'full_access' | 'sending_access' | undefined;
  domain_id?: string | undefined;
}

/** Resend's `permission` and `domain_id` are Postwire's scoped keys' (docs/api/api-keys.md), checked there. */
export async function createKey(projects: ProjectService, projectId: string, input: ResendCreateKey) {
  const { key, plaintext } = await projects.createKey(projectId, {
    name: input.name,
    permission: input.permission,
    domainId: input.domain_id,
  });
  return { id: key.id, token: plaintext };
}

const active = (key: ApiKeyRecord) => key.revokedAt === null;

export async function listKeys(projects: ProjectService, projectId: string) {
  const keys = (await projects.listKeys(projectId)).filter(active);
  return keys.map((key) => ({
    id: key.id,
    name: key.name ?? '',
    created_at: key.createdAt,
    last_used_at: null,
  }));
}

/** Revokes one of the project's keys; one already revoked is gone, as in Resend (404). */
export async function revokeKey(projects: ProjectService, projectId: string, id: string) {
  const key = await projects.getKey(projectId, id);
  if (!active(key)) throw notFound('API key', id);
  await projects.revokeKey(projectId, id);
  return { object: 'api_key' as const, id, deleted: true };
}

/** Renames one of the project's working keys (Resend's `apiKeys.update`). */
export async function renameKey(projects: ProjectService, projectId: string, id: string, name: string) {
  await projects.renameKey(projectId, id, name);
  return { object: 'api_key' as const, id };
}

/** Resend's API keys over the project's keys, inside the /resend scope (resend.routes.ts). */
export function registerResendApiKeyRoutes(
  scope: FastifyInstance,
  { projects }: { projects: ProjectService },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  app.post(
    '/api-keys',
    {
      // The projects service writes the key on its own (no transaction to join).
      config: { permission: 'full_access', idempotencyOutsideTransaction: true },
      schema: { ...hide, body: CreateApiKeyBody },
    },
    async (request) => createKey(projects, projectOf(request), request.body),
  );

  app.get(
    '/api-keys',
    { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
    async (request) => list(await listKeys(projects, projectOf(request)), false),
  );

  app.patch(
    '/api-keys/:id',
    {
      config: { permission: 'full_access' },
      schema: { ...hide, params: IdParams, body: RenameApiKeyBody },
    },
    async (request) => renameKey(projects, projectOf(request), request.params.id, request.body.name),
  );

  app.delete(
    '/api-keys/:id',
    { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
    async (request) => revokeKey(projects, projectOf(request), request.params.id),
  );
}
