import { Type } from '@sinclair/typebox';
import { notFound } from '../../lib/errors.ts';
import type { ApiKeyRecord } from '../projects/projects.repo.ts';
import type { ProjectService } from '../projects/projects.service.ts';

/** The body of Resend's apiKeys.create. */
export const CreateApiKeyBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    permission: Type.Optional(Type.Union([Type.Literal('full_access'), Type.Literal('sending_access')])),
    domain_id: Type.Optional(Type.String({ minLength: 1 })),
  },
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
