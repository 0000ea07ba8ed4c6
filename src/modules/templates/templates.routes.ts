import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath, callUnderPathAt, callUnderPathWith } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { DEFAULT_LIST_LIMIT, list, ListQuery, toPageRequest } from '../../http/list.ts';
import {
  CreateTemplateBody,
  DeletedTemplate,
  PublishedTemplate,
  PublishTemplateBody,
  RenderedTemplate,
  RenderTemplateBody,
  Template,
  TemplateList,
  TemplateParams,
  TemplateVersion,
  TemplateVersionList,
  TemplateVersionParams,
  UpdateTemplateBody,
  VersionListQuery,
} from './templates.schemas.ts';
import type { TemplateService } from './templates.service.ts';

const routes = routeOptions(['Templates']);

export function registerTemplateRoutes(
  server: FastifyInstance,
  { templates }: { templates: TemplateService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/v1/templates',
    routes.fullAccess({
      operationId: 'createTemplate',
      summary: 'Create a template',
      description: 'Creates a draft; it can be sent once published.',
      body: CreateTemplateBody,
      response: { 201: Template, ...errorResponses(409) },
    }),
    async (request, reply) => {
      const record = templates.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact((transaction) => templates.create(transaction, record));
    },
  );

  app.get(
    '/v1/templates',
    routes.readOnly({
      operationId: 'listTemplates',
      summary: 'List templates, newest first',
      description: "The project's templates with their drafts, newest first.",
      querystring: ListQuery,
      response: { 200: TemplateList, ...errorResponses() },
    }),
    async (request) => {
      const page = await templates.list(projectOf(request), toPageRequest(request.query, 'tpl'));
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/templates/:id',
    routes.readOnly({
      operationId: 'getTemplate',
      summary: 'Retrieve a template by id or alias',
      description: 'A template and its draft, by id (`tpl_…`) or alias.',
      params: TemplateParams,
      response: { 200: Template, ...errorResponses() },
    }),
    callUnderPath(templates.get),
  );

  app.patch(
    '/v1/templates/:id',
    routes.fullAccess({
      operationId: 'updateTemplate',
      summary: 'Update a template draft',
      description:
        'Only the fields sent change; `alias`, `subject`, `html` and `text` may be null to clear them. Published versions are not affected until the next publish.',
      params: TemplateParams,
      body: UpdateTemplateBody,
      response: { 200: Template, ...errorResponses(409) },
    }),
    callUnderPathWith('body', templates.update),
  );

  app.delete(
    '/v1/templates/:id',
    routes.fullAccess({
      operationId: 'deleteTemplate',
      summary: 'Delete a template and its versions',
      description: 'Deletes the template and every published version of it.',
      params: TemplateParams,
      response: { 200: DeletedTemplate, ...errorResponses() },
    }),
    callUnderPath(templates.delete),
  );

  app.post(
    '/v1/templates/:id/publish',
    // The seed's body is optional: publishing the draft as it stands needs none.
    routes.fullAccess(
      {
        operationId: 'publishTemplate',
        summary: 'Publish a template',
        description:
          'The fields sent replace the draft’s first. The template must have an html or text body and parse as Liquid; it is then stored as the next numbered version, which sends use. When the result is what the latest version already holds (name, subject, html, text, variables), no copy is stored: the answer is that version, with its number and `published_at`.',
        params: TemplateParams,
        body: PublishTemplateBody,
        response: { 200: PublishedTemplate, ...errorResponses(409) },
      },
      { optionalBody: true },
    ),
    async (request, reply) => {
      const plan = await templates.preparePublish(projectOf(request), request.params.id, request.body);
      return reply.transact((transaction) => templates.publish(transaction, plan));
    },
  );

  app.get(
    '/v1/templates/:id/versions',
    routes.readOnly({
      operationId: 'listTemplateVersions',
      summary: 'List the published versions of a template, newest first',
      description: 'The immutable published versions, newest first; cursors are version numbers.',
      params: TemplateParams,
      querystring: VersionListQuery,
      response: { 200: TemplateVersionList, ...errorResponses() },
    }),
    async (request) => {
      const page = await templates.listVersions(projectOf(request), request.params.id, {
        ...request.query,
        limit: request.query.limit ?? DEFAULT_LIST_LIMIT,
      });
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/templates/:id/versions/:version',
    routes.readOnly({
      operationId: 'getTemplateVersion',
      summary: 'Retrieve one published version of a template',
      description: 'One immutable published version, as sends of that version use it.',
      params: TemplateVersionParams,
      response: { 200: TemplateVersion, ...errorResponses() },
    }),
    callUnderPathAt('version', templates.getVersion),
  );

  app.post(
    '/v1/templates/:id/render',
    // Writes nothing: no transaction to hold while it renders. Without a body, the draft renders with none.
    routes.readOnly(
      {
        operationId: 'renderTemplate',
        summary: 'Render a template with variables (preview)',
        description:
          'Renders the draft, or the published `version`, as a send would: html output is escaped, and text is generated from html when the template has none. A missing variable is not an error here (a send refuses it with a 422): the preview answers 200, renders it blank and lists it in `warnings` (`missing_variable`).',
        params: TemplateParams,
        body: RenderTemplateBody,
        response: { 200: RenderedTemplate, ...errorResponses() },
      },
      { idempotencyOutsideTransaction: true, optionalBody: true },
    ),
    callUnderPathWith('body', templates.render),
  );
}
