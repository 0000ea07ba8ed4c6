import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, toPageRequest } from '../../http/list.ts';
import { DomainError } from '../../lib/errors.ts';
import {
  CONTACT_IMPORT_FORM,
  ContactImport,
  ContactImportList,
  ContactImportListQuery,
  ContactImportParams,
} from './contact-imports.schemas.ts';
import type { ContactImportService } from './contact-imports.service.ts';

/** The body streams of the requests whose body a route reads itself, as it arrives. */
const streams = new WeakMap<FastifyRequest, NodeJS.ReadableStream>();

/** The request's body as a stream (after the hooks that count it), for a route that declares `streamsBody`. */
export function bodyStream(request: FastifyRequest): NodeJS.ReadableStream {
  const stream = streams.get(request);
  if (!stream) {
    throw new DomainError(
      'unsupported_media_type',
      'unsupported_media_type',
      'Send the import as multipart/form-data, with the CSV in a part named file.',
    );
  }
  return stream;
}

/** multipart/form-data left unread for the routes of `scope`, which read it as a stream (bodyStream). */
export function streamMultipart(scope: FastifyInstance): void {
  scope.addContentTypeParser('multipart/form-data', (request, payload, done) => {
    streams.set(request, payload);
    done(null, undefined);
  });
}

// Imports write contacts: a full_access key; read_only keys follow their progress.
export function registerContactImportRoutes(
  server: FastifyInstance,
  { contactImports }: { contactImports: ContactImportService },
): void {
  const routes = routeOptions(['Contacts']);
  server.register(async (scope) => {
    streamMultipart(scope);
    const app = scope.withTypeProvider<TypeBoxTypeProvider>();

    app.post(
      '/v1/contacts/imports',
      {
        ...routes.fullAccess(
          {
            operationId: 'createContactImport',
            summary: 'Import contacts from a CSV',
            description:
              'A multipart/form-data upload: the CSV (`file`) and its options. The file is read as it arrives and checked (a file that is not CSV, or a column map that does not fit its header, is refused and nothing is kept); the rows are then imported by a job, in batches: follow it with GET /v1/contacts/imports/{id}. Rows that cannot be imported are counted and reported, the others imported.',
            consumes: ['multipart/form-data'],
            body: CONTACT_IMPORT_FORM,
            response: { 202: ContactImport, ...errorResponses() },
          },
          { streamsBody: true },
        ),
        // The form is read as a stream by the handler (and checked there): its schema is for the document.
        validatorCompiler: () => () => true,
      },
      async (request, reply) => {
        const record = await contactImports.prepare(projectOf(request), request.headers, bodyStream(request));
        reply.code(202);
        try {
          return await reply.transact((transaction) => contactImports.create(transaction, record));
        } catch (error) {
          await contactImports.discard(record);
          throw error;
        }
      },
    );
  });

  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/v1/contacts/imports',
    routes.readOnly({
      operationId: 'listContactImports',
      summary: 'List contact imports, newest first',
      querystring: ContactImportListQuery,
      response: { 200: ContactImportList, ...errorResponses() },
    }),
    async (request) => {
      const { status, ...page } = request.query;
      const result = await contactImports.list(projectOf(request), toPageRequest(page, 'cimp'), status);
      return list(result.items, result.hasMore);
    },
  );

  app.get(
    '/v1/contacts/imports/:id',
    routes.readOnly({
      operationId: 'getContactImport',
      summary: 'Retrieve a contact import: its status, progress and failed rows',
      params: ContactImportParams,
      response: { 200: ContactImport, ...errorResponses() },
    }),
    callUnderPath(contactImports.get),
  );
}
