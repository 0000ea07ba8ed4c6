import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { toPageRequest, listOf } from '../../http/list.ts';
import {
  ReceivedAttachmentParams,
  ReceivedEmail,
  ReceivedEmailList,
  ReceivedEmailListQuery,
  ReceivedEmailParams,
} from './received.schemas.ts';
import type { ReceivedService } from './received.service.ts';
import { toReceivedSummary, toReceivedView } from './received-view.ts';
import { streamOf, totalBytes } from '../../lib/byte-chunks.ts';

const tags = ['Received emails'];

/** Content types served as they are; anything else (html, scripts, svg) is served as bytes to download. */
const INERT_TYPES = new Set([
  'application/pdf',
  'image/png',
  'image/jpeg',
  'image/gif',
  'image/webp',
  'text/plain',
  'text/csv',
  'application/zip',
]);

const binary = (contentType: string, description: string) => ({
  description,
  content: { [contentType]: { schema: { type: 'string', format: 'binary' } } },
});

export function registerReceivedRoutes(
  server: FastifyInstance,
  { received }: { received: ReceivedService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/received-emails',
    {
      config: { permission: 'read_only' },
      schema: {
        tags,
        operationId: 'listReceivedEmails',
        summary: 'List received emails, newest first',
        description:
          'What inbound routes took, one item per accepted recipient, without bodies and headers (GET one for them). Filters: `route_id`, `recipient`, `since`, `until`.',
        querystring: ReceivedEmailListQuery,
        response: { 200: ReceivedEmailList, ...errorResponses() },
      },
    },
    async (request) => {
      const { route_id, recipient, since, until, ...query } = request.query;
      const page = await received.list(projectOf(request), toPageRequest(query, 'rcv'), {
        routeId: route_id,
        recipient,
        since,
        until,
      });
      return listOf(page, toReceivedSummary);
    },
  );

  app.get(
    '/v1/received-emails/:id',
    {
      config: { permission: 'read_only' },
      schema: {
        tags,
        operationId: 'getReceivedEmail',
        summary: 'Retrieve a received email',
        description:
          'Its parsed fields, bodies, headers, attachments (metadata), authentication results, spam verdict and the email it replies to.',
        params: ReceivedEmailParams,
        response: { 200: ReceivedEmail, ...errorResponses() },
      },
    },
    async (request) => toReceivedView(await received.get(projectOf(request), request.params.id)),
  );

  app.get(
    '/v1/received-emails/:id/raw',
    {
      config: { permission: 'read_only' },
      schema: {
        tags,
        operationId: 'getReceivedEmailRaw',
        summary: 'The bytes of a received email, as received',
        description: 'The message exactly as the listener stored it (`message/rfc822`).',
        params: ReceivedEmailParams,
        response: { 200: binary('message/rfc822', 'The message.'), ...errorResponses() },
      },
    },
    async (request, reply) => {
      const raw = await received.raw(projectOf(request), request.params.id);
      // Streamed a chunk at a time: the message may be 40 MiB, never joined here (lib/byte-chunks.ts).
      return reply
        .type('message/rfc822')
        .header('content-disposition', `attachment; filename="${request.params.id}.eml"`)
        .header('content-length', totalBytes(raw))
        .send(streamOf(raw));
    },
  );

  app.get(
    '/v1/received-emails/:id/attachments/:index',
    {
      config: { permission: 'read_only' },
      schema: {
        tags,
        operationId: 'getReceivedEmailAttachment',
        summary: 'The bytes of a received attachment',
        description:
          'Decoded. Served as a download (`content-disposition: attachment`) under a sandboxing Content-Security-Policy; types that could run in a browser (html, svg, scripts) as `application/octet-stream`.',
        params: ReceivedAttachmentParams,
        response: {
          200: binary('application/octet-stream', 'The attachment.'),
          ...errorResponses(),
        },
      },
    },
    async (request, reply) => {
      const attachment = await received.attachment(
        projectOf(request),
        request.params.id,
        request.params.index,
      );
      const declared = attachment.content_type.toLowerCase();
      const filename = attachment.filename ?? `attachment-${request.params.index}`;
      return reply
        .type(INERT_TYPES.has(declared) ? declared : 'application/octet-stream')
        .header(
          'content-disposition',
          `attachment; filename="${filename.replace(/[^\x20-\x7e]|["\\]/g, '_')}"; filename*=UTF-8''${encodeURIComponent(filename)}`,
        )
        .header('content-security-policy', "default-src 'none'; sandbox")
        .header('x-content-type-options', 'nosniff')
        .send(attachment.content);
    },
  );
}
