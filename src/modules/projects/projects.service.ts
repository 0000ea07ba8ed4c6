import type { Clock } from '../../lib/clock.ts';
import { constantTimeEqual, randomToken, sha256Hex } from '../../lib/crypto.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { newId } from '../../lib/ids.ts';
import type { Kysely } from 'kysely';
import type { Database, KeyPermission } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { ApiKeyRecord, Project, ProjectRepo } from './projects.repo.ts';

export interface CreatedKey {
  key: ApiKeyRecord;
  /** The only time the plain key exists outside its owner's hands. */
  plaintext: string;
}

export interface Caller {
  projectId: string;
  keyId: string;
  permission: KeyPermission;
  /** A sending key's one domain; null: any. */
  domainId: string | null;
}

export const KEY_PERMISSIONS = [
  'full_access',
  'sending_access',
  'read_only',
] as const satisfies readonly KeyPermission[];

export interface NewKey {
  name: string | null;
  /** full_access when absent. */
  permission?: KeyPermission | undefined;
  /** Only with sending_access: the one domain of the project the key may send from. */
  domainId?: string | null | undefined;
}

const KEY_PREFIX = 'pw_';

export function createProjectService({
  db,
  repo,
  clock,
}: {
  db: Kysely<Database>;
  repo: ProjectRepo;
  clock: Clock;
}) {
  /**
   * A new key; `plaintext` is the bootstrap key's own value (POSTWIRE_BOOTSTRAP_KEY), else a random one. The key is returned
   * with its plain value, which is not kept.
   */
  async function createKey(projectId: string, input: NewKey, plaintext?: string): Promise<CreatedKey> {
    if (!(await repo.findProject(projectId))) throw notFound('project', projectId);
    const permission = input.permission ?? 'full_access';
    const domainId = input.domainId ?? null;
    if (domainId !== null) {
      if (permission !== 'sending_access') {
        throw invalidParam(
          'domain_id',
          `Only a sending_access key can be limited to a domain; this key would be ${permission}.`,
        );
      }
      if (!(await repo.findDomain(projectId, domainId))) {
        throw invalidParam('domain_id', `No domain with id '${domainId}' in this project.`);
      }
    }
    const secret = plaintext ?? `${KEY_PREFIX}${randomToken(24)}`;
    const key: ApiKeyRecord = {
      id: newId('key'),
      projectId,
      name: input.name,
      keyPrefix: secret.slice(0, 10),
      createdAt: clock.now().toISOString(),
      revokedAt: null,
      permission,
      domainId,
    };
    await repo.insertKey({ ...key, keyHash: sha256Hex(secret) });
    return { key, plaintext: secret };
  }

  async function getKey(projectId: string, keyId: string): Promise<ApiKeyRecord> {
    const key = await repo.findKey(projectId, keyId);
    if (!key) throw notFound('API key', keyId);
    return key;
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

    getKey,

    /** Renames a working key (its name only: its permission and domain stay); 404 for a revoked one. */
    async renameKey(projectId: string, keyId: string, name: string): Promise<void> {
      if (!(await repo.renameKey(projectId, keyId, name))) throw notFound('API key', keyId);
    },

    /**
     * Revokes a key of the project: refused for its last working full_access key, which only the operator's
     * CLI may revoke (a project left with no key that can manage keys could not make another over the API).
     * A key may revoke itself. Revoking a revoked key answers it as it is.
     */
    async revokeKey(projectId: string, keyId: string): Promise<ApiKeyRecord> {
      const key = await getKey(projectId, keyId);
      if (key.revokedAt !== null) return key;
      const now = clock.now().toISOString();
      const revoked = await inTransaction(db, async (transaction) => {
        await repo.lockFullAccessKeys(projectId, transaction);
        return repo.revokeKey(projectId, keyId, now, { keepOneFullAccess: true }, transaction);
      });
      if (!revoked) {
        const current = await getKey(projectId, keyId);
        if (current.revokedAt !== null) return current;
        throw conflict(
          'last_full_access_key',
          `Key '${keyId}' is this project's last full_access key: create another full_access key first (or revoke it with the CLI, \`postwire keys revoke\`).`,
          'id',
        );
      }
      return getKey(projectId, keyId);
    },

    /** The operator's revocation (CLI): any key of any project, even a project's last. */
    async revokeKeyAsOperator(keyId: string): Promise<ApiKeyRecord> {
      const key = await repo.findKeyAnywhere(keyId);
      if (!key) throw notFound('key', keyId);
      await repo.revokeKey(key.projectId, keyId, clock.now().toISOString());
      return (await repo.findKeyAnywhere(keyId))!;
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
      return { projectId: key.projectId, keyId: key.id, permission: key.permission, domainId: key.domainId };
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
        const hash = sha256Hex(bootstrapKey);
        if (!(await repo.findKeyByHash(hash))) {
          try {
            await createKey(project.id, { name: 'bootstrap' }, bootstrapKey);
          } catch (error) {
            // Another process stored it first (key hashes are unique): replicas start at once with one key.
            if (!(await repo.findKeyByHash(hash))) throw error;
          }
        }
      } else if (!existing || (await repo.listKeys(project.id)).length === 0) {
        // A default project without a key (a crash between the two writes) gets one now, printed once.
        createdKey = (await createKey(project.id, { name: 'default' })).plaintext;
      }
      return { project, ...(createdKey ? { createdKey } : {}) };
    },
  };
}

export type ProjectService = ReturnType<typeof createProjectService>;
