import type { Kysely } from 'kysely';
import { prepareQuery } from '../../db/prepared-query.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Database, KeyPermission, Row } from '../../db/schema.ts';
import { createValidatedCache, type Stamps } from '../../db/validated-cache.ts';

export interface Project {
  id: string;
  name: string;
  isDefault: boolean;
  createdAt: string;
}

export interface ApiKeyRecord {
  id: string;
  projectId: string;
  name: string | null;
  keyPrefix: string;
  createdAt: string;
  revokedAt: string | null;
  permission: KeyPermission;
  /** A sending key's one domain; null: any domain of the project. */
  domainId: string | null;
}

export interface ActiveKey {
  id: string;
  projectId: string;
  keyHash: string;
}

type KeyWithHash = ApiKeyRecord & { keyHash: string };

/** Keys held in memory per process (each a hash and a few ids); past this, the oldest goes. */
const CACHED_KEYS = 10_000;

/** `stamps`: keep the key lookup in memory while the api_keys stamp holds (validated-cache.ts). */
export function createProjectRepo(db: Kysely<Database>, stamps?: Stamps) {
  const toProject = (row: Row<'projects'>): Project => ({
    id: row.id,
    name: row.name,
    isDefault: Boolean(row.is_default),
    createdAt: row.created_at,
  });
  const toKey = (row: Row<'api_keys'>): ApiKeyRecord => ({
    id: row.id,
    projectId: row.project_id,
    name: row.name,
    keyPrefix: row.key_prefix,
    createdAt: row.created_at,
    revokedAt: row.revoked_at,
    permission: row.permission,
    domainId: row.domain_id,
  });

  const keyByHash = prepareQuery(db, (keyHash: string) =>
    db.selectFrom('api_keys').selectAll().where('key_hash', '=', keyHash),
  );
  const loadKey = async (keyHash: string): Promise<KeyWithHash | undefined> => {
    const [row] = await keyByHash(keyHash);
    return row && { ...toKey(row), keyHash: row.key_hash };
  };
  // Unknown hashes are not kept: anyone can send them, and they must not push real keys out.
  const keys =
    stamps &&
    createValidatedCache<KeyWithHash | undefined>(stamps, {
      scope: 'api_keys',
      maxEntries: CACHED_KEYS,
      keep: (key) => key !== undefined,
    });

  return {
    async insertProject(project: Project, transaction?: Transaction): Promise<void> {
      await (transaction?.db ?? db)
        .insertInto('projects')
        .values({
          id: project.id,
          name: project.name,
          is_default: project.isDefault,
          created_at: project.createdAt,
        })
        .execute();
    },

    async findProject(id: string): Promise<Project | undefined> {
      const row = await db.selectFrom('projects').selectAll().where('id', '=', id).executeTakeFirst();
      return row && toProject(row);
    },

    async findDefaultProject(): Promise<Project | undefined> {
      const row = await db
        .selectFrom('projects')
        .selectAll()
        .where('is_default', '=', true)
        .orderBy('id')
        .executeTakeFirst();
      return row && toProject(row);
    },

    async listProjects(): Promise<Project[]> {
      const rows = await db.selectFrom('projects').selectAll().orderBy('id').execute();
      return rows.map(toProject);
    },

    async insertKey(key: ApiKeyRecord & { keyHash: string }, transaction?: Transaction): Promise<void> {
      await (transaction?.db ?? db)
        .insertInto('api_keys')
        .values({
          id: key.id,
          project_id: key.projectId,
          name: key.name,
          key_hash: key.keyHash,
          key_prefix: key.keyPrefix,
          created_at: key.createdAt,
          revoked_at: key.revokedAt,
          permission: key.permission,
          domain_id: key.domainId,
        })
        .execute();
    },

    /** Every authenticated request makes this lookup. */
    async findKeyByHash(keyHash: string): Promise<KeyWithHash | undefined> {
      return keys ? keys.get(keyHash, () => loadKey(keyHash)) : loadKey(keyHash);
    },

    async listKeys(projectId: string): Promise<ApiKeyRecord[]> {
      const rows = await db
        .selectFrom('api_keys')
        .selectAll()
        .where('project_id', '=', projectId)
        .orderBy('id')
        .execute();
      return rows.map(toKey);
    },

    async findKey(projectId: string, id: string): Promise<ApiKeyRecord | undefined> {
      const row = await db
        .selectFrom('api_keys')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && toKey(row);
    },

    /** A domain of this project (only its id and name: the domains repository owns the table). */
    async findDomain(projectId: string, id: string): Promise<{ id: string; name: string } | undefined> {
      return db
        .selectFrom('domains')
        .select(['id', 'name'])
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
    },

    /** Renames a working key of the project; whether there was one. */
    async renameKey(
      projectId: string,
      id: string,
      name: string,
      transaction?: Transaction,
    ): Promise<boolean> {
      const result = await (transaction?.db ?? db)
        .updateTable('api_keys')
        .set({ name })
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },

    /** The key's project, whichever it is (the operator's CLI revokes by id alone). */
    async findKeyAnywhere(id: string): Promise<ApiKeyRecord | undefined> {
      const row = await db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst();
      return row && toKey(row);
    },

    /**
     * Before a revocation that keeps one full_access key, in its `transaction`: two revocations of a project's
     * last two full_access keys at once must not both pass. A no-op update of the project's working
     * full_access keys takes their row locks (PostgreSQL; SQLite runs one write transaction at a time
     * anyway): the second waits for the first to commit, and its check, a statement of its own, then sees
     * the first key revoked.
     */
    async lockFullAccessKeys(projectId: string, transaction: Transaction): Promise<void> {
      await transaction.db
        .updateTable('api_keys')
        .set((eb) => ({ revoked_at: eb.ref('revoked_at') }))
        .where('project_id', '=', projectId)
        .where('permission', '=', 'full_access')
        .where('revoked_at', 'is', null)
        .execute();
    },

    /**
     * Revokes a key unless it is already revoked; `keepOneFullAccess`: and unless it is the project's last
     * working full_access key (in the transaction of lockFullAccessKeys). Whether it changed a row.
     */
    async revokeKey(
      projectId: string,
      id: string,
      revokedAt: string,
      { keepOneFullAccess = false }: { keepOneFullAccess?: boolean } = {},
      transaction?: Transaction,
    ): Promise<boolean> {
      let update = (transaction?.db ?? db)
        .updateTable('api_keys')
        .set({ revoked_at: revokedAt })
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .where('revoked_at', 'is', null);
      if (keepOneFullAccess) {
        update = update.where((eb) =>
          eb.or([
            eb('permission', '!=', 'full_access'),
            eb.exists(
              eb
                .selectFrom('api_keys as other')
                .select('other.id')
                .where('other.project_id', '=', projectId)
                .where('other.id', '!=', id)
                .where('other.permission', '=', 'full_access')
                .where('other.revoked_at', 'is', null),
            ),
          ]),
        );
      }
      const result = await update.executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },
  };
}

export type ProjectRepo = ReturnType<typeof createProjectRepo>;
