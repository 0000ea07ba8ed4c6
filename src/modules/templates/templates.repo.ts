import type { Kysely, SqlBool } from 'kysely';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { mapPage, type Page, type PageRequest, pageByIdDesc, pageOfQuery } from '../../db/pagination.ts';
import { createValidatedCache, type Stamps } from '../../db/validated-cache.ts';
import { deleteProjectRow } from '../../db/project-rows.ts';

/** Defaults of declared variables, by name (a send that does not give one renders its default). */
export type VariableDefaults = Record<string, string | number>;

/** The draft as stored, with what was published last. */
export interface TemplateRecord {
  id: string;
  projectId: string;
  name: string;
  alias: string | null;
  subject: string | null;
  html: string | null;
  text: string | null;
  variables: string[];
  variableDefaults: VariableDefaults;
  createdAt: string;
  updatedAt: string;
  publishedAt: string | null;
  publishedVersion: number | null;
}

export interface StoredTemplate extends TemplateRecord {
  /** The draft differs from the latest published version (or none was published). */
  hasUnpublishedChanges: boolean;
}

export interface TemplateVersionRecord {
  templateId: string;
  version: number;
  projectId: string;
  name: string;
  subject: string | null;
  html: string | null;
  text: string | null;
  variables: string[];
  variableDefaults: VariableDefaults;
  publishedAt: string;
}

export type WriteResult = 'ok' | 'alias_taken';

/** Keyset paging over version numbers, newest first (`after` is older, `before` newer). */
export interface VersionPageRequest {
  limit: number;
  after?: number | undefined;
  before?: number | undefined;
}

/**
 * The `variables` column holds the declarations, in order: a name alone, or `{ "name", "default" }` for one with
 * a default. Rows written before defaults existed hold names only, and read the same; comparing the column's
 * text still tells whether a draft differs from its version.
 */
type StoredVariable = string | { name: string; default: string | number };

function readVariables(column: string): { variables: string[]; variableDefaults: VariableDefaults } {
  const variables: string[] = [];
  const variableDefaults: VariableDefaults = {};
  for (const entry of JSON.parse(column) as StoredVariable[]) {
    if (typeof entry === 'string') {
      variables.push(entry);
    } else {
      variables.push(entry.name);
      variableDefaults[entry.name] = entry.default;
    }
  }
  return { variables, variableDefaults };
}

const writeVariables = (record: Pick<TemplateRecord, 'variables' | 'variableDefaults'>): string =>
  JSON.stringify(
    record.variables.map((name): StoredVariable => {
      const value = Object.hasOwn(record.variableDefaults, name) ? record.variableDefaults[name] : undefined;
      return value === undefined ? name : { name, default: value };
    }),
  );

const toRecord = (row: Row<'templates'>): TemplateRecord => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  alias: row.alias,
  subject: row.subject,
  html: row.html,
  text: row.text,
  ...readVariables(row.variables),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  publishedAt: row.published_at,
  publishedVersion: row.published_version === null ? null : Number(row.published_version),
});

const toRow = (record: TemplateRecord) => ({
  id: record.id,
  project_id: record.projectId,
  name: record.name,
  alias: record.alias,
  subject: record.subject,
  html: record.html,
  text: record.text,
  variables: writeVariables(record),
  created_at: record.createdAt,
  updated_at: record.updatedAt,
  published_at: record.publishedAt,
  published_version: record.publishedVersion,
});

const toVersionRecord = (row: Row<'template_versions'>): TemplateVersionRecord => ({
  templateId: row.template_id,
  version: Number(row.version),
  projectId: row.project_id,
  name: row.name,
  subject: row.subject,
  html: row.html,
  text: row.text,
  ...readVariables(row.variables),
  publishedAt: row.published_at,
});

// The unique index on (project_id, alias), as each engine reports a violation of it.
function isAliasConflict(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, constraint, message } = error as { code?: unknown; constraint?: unknown; message?: unknown };
  if (code === '23505') return constraint === 'templates_project_alias';
  return (
    typeof message === 'string' &&
    message.includes('UNIQUE constraint failed: templates.project_id, templates.alias')
  );
}

async function catchAliasConflict(write: Promise<unknown>): Promise<WriteResult> {
  try {
    await write;
    return 'ok';
  } catch (error) {
    if (isAliasConflict(error)) return 'alias_taken';
    throw error;
  }
}

/** Templates (by id or alias) and versions one process keeps in memory, each; past this, the oldest goes. */
const CACHED_TEMPLATES = 500;

