import { type Clock, nextUpdatedAt as laterUpdatedAt } from '../../lib/clock.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import { mapPage, type PageRequest } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import { missingVariables, type TemplateContent, type TemplateRenderer, withDefaults } from './render.ts';
import type {
  StoredTemplate,
  TemplateRecord,
  TemplateRepo,
  TemplateVersionRecord,
  VariableDefaults,
  VersionPageRequest,
  WriteResult,
} from './templates.repo.ts';
import {
  ALIAS_PATTERN,
  type CreateTemplateInput,
  type PublishedTemplateView,
  type PublishTemplateInput,
  type RenderedTemplateView,
  type RenderTemplateInput,
  type TemplateVersionView,
  type TemplateView,
  type UpdateTemplateInput,
} from './templates.schemas.ts';

export interface TemplateServiceDeps {
  repo: TemplateRepo;
  clock: Clock;
  renderer: TemplateRenderer;
}

const aliasShape = new RegExp(ALIAS_PATTERN);

export function toTemplateView(record: StoredTemplate): TemplateView {
  return {
    object: 'template',
    id: record.id,
    name: record.name,
    alias: record.alias,
    subject: record.subject,
    html: record.html,
    text: record.text,
    variables: record.variables,
    variable_defaults: record.variableDefaults,
    created_at: record.createdAt,
    updated_at: record.updatedAt,
    published_at: record.publishedAt,
    published_version: record.publishedVersion,
    has_unpublished_changes: record.hasUnpublishedChanges,
  };
}

export function toTemplateVersionView(record: TemplateVersionRecord): TemplateVersionView {
  return {
    object: 'template_version',
    template_id: record.templateId,
    version: record.version,
    name: record.name,
    subject: record.subject,
    html: record.html,
    text: record.text,
    variables: record.variables,
    variable_defaults: record.variableDefaults,
    published_at: record.publishedAt,
  };
}

/**
 * The defaults a template keeps: each must name a declared variable (422 naming it otherwise), in declaration
 * order. `given` absent keeps the ones of `previous` whose name is still declared.
 */
function variableDefaultsFor(
  variables: readonly string[],
  given: VariableDefaults | undefined,
  previous: VariableDefaults = {},
): VariableDefaults {
  const defaults = given ?? previous;
  if (given !== undefined) {
    const declared = new Set(variables);
    for (const name of Object.keys(given)) {
      if (!declared.has(name)) {
        throw invalidParam(
          `variable_defaults.${name}`,
          `'${name}' is not a declared variable: add it to variables to give it a default.`,
        );
      }
    }
  }
  return Object.fromEntries(
    variables.filter((name) => Object.hasOwn(defaults, name)).map((name) => [name, defaults[name]!]),
  );
}

const aliasTaken = (alias: string | null): DomainError =>
  conflict('alias_taken', `Another template in this project already has the alias '${alias}'.`, 'alias');

/** A publish as checked before its transaction: the template as read, its new draft, what was sent. */
interface PublishPlan {
  current: TemplateRecord;
  draft: TemplateRecord;
  input: PublishTemplateInput;
  idOrAlias: string;
}

