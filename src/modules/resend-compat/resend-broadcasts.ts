import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { writeUnderPath } from '../../http/path-handlers.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import { invalidParam } from '../../lib/errors.ts';
import type { BroadcastRecord, RecipientFilter } from '../broadcasts/broadcasts.repo.ts';
import {
  CreateBroadcastBody,
  SendBroadcastBody,
  SENT_COPY_OUTCOMES,
  UpdateBroadcastBody,
} from '../broadcasts/broadcasts.schemas.ts';
import { broadcastWriteHandlers } from '../broadcasts/broadcasts.routes.ts';
import type { BroadcastService } from '../broadcasts/broadcasts.service.ts';
import { hide, IdParams, translated } from './resend-routing.ts';

// Resend's broadcasts (create with send/scheduledAt, get, list, update, send, cancel, duplicate, remove,
// recipients, clicked links) over the /v1 broadcasts service. A broadcast created here is personalized in
// Resend's dialect: `{{{FIRST_NAME|there}}}`, `{{{LAST_NAME}}}`, `{{{EMAIL}}}`, `{{{<property key>|fallback}}}`,
// `{{{RESEND_UNSUBSCRIBE_URL}}}`.

/** Resend's statuses: a scheduled or sending broadcast is `queued`. */
const STATUS: Record<BroadcastRecord['status'], string> = {
  draft: 'draft',
  scheduled: 'queued',
  sending: 'queued',
  sent: 'sent',
  canceled: 'canceled',
};

const summary = (record: BroadcastRecord) => ({
  id: record.id,
  name: record.name,
  audience_id: record.segmentId,
  segment_id: record.segmentId,
  status: STATUS[record.status],
  created_at: record.createdAt,
  scheduled_at: record.scheduledAt,
  sent_at: record.sentAt,
});

/** A broadcast as Resend's API answers it (`GetBroadcastResponseSuccess`). */
const toResendBroadcast = (record: BroadcastRecord) => ({
  object: 'broadcast',
  ...summary(record),
  from: record.from,
  subject: record.subject,
  reply_to: record.replyTo.length > 0 ? record.replyTo : null,
  preview_text: record.previewText,
  topic_id: record.topicId,
  html: record.html,
  text: record.text,
});

const RELATIVE = /^in\s+(\d+)\s+(minute|hour|day|week)s?$/i;
const UNIT_MS: Record<string, number> = {
  minute: 60_000,
  hour: 3_600_000,
  day: 86_400_000,
  week: 604_800_000,
};

/** Resend's `scheduled_at`: ISO 8601, or a relative time such as `in 2 days` (read against `now`). */
function scheduledAt(value: unknown, now: Date): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw invalidParam('scheduled_at', 'scheduled_at must be a string.');
  const relative = RELATIVE.exec(value.trim());
  if (!relative) return value;
  return new Date(now.getTime() + Number(relative[1]) * UNIT_MS[relative[2]!.toLowerCase()]!).toISOString();
}

/** A Resend body with its nulls and undefineds dropped, `audience_id` read as `segment_id`. */
function fromResend(body: unknown, keepNull: readonly string[] = []): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return {};
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body as Record<string, unknown>)) {
    if (value === undefined || (value === null && !keepNull.includes(key))) continue;
    out[key === 'audience_id' ? 'segment_id' : key] = value;
  }
  if ('audience_id' in out) delete out.audience_id;
  return out;
}

// Resend's recipient types are the outcomes of a sent copy, and the contacts left out for the suppression list.
const RESEND_RECIPIENT_TYPES = [...SENT_COPY_OUTCOMES, 'suppressed'] as const;
const RecipientsQuery = Type.Composite([
  ListQuery,
  Type.Object({
    type: Type.Union(RESEND_RECIPIENT_TYPES.map((value) => Type.Literal(value))),
    email: Type.Optional(Type.String()),
    bounce_type: Type.Optional(Type.String()),
  }),
]);

