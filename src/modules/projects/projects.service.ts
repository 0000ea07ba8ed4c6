import type { Clock } from '../../lib/clock.ts';
import { constantTimeEqual, randomToken, sha256Hex } from '../../lib/crypto.ts';
import { DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { newId } from '../../lib/ids.ts';
import type { ApiKeyRecord, Project, ProjectRepo } from './projects.repo.ts';

export interface CreatedKey {
  key: ApiKeyRecord;
  /** The only time the plain key exists outside its owner's hands. */
  plaintext: string;
}

export interface Caller {
  projectId: string;
  keyId: string;
}

const KEY_PREFIX = 'pw_';

export function createProjectService({ repo, clock }: { repo: ProjectRepo; clock: Clock }) {
  async function createKey(projectId: string, name: string | null, plaintext?: string): Promise<CreatedKey> {
    if (!(await repo.findProject(projectId))) throw notFound('project', projectId);
    const secret = plaintext ?? `${KEY_PREFIX}${randomToken(24)}`;
    const key: ApiKeyRecord = {
      id: newId('key'),
      projectId,
      name,
      keyPrefix: secret.slice(0, 10),
      createdAt: clock.now().toISOString(),
      revokedAt: null,
    };
    await repo.insertKey({ ...key, keyHash: sha256Hex(secret) });
    return { key, plaintext: secret };
  }

  async function createProject(name: string, isDefault = false): Promise<Project> {
    if (!name.trim()) throw invalidParam('name', 'A project needs a name.');
    const project: Project = { id: newId('proj'), name, isDefault, createdAt: clock.now().toISOString() };
    await repo.insertProject(project);
    return project;
  }

  return {
    createProject,
    createKey,
    listProjects: () => repo.listProjects(),

    async listKeys(projectId: string): Promise<ApiKeyRecord[]> {
      if (!(await repo.findProject(projectId))) throw notFound('project', projectId);
      return repo.listKeys(projectId);
    },

    async revokeKey(keyId: string): Promise<ApiKeyRecord> {
      const key = await repo.revokeKey(keyId, clock.now().toISOString());
      if (!key) throw notFound('key', keyId);
      return key;
    },

    /** The caller behind a bearer token, or an `unauthorized` error that says nothing about which part failed. */
    async authenticate(token: string | undefined): Promise<Caller> {
      // Made only on failure: an Error captures a stack trace, a cost every valid request would pay.
      const rejected = () =>
        new DomainError('unauthorized', 'invalid_api_key', 'Unknown or revoked API key.');
      if (!token) throw rejected();
      const hash = sha256Hex(token);
      const key = await repo.findKeyByHash(hash);
      // The lookup is by hash, so timing reveals nothing of the key; the comparison is constant-time anyway.
      if (!key || key.revokedAt !== null || !constantTimeEqual(key.keyHash, hash)) throw rejected();
      return { projectId: key.projectId, keyId: key.id };
    },

    /**
     * On an empty database, makes the default project and its first key (returned so it can be printed
     * once). With a bootstrap key configured, makes sure that exact key exists in the default project.
     */
    async bootstrap(bootstrapKey: string | undefined): Promise<{ project: Project; createdKey?: string }> {
      const existing = await repo.findDefaultProject();
      let project = existing;
      if (!project) {
        try {
          project = await createProject('Default project', true);
        } catch (error) {
          // Another process made it first (one default project is enforced by a unique index).
          project = await repo.findDefaultProject();
          if (!project) throw error;
        }
      }
      let createdKey: string | undefined;
      if (bootstrapKey) {
        if (!(await repo.findKeyByHash(sha256Hex(bootstrapKey)))) {
          await createKey(project.id, 'bootstrap', bootstrapKey);
        }
      } else if (!existing || (await repo.listKeys(project.id)).length === 0) {
        // A default project without a key (a crash between the two writes) gets one now, printed once.
        createdKey = (await createKey(project.id, 'default')).plaintext;
      }
      return { project, ...(createdKey ? { createdKey } : {}) };
    },
  };
}

export type ProjectService = ReturnType<typeof createProjectService>;