export function createTemplateService({ repo, clock, renderer }: TemplateServiceDeps) {
  /** Finds a template of the project by id or alias; anything else (another project's) is a 404. */
  async function load(projectId: string, idOrAlias: string): Promise<StoredTemplate> {
    let record: StoredTemplate | undefined;
    if (isId('tpl', idOrAlias)) record = await repo.find(projectId, idOrAlias);
    else if (aliasShape.test(idOrAlias)) record = await repo.findByAlias(projectId, idOrAlias);
    if (!record) throw notFound('template', idOrAlias);
    return record;
  }

  async function reload(projectId: string, id: string): Promise<TemplateView> {
    const record = await repo.find(projectId, id);
    // Deleted between our write and this read: answer as if the request came after the delete.
    if (!record) throw notFound('template', id);
    return toTemplateView(record);
  }

  function check(result: WriteResult, alias: string | null): void {
    if (result === 'alias_taken') throw aliasTaken(alias);
  }

  // updated_at moves on every change, even two within one millisecond: clients order by it, and
  // publishing uses it to detect that the draft changed under it.
  const nextUpdatedAt = (previous: string): string => laterUpdatedAt(clock, previous);

  const dedupe = (names: string[]): string[] => [...new Set(names)];

  /** The draft with the fields a publish sends applied, checked to render (a Liquid parse: before any transaction). */
  function publishedDraft(current: TemplateRecord, input: PublishTemplateInput): TemplateRecord {
    const draft: TemplateRecord = { ...current };
    if (input.name !== undefined) draft.name = input.name;
    if (input.subject !== undefined) draft.subject = input.subject;
    if (input.html !== undefined) draft.html = input.html;
    if (input.text !== undefined) draft.text = input.text;
    if (Object.keys(input).length > 0) draft.updatedAt = nextUpdatedAt(current.updatedAt);
    renderer.check(draft);
    return draft;
  }

  return {
    prepareCreate(projectId: string, input: CreateTemplateInput): TemplateRecord {
      const now = clock.now().toISOString();
      const variables = dedupe(input.variables ?? []);
      return {
        id: newId('tpl'),
        projectId,
        name: input.name,
        alias: input.alias ?? null,
        subject: input.subject ?? null,
        html: input.html ?? null,
        text: input.text ?? null,
        variables,
        variableDefaults: variableDefaultsFor(variables, input.variable_defaults),
        createdAt: now,
        updatedAt: now,
        publishedAt: null,
        publishedVersion: null,
      };
    },

    async create(transaction: Transaction, record: TemplateRecord): Promise<TemplateView> {
      check(await repo.insert(record, transaction), record.alias);
      return toTemplateView({ ...record, hasUnpublishedChanges: true });
    },

    async get(projectId: string, idOrAlias: string): Promise<TemplateView> {
      return toTemplateView(await load(projectId, idOrAlias));
    },

    async list(projectId: string, page: PageRequest) {
      return mapPage(await repo.list(projectId, page), toTemplateView);
    },

    async update(projectId: string, idOrAlias: string, input: UpdateTemplateInput): Promise<TemplateView> {
      if (Object.keys(input).length === 0) {
        throw new DomainError(
          'validation',
          'parameter_missing',
          'Send at least one of name, alias, subject, html, text, variables, variable_defaults.',
        );
      }
      const { hasUnpublishedChanges: _stale, ...current } = await load(projectId, idOrAlias);
      const next: TemplateRecord = { ...current, updatedAt: nextUpdatedAt(current.updatedAt) };
      if (input.name !== undefined) next.name = input.name;
      if (input.alias !== undefined) next.alias = input.alias;
      if (input.subject !== undefined) next.subject = input.subject;
      if (input.html !== undefined) next.html = input.html;
      if (input.text !== undefined) next.text = input.text;
      if (input.variables !== undefined) next.variables = dedupe(input.variables);
      next.variableDefaults = variableDefaultsFor(
        next.variables,
        input.variable_defaults,
        current.variableDefaults,
      );
      check(await repo.update(next), next.alias);
      return reload(projectId, current.id);
    },

    async delete(
      projectId: string,
      idOrAlias: string,
    ): Promise<{ object: 'template'; id: string; deleted: true }> {
      const { id } = await load(projectId, idOrAlias);
      if (!(await repo.delete(projectId, id))) throw notFound('template', idOrAlias);
      return { object: 'template', id, deleted: true };
    },

    /**
     * Applies the fields sent to the draft and checks that the result can be sent (a body, valid Liquid),
     * before any transaction; `publish` then stores it as the next numbered version.
     */
    async preparePublish(
      projectId: string,
      idOrAlias: string,
      input: PublishTemplateInput,
    ): Promise<PublishPlan> {
      const { hasUnpublishedChanges: _stale, ...current } = await load(projectId, idOrAlias);
      return { current, draft: publishedDraft(current, input), input, idOrAlias };
    },

    /** Nothing is written unless every check passes. */
    async publish(transaction: Transaction, plan: PublishPlan): Promise<PublishedTemplateView> {
      const { id, projectId } = plan.current;
      // Publishes (and updates) of one template queue on its row here, so each gets the next version
      // instead of losing a race. Read again under the lock: a change since `prepare` means drafting (and
      // checking) again, rarely.
      const locked = await repo.lockForChange(projectId, id, transaction);
      if (!locked) throw notFound('template', plan.idOrAlias);
      const { hasUnpublishedChanges: _stale, ...current } = locked;
      const unchanged =
        current.updatedAt === plan.current.updatedAt &&
        current.publishedVersion === plan.current.publishedVersion;
      const draft = unchanged ? plan.draft : publishedDraft(current, plan.input);
      // Publishing what the latest version already holds stores no copy of it: the answer is that version.
      if (
        current.publishedVersion !== null &&
        current.publishedAt !== null &&
        !locked.hasUnpublishedChanges &&
        sameContent(draft, current)
      ) {
        return {
          object: 'template' as const,
          id: current.id,
          published_at: current.publishedAt,
          version: current.publishedVersion,
        };
      }
      const publishedAt = clock.now().toISOString();
      const version = (current.publishedVersion ?? 0) + 1;
      const next: TemplateRecord = { ...draft, publishedAt, publishedVersion: version };
      if (!(await repo.publish(current, next, transaction))) {
        throw new Error(`template ${id} changed while its row was locked for publishing`);
      }
      return { object: 'template' as const, id: current.id, published_at: publishedAt, version };
    },

    async listVersions(projectId: string, idOrAlias: string, page: VersionPageRequest) {
      if (page.after !== undefined && page.before !== undefined) {
        throw invalidParam('before', 'Send either after or before, not both.');
      }
      const template = await load(projectId, idOrAlias);
      return mapPage(await repo.listVersions(projectId, template.id, page), toTemplateVersionView);
    },

    async getVersion(projectId: string, idOrAlias: string, version: number): Promise<TemplateVersionView> {
      const template = await load(projectId, idOrAlias);
      const record = await repo.findVersion(projectId, template.id, version);
      if (!record) throw versionMissing(template.id, version);
      return toTemplateVersionView(record);
    },

    /** Renders the draft, or a published version, with the variables given: a preview of a send. */
    async render(
      projectId: string,
      idOrAlias: string,
      input: RenderTemplateInput,
    ): Promise<RenderedTemplateView> {
      const template = await load(projectId, idOrAlias);
      let content: TemplateContent & { variables: string[]; variableDefaults: VariableDefaults } = template;
      if (input.version !== undefined) {
        const version = await repo.findVersion(projectId, template.id, input.version);
        if (!version) throw versionMissing(template.id, input.version);
        content = version;
      }
      const variables = withDefaults(input.variables ?? {}, content.variableDefaults);
      const source = { subject: content.subject, html: content.html, text: content.text };
      // A preview still renders what is missing (blank), so the rest can be looked at; a send would refuse
      // it, so it is listed: the declared variables, and those the template prints unconditionally.
      const declared = new Set(content.variables);
      const missing = missingVariables([...declared, ...renderer.requiredVariables(source)], variables);
      const rendered = await renderer.render(source, variables);
      return {
        object: 'rendered_template',
        ...rendered,
        warnings: missing.map((variable) => ({
          code: 'missing_variable' as const,
          variable,
          message: `No value for the ${declared.has(variable) ? 'declared ' : ''}variable '${variable}'${declared.has(variable) ? '' : ', which the template prints'}: it renders blank here, and a send without it is refused (422 template_variables_missing).`,
        })),
      };
    },
  };
}

/** Whether two drafts would publish the same version (what a version stores). */
const sameContent = (a: TemplateRecord, b: TemplateRecord): boolean =>
  a.name === b.name &&
  a.subject === b.subject &&
  a.html === b.html &&
  a.text === b.text &&
  a.variables.length === b.variables.length &&
  a.variables.every(
    (name, index) => name === b.variables[index] && a.variableDefaults[name] === b.variableDefaults[name],
  );

const versionMissing = (templateId: string, version: number): DomainError =>
  new DomainError(
    'not_found',
    'resource_missing',
    `Template '${templateId}' has no version ${version}.`,
    'version',
  );

export type TemplateService = ReturnType<typeof createTemplateService>;