/** `stamps`: keep the lookups a send makes in memory while the templates stamp holds (validated-cache.ts). */
export function createTemplateRepo(db: Kysely<Database>, stamps?: Stamps) {
  // What was found is kept; a miss is not (any caller can ask for names that do not exist).
  const cacheOf = <V>() =>
    stamps &&
    createValidatedCache<V | undefined>(stamps, {
      scope: 'templates',
      maxEntries: CACHED_TEMPLATES,
      keep: (value) => value !== undefined,
    });
  const templates = cacheOf<StoredTemplate>();
  const versions = cacheOf<TemplateVersionRecord>();

  // The draft is compared with its latest version in SQL so that lists need not load every version's bodies.
  const selectTemplates = (via: Kysely<Database> = db) =>
    via
      .selectFrom('templates as t')
      .leftJoin('template_versions as v', (join) =>
        join.onRef('v.template_id', '=', 't.id').onRef('v.version', '=', 't.published_version'),
      )
      .selectAll('t')
      .select((eb) =>
        eb
          .and([
            eb('t.name', '=', eb.ref('v.name')),
            eb('t.subject', 'is not distinct from', eb.ref('v.subject')),
            eb('t.html', 'is not distinct from', eb.ref('v.html')),
            eb('t.text', 'is not distinct from', eb.ref('v.text')),
            eb('t.variables', '=', eb.ref('v.variables')),
          ])
          .$castTo<SqlBool | null>()
          .as('draft_is_published'),
      );

  const toStored = (row: Row<'templates'> & { draft_is_published: SqlBool | null }): StoredTemplate => {
    const { draft_is_published: published, ...template } = row;
    return { ...toRecord(template), hasUnpublishedChanges: !published };
  };

  /** One template by id or by alias: the lookup every templated send makes, kept in memory when it can be. */
  async function findBy(
    projectId: string,
    column: 'id' | 'alias',
    value: string,
  ): Promise<StoredTemplate | undefined> {
    const load = async () => {
      const row = await selectTemplates()
        .where('t.project_id', '=', projectId)
        .where(`t.${column}`, '=', value)
        .executeTakeFirst();
      return row && toStored(row);
    };
    return templates ? templates.get(`${column} ${projectId} ${value}`, load) : load();
  }

  return {
    async insert(record: TemplateRecord, transaction: Transaction): Promise<WriteResult> {
      return catchAliasConflict(transaction.db.insertInto('templates').values(toRow(record)).execute());
    },

    /**
     * Takes the template's row lock for the rest of `transaction` (a write that changes nothing: the portable
     * way to lock a row) and reads it under the lock; undefined when it is gone.
     */
    async lockForChange(
      projectId: string,
      id: string,
      transaction: Transaction,
    ): Promise<StoredTemplate | undefined> {
      const result = await transaction.db
        .updateTable('templates')
        .set((eb) => ({ updated_at: eb.ref('updated_at') }))
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) return undefined;
      const row = await selectTemplates(transaction.db)
        .where('t.project_id', '=', projectId)
        .where('t.id', '=', id)
        .executeTakeFirst();
      return row && toStored(row);
    },

    find: (projectId: string, id: string) => findBy(projectId, 'id', id),

    findByAlias: (projectId: string, alias: string) => findBy(projectId, 'alias', alias),

    async list(projectId: string, page: PageRequest): Promise<Page<StoredTemplate>> {
      const query = selectTemplates().where('t.project_id', '=', projectId);
      return mapPage(await pageOfQuery(query, page, 't.id'), toStored);
    },

    async update(record: TemplateRecord, transaction?: Transaction): Promise<WriteResult> {
      const { id: _id, project_id: _project, created_at: _created, ...changes } = toRow(record);
      return catchAliasConflict(
        (transaction?.db ?? db)
          .updateTable('templates')
          .set(changes)
          .where('project_id', '=', record.projectId)
          .where('id', '=', record.id)
          .execute(),
      );
    },

    async delete(projectId: string, id: string, transaction?: Transaction): Promise<boolean> {
      // Versions go with it (ON DELETE CASCADE).
      return deleteProjectRow(transaction?.db ?? db, 'templates', projectId, id);
    },

    /**
     * Stores `next` (the draft with its new published_at/published_version) and its version row in
     * `transaction`, only if the template is still as `current` was read; false when it changed meanwhile
     * (another update or publish won), so the caller can read it again.
     */
    async publish(current: TemplateRecord, next: TemplateRecord, transaction: Transaction): Promise<boolean> {
      if (next.publishedVersion === null || next.publishedAt === null) {
        throw new Error('publish needs the new version number and time');
      }
      const version: Row<'template_versions'> = {
        template_id: next.id,
        version: next.publishedVersion,
        project_id: next.projectId,
        name: next.name,
        subject: next.subject,
        html: next.html,
        text: next.text,
        variables: writeVariables(next),
        published_at: next.publishedAt,
      };
      const { id: _id, project_id: _project, created_at: _created, ...changes } = toRow(next);
      const trx = transaction.db;
      let update = trx
        .updateTable('templates')
        .set(changes)
        .where('project_id', '=', current.projectId)
        .where('id', '=', current.id)
        .where('updated_at', '=', current.updatedAt);
      update =
        current.publishedVersion === null
          ? update.where('published_version', 'is', null)
          : update.where('published_version', '=', current.publishedVersion);
      const result = await update.executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) return false;
      await trx.insertInto('template_versions').values(version).execute();
      return true;
    },

    async listVersions(
      projectId: string,
      templateId: string,
      page: VersionPageRequest,
    ): Promise<Page<TemplateVersionRecord>> {
      // Versions are keyed by number, not by id; the shared keyset helper works on them all the same.
      const request: PageRequest = {
        limit: page.limit,
        after: page.after === undefined ? undefined : String(page.after),
        before: page.before === undefined ? undefined : String(page.before),
      };
      const result = await pageByIdDesc(request, (cursor, order, limit) => {
        let query = db
          .selectFrom('template_versions')
          .selectAll()
          .where('project_id', '=', projectId)
          .where('template_id', '=', templateId);
        if (cursor) query = query.where('version', cursor.op, Number(cursor.id));
        return query.orderBy('version', order).limit(limit).execute();
      });
      return mapPage(result, toVersionRecord);
    },

    async findVersion(
      projectId: string,
      templateId: string,
      version: number,
    ): Promise<TemplateVersionRecord | undefined> {
      const load = async () => {
        const row = await db
          .selectFrom('template_versions')
          .selectAll()
          .where('project_id', '=', projectId)
          .where('template_id', '=', templateId)
          .where('version', '=', version)
          .executeTakeFirst();
        return row && toVersionRecord(row);
      };
      return versions ? versions.get(`${projectId} ${templateId} ${version}`, load) : load();
    },
  };
}

export type TemplateRepo = ReturnType<typeof createTemplateRepo>;
