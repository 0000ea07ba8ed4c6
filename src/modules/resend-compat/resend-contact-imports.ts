import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import { bodyStream, streamMultipart } from '../contacts/contact-imports.routes.ts';
import type { ContactImportService, ContactImportView } from '../contacts/contact-imports.service.ts';
import { hide, IdParams } from './resend-routing.ts';

/** An import as Resend's `contacts.imports.get` answers it (`ContactImport`). */
const toResendImport = (job: ContactImportView) => ({
  object: 'contact_import' as const,
  id: job.id,
  status: job.status,
  created_at: job.created_at,
  completed_at: job.completed_at,
  counts: {
    total: job.counts.total,
    created: job.counts.created,
    updated: job.counts.updated,
    skipped: job.counts.skipped,
    failed: job.counts.failed,
  },
});

const ImportListQuery = Type.Object(
  {
    ...ListQuery.properties,
    status: Type.Optional(
      Type.Union([
        Type.Literal('queued'),
        Type.Literal('in_progress'),
        Type.Literal('completed'),
        Type.Literal('failed'),
      ]),
    ),
  },
  { additionalProperties: false },
);

/**
 * Resend's contact imports (`resend.contacts.imports.create`, `get`, `list`) over /v1's: the same form
 * (`file`, `column_map`, `on_conflict` `upsert` or `skip`, `segments`, `topics`), the same job.
 */
export function registerResendContactImportRoutes(
  scope: FastifyInstance,
  { contactImports }: { contactImports: ContactImportService },
): void {
  scope.register(async (uploads) => {
    streamMultipart(uploads);
    uploads.post(
      '/contacts/imports',
      {
        config: { permission: 'full_access', streamsBody: true },
        schema: hide,
      },
      async (request, reply) => {
        const record = await contactImports.prepare(projectOf(request), request.headers, bodyStream(request));
        try {
          return await reply.transact(async (transaction) => {
            await contactImports.create(transaction, record);
            return { object: 'contact_import', id: record.id };
          });
        } catch (error) {
          await contactImports.discard(record);
          throw error;
        }
      },
    );
  });

  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/contacts/imports',
    { config: { permission: 'read_only' }, schema: { ...hide, querystring: ImportListQuery } },
    async (request) => {
      const { status, ...page } = request.query;
      const result = await contactImports.list(projectOf(request), toPageRequest(page, 'cimp'), status);
      return list(result.items.map(toResendImport), result.hasMore);
    },
  );

  app.get(
    '/contacts/imports/:id',
    { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
    async (request) => toResendImport(await contactImports.get(projectOf(request), request.params.id)),
  );
}
