import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import { notFound } from '../../lib/errors.ts';
import { attachmentContentType } from '../emails/attachments.ts';
import type { EmailService } from '../emails/emails.service.ts';
import type { ReceivedEmailRecord } from '../inbound/received.repo.ts';
import { sendAttachment, sendRawMessage } from '../inbound/received.routes.ts';
import type { ReceivedService } from '../inbound/received.service.ts';
import { toReceivedView } from '../inbound/received-view.ts';
import { type DownloadLinks, DOWNLOAD_PATH } from './resend-downloads.ts';
import { hide, IdParams } from './resend-routing.ts';

// Resend's receiving (`emails.receiving`: list, get, attachments; `forward` is the SDK's own: it GETs the
// email, fetches its raw `download_url` and sends with POST /emails) over Postwire's received emails, and
// `emails.attachments` over a sent email's files. An attachment's `id` is its index (as in `email.received`);
// its bytes are behind a signed link (resend-downloads.ts).

const AttachmentParams = Type.Object({
  id: Type.String({ minLength: 1 }),
  attachmentId: Type.String({ pattern: '^(0|[1-9][0-9]{0,5})$' }),
});
const ReceivingQuery = Type.Object(
  { html_format: Type.Optional(Type.Union([Type.Literal('data_uri'), Type.Literal('cid')])) },
  { additionalProperties: false },
);

type ReceivedView = ReturnType<typeof toReceivedView>;

/** Resend's `ListReceivingEmail`: the addresses as written, the attachments' metadata. */
function toResendReceived(view: ReceivedView) {
  const addresses = (list: readonly { address: string }[]) => list.map((entry) => entry.address);
  return {
    id: view.id,
    to: addresses(view.to),
    from: view.from?.address ?? view.mail_from,
    created_at: view.received_at,
    subject: view.subject ?? '',
    bcc: [],
    cc: addresses(view.cc),
    reply_to: addresses(view.reply_to),
    received_for: [view.recipient],
    message_id: view.message_id ?? '',
    attachments: view.attachments.map((attachment) => ({
      id: String(attachment.index),
      filename: attachment.filename,
      size: attachment.size,
      content_type: attachment.content_type,
      content_id: attachment.content_id,
      content_disposition: attachment.disposition,
    })),
  };
}

/** The first value of each header (Resend's `headers` is an object). */
const headerObject = (headers: readonly { name: string; value: string }[]): Record<string, string> => {
  const object: Record<string, string> = {};
  for (const { name, value } of headers) {
    const key = name.toLowerCase();
    if (!(key in object)) object[key] = value;
  }
  return object;
};

export function registerResendReceivingRoutes(
  scope: FastifyInstance,
  {
    received,
    emails,
    downloads,
  }: { received: ReceivedService; emails: EmailService; downloads: DownloadLinks },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const read = { permission: 'read_only' } as const;

  const attachmentOf = (
    request: FastifyRequest,
    kind: 'received-attachment' | 'email-attachment',
    id: string,
    attachment: {
      index: number;
      filename: string | null;
      size: number;
      content_type: string;
      content_id: string | null;
      inline: boolean;
    },
  ) => ({
    id: String(attachment.index),
    ...(attachment.filename === null ? {} : { filename: attachment.filename }),
    size: attachment.size,
    content_type: attachment.content_type,
    content_disposition: attachment.inline ? ('inline' as const) : ('attachment' as const),
    ...(attachment.content_id === null ? {} : { content_id: attachment.content_id }),
    ...downloads.link(request, { kind, projectId: projectOf(request), id, index: attachment.index }),
  });

  const receivedAttachments = (request: FastifyRequest, record: ReceivedEmailRecord) =>
    toReceivedView(record).attachments.map((attachment) =>
      attachmentOf(request, 'received-attachment', record.id, {
        ...attachment,
        inline: attachment.disposition === 'inline',
      }),
    );

  app.get(
    '/emails/receiving',
    { config: read, schema: { ...hide, querystring: ListQuery } },
    async (request) => {
      const page = await received.list(
        projectOf(request),
        toPageRequest(request.query, 'rcv'),
        {},
        { content: true },
      );
      return list(
        page.items.map((record) => toResendReceived(toReceivedView(record))),
        page.hasMore,
      );
    },
  );

  // `html_format` is taken: Postwire keeps `cid:` references as received (Resend's `cid`), it never inlines.
  app.get(
    '/emails/receiving/:id',
    { config: read, schema: { ...hide, params: IdParams, querystring: ReceivingQuery } },
    async (request) => {
      const record = await received.get(projectOf(request), request.params.id);
      const view = toReceivedView(record);
      return {
        object: 'email',
        ...toResendReceived(view),
        html: view.html,
        text: view.text,
        headers: headerObject(view.headers),
        raw: downloads.link(request, {
          kind: 'received-raw',
          projectId: record.projectId,
          id: record.id,
          index: 0,
        }),
      };
    },
  );

  app.get(
    '/emails/receiving/:id/attachments',
    { config: read, schema: { ...hide, params: IdParams, querystring: ListQuery } },
    async (request) =>
      list(receivedAttachments(request, await received.get(projectOf(request), request.params.id)), false),
  );

  app.get(
    '/emails/receiving/:id/attachments/:attachmentId',
    { config: read, schema: { ...hide, params: AttachmentParams } },
    async (request) => {
      const { id, attachmentId } = request.params;
      const found = receivedAttachments(request, await received.get(projectOf(request), id)).find(
        (attachment) => attachment.id === attachmentId,
      );
      if (!found) throw notFound('attachment', `${id}/attachments/${attachmentId}`);
      return { object: 'attachment', ...found };
    },
  );

  const sentAttachments = async (request: FastifyRequest, id: string) =>
    (await emails.attachments(projectOf(request), id)).map((attachment, index) =>
      attachmentOf(request, 'email-attachment', id, {
        index,
        filename: attachment.filename,
        size: attachment.size,
        content_type: attachmentContentType(attachment.filename, attachment.contentType),
        content_id: attachment.contentId,
        inline: attachment.contentId !== null,
      }),
    );

  app.get(
    '/emails/:id/attachments',
    { config: read, schema: { ...hide, params: IdParams, querystring: ListQuery } },
    async (request) => list(await sentAttachments(request, request.params.id), false),
  );

  app.get(
    '/emails/:id/attachments/:attachmentId',
    { config: read, schema: { ...hide, params: AttachmentParams } },
    async (request) => {
      const { id, attachmentId } = request.params;
      const found = (await sentAttachments(request, id)).find((attachment) => attachment.id === attachmentId);
      if (!found) throw notFound('attachment', `${id}/attachments/${attachmentId}`);
      return { object: 'attachment', ...found };
    },
  );

  // The links' files: no key (the link is the credential), the project the link names.
  app.get(
    DOWNLOAD_PATH,
    // In the query: a token is longer than a path parameter may be.
    { config: { public: true }, schema: { ...hide, querystring: Type.Object({ token: Type.String() }) } },
    async (request, reply) => {
      const { kind, projectId, id, index } = downloads.read(request.query.token);
      if (kind === 'received-raw') {
        return sendRawMessage(reply, id, await received.raw(projectId, id));
      }
      if (kind === 'received-attachment') {
        const attachment = await received.attachment(projectId, id, index);
        return sendAttachment(reply, attachment.content_type, attachment.filename ?? `attachment-${index}`, [
          attachment.content,
        ]);
      }
      const attachment = await emails.attachment(projectId, id, index);
      return sendAttachment(
        reply,
        attachmentContentType(attachment.filename, attachment.contentType),
        attachment.filename,
        attachment.content,
      );
    },
  );
}