export function registerResendBroadcastRoutes(
  scope: FastifyInstance,
  { broadcasts, clock }: { broadcasts: BroadcastService; clock: { now(): Date } },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const write = { permission: 'full_access' } as const;
  const read = { permission: 'read_only' } as const;
  // Resend answers a written broadcast with its id alone.
  const writes = broadcastWriteHandlers(broadcasts, (record) => ({ id: record.id }));
  const withSchedule = (body: unknown) => {
    const out = fromResend(body);
    const at = scheduledAt(out.scheduled_at, clock.now());
    if (at === undefined) delete out.scheduled_at;
    else out.scheduled_at = at;
    return out;
  };

  app.post(
    '/broadcasts',
    {
      config: write,
      schema: { ...hide, body: CreateBroadcastBody },
      preValidation: translated(withSchedule),
    },
    writes.create('resend', 200),
  );

  app.get('/broadcasts', { config: read, schema: { ...hide, querystring: ListQuery } }, async (request) => {
    const page = await broadcasts.listRecords(projectOf(request), toPageRequest(request.query, 'bc'));
    return list(page.items.map(summary), page.hasMore);
  });

  app.get('/broadcasts/:id', { config: read, schema: { ...hide, params: IdParams } }, async (request) =>
    toResendBroadcast(await broadcasts.find(projectOf(request), request.params.id)),
  );

  app.patch(
    '/broadcasts/:id',
    {
      config: write,
      schema: { ...hide, params: IdParams, body: UpdateBroadcastBody },
      preValidation: translated((body) => fromResend(body, ['topic_id'])),
    },
    writes.update,
  );

  app.post(
    '/broadcasts/:id/send',
    {
      config: { permission: 'sending_access' },
      schema: { ...hide, params: IdParams, body: SendBroadcastBody },
      preValidation: translated(withSchedule),
    },
    writes.send,
  );

  app.post(
    '/broadcasts/:id/cancel',
    { config: write, schema: { ...hide, params: IdParams } },
    writeUnderPath(broadcasts.cancel),
  );

  app.post(
    '/broadcasts/:id/duplicate',
    { config: write, schema: { ...hide, params: IdParams } },
    async (request, reply) =>
      reply.transact(async (transaction) => ({
        object: 'broadcast',
        id: (await broadcasts.duplicate(transaction, projectOf(request), request.params.id)).id,
      })),
  );

  app.delete(
    '/broadcasts/:id',
    { config: write, schema: { ...hide, params: IdParams } },
    writeUnderPath(broadcasts.delete),
  );

  app.get(
    '/broadcasts/:id/recipients',
    { config: read, schema: { ...hide, params: IdParams, querystring: RecipientsQuery } },
    async (request) => {
      const projectId = projectOf(request);
      const { type, email, limit } = request.query;
      if (type === 'suppressed') {
        // Resend's suppressed recipients are the contacts a broadcast left out for the suppression list.
        const page = await broadcasts.exclusions(
          projectId,
          request.params.id,
          request.query.after,
          limit ?? 20,
        );
        const rows = page.items.filter(
          (row) => row.reason === 'suppressed' && (email === undefined || row.email === email.toLowerCase()),
        );
        return list(
          rows.map((row) => ({ id: row.contactId, contact_id: row.contactId, email: row.email })),
          page.hasMore,
        );
      }
      const page = await broadcasts.recipients(
        projectId,
        request.params.id,
        type satisfies RecipientFilter,
        email,
        toPageRequest(request.query, 'msg'),
      );
      return list(
        page.items.map((row) => ({
          id: row.emailId,
          contact_id: row.contactId,
          email: row.address,
          ...(type === 'opened' ? { count: row.openCount } : {}),
          ...(type === 'clicked' ? { count: row.clickCount, clicked_links: [] } : {}),
          ...(type === 'bounced' ? { bounce_type: 'undetermined' } : {}),
        })),
        page.hasMore,
      );
    },
  );

  app.get(
    '/broadcasts/:id/clicked-links',
    { config: read, schema: { ...hide, params: IdParams, querystring: ListQuery } },
    async (request) => {
      const links = await broadcasts.clickedLinks(projectOf(request), request.params.id);
      return list(
        links.map((link, index) => ({
          id: String(index + 1),
          url: link.url,
          clicks: link.clicks,
          unique_clicks: link.uniqueClicks,
        })),
        false,
      );
    },
  );
}
