import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { listOf, toPageRequest } from '../../http/list.ts';
import { binary } from '../../http/schema-helpers.ts';
import {
  ReceivedAttachmentParams,
  ReceivedEmail,
  ReceivedEmailList,
  ReceivedEmailListQuery,
  ReceivedEmailParams,
} from './received.schemas.ts';
import type { ReceivedService } from './received.service.ts';
import { toReceivedSummary, toReceivedView } from './received-view.ts';
import { type ByteChunks, streamOf, totalBytes } from '../../lib/byte-chunks.ts';

const routes = routeOptions(['Received emails']);

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

/** Sends a received message's bytes, a chunk at a time: it may be 40 MiB, never joined here (lib/byte-chunks.ts). */
export const sendRawMessage = (reply: FastifyReply, id: string, raw: ByteChunks): FastifyReply =>
  reply
    .type('message/rfc822')
    .header('content-disposition', `attachment; filename="${id}.eml"`)
    .header('content-length', totalBytes(raw))
    .send(streamOf(raw));

/**
 * Sends a file as a download, never as a page: under a sandboxing Content-Security-Policy, and types that could
 * run in a browser (html, svg, scripts) as `application/octet-stream`. Also /resend's signed download links.
 */
export function sendAttachment(
  reply: FastifyReply,
  contentType: string,
  filename: string,
  content: ByteChunks,
): FastifyReply {
  const declared = contentType.toLowerCase();
  return reply
    .type(INERT_TYPES.has(declared) ? declared : 'application/octet-stream')
    .header(
      'content-disposition',
      `attachment; filename="${filename.replace(/[^\x20-\x7e]|["\\]/g, '_')}"; filename*=UTF-8''${encodeURIComponent(filename)}`,
    )
    .header('content-security-policy', "default-src 'none'; sandbox")
    .header('x-content-type-options', 'nosniff')
    .header('content-length', totalBytes(content))
    .send(streamOf(content));
}

export function registerReceivedRoutes(
  server: FastifyInstance,
  { received }: { received: ReceivedService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/received-emails',
    routes.readOnly({
      operationId: 'listReceivedEmails',
      summary: 'List received emails, newest first',
      description:
        'What inbound routes took, one item per accepted recipient, without bodies and headers (GET one for them). Filters: `route_id`, `recipient`, `since`, `until`.',
      querystring: ReceivedEmailListQuery,
      response: { 200: ReceivedEmailList, ...errorResponses() },
    }),
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
    routes.readOnly({
      operationId: 'getReceivedEmail',
      summary: 'Retrieve a received email',
      description:
        'Its parsed fields, bodies, headers, attachments (metadata), authentication results, spam verdict and the email it replies to.',
      params: ReceivedEmailParams,
      response: { 200: ReceivedEmail, ...errorResponses() },
    }),
    async (request) => toReceivedView(await received.get(projectOf(request), request.params.id)),
  );

  app.get(
    '/v1/received-emails/:id/raw',
    routes.readOnly({
      operationId: 'getReceivedEmailRaw',
      summary: 'The bytes of a received email, as received',
      description: 'The message exactly as the listener stored it (`message/rfc822`).',
      params: ReceivedEmailParams,
      response: { 200: binary('message/rfc822', 'The message.'), ...errorResponses() },
    }),
    async (request, reply) => {
      return sendRawMessage(
        reply,
        request.params.id,
        await received.raw(projectOf(request), request.params.id),
      );
    },
  );

  app.get(
    '/v1/received-emails/:id/attachments/:index',
    routes.readOnly({
      operationId: 'getReceivedEmailAttachment',
      summary: 'The bytes of a received attachment',
      description:
        'Decoded. Served as a download (`content-disposition: attachment`) under a sandboxing Content-Security-Policy; types that could run in a browser (html, svg, scripts) as `application/octet-stream`.',
      params: ReceivedAttachmentParams,
      response: {
        200: binary('application/octet-stream', 'The attachment.'),
        ...errorResponses(503),
      },
    }),
    async (request, reply) => {
      const attachment = await received.attachment(
        projectOf(request),
        request.params.id,
        request.params.index,
      );
      const filename = attachment.filename ?? `attachment-${request.params.index}`;
      return sendAttachment(reply, attachment.content_type, filename, [attachment.content]);
    },
  );
}
