import { DomainError, notFound } from '../../lib/errors.ts';
import type { ApiKeyRecord } from '../projects/projects.repo.ts';
import type { ProjectService } from '../projects/projects.service.ts';

export interface ResendCreateKey {
  name: string;
  permission?: 'full_access' | 'sending_access' | undefined;
  domain_id?: string | undefined;
}

/**
 * MERGE POINT for scoped keys (issue 28 item 1, built in another branch): the one place where Resend's
 * `permission` and `domain_id` reach Postwire. Until scoped keys land, every key has full access, so a
 * narrower key is refused (422) rather than made wider than asked. At the merge, pass both to the scoped
 * keys' service (POST /v1/api-keys) and drop the refusal.
 */
export async function createKey(projects: ProjectService, projectId: string, input: ResendCreateKey) {
  if (
    (input.permission !== undefined && input.permission !== 'full_access') ||
    input.domain_id !== undefined
  ) {
    throw new DomainError(
      'validation',
      'parameter_unsupported',
      'This Postwire server has only full-access keys: leave permission and domain_id out.',
      input.domain_id !== undefined ? 'domain_id' : 'permission',
    );
  }
  const { key, plaintext } = await projects.createKey(projectId, input.name);
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

/** Revokes one of the project's own keys (the projects service revokes by id alone: the CLI's, for the operator). */
export async function revokeKey(projects: ProjectService, projectId: string, id: string) {
  const own = (await projects.listKeys(projectId)).find((key) => key.id === id && active(key));
  if (!own) throw notFound('API key', id);
  await projects.revokeKey(own.id);
  return { object: 'api_key' as const, id: own.id, deleted: true };
}
