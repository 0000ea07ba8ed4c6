import { type Insertable, type Kysely, sql } from 'kysely';
import { type Page, type PageRequest, pageByIdDesc } from '../../db/pagination.ts';
import { deleteProjectRow } from '../../db/project-rows.ts';
import type { BroadcastExclusionsTable, BroadcastStatus, Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { RECIPIENT_FILTERS } from './broadcasts.schemas.ts';

export type ExclusionReason = BroadcastExclusionsTable['reason'];
export type Personalization = 'liquid' | 'resend';

/** A broadcast as stored. */
export interface BroadcastRecord {
  id: string;
  projectId: string;
  name: string;
  from: string | null;
  replyTo: string[];
  subject: string | null;
  previewText: string | null;
  html: string | null;
  text: string | null;
  templateId: string | null;
  templateVariables: Record<string, unknown> | null;
  personalization: Personalization;
  segmentId: string | null;
  topicId: string | null;
  status: BroadcastStatus;
  scheduledAt: string | null;
  startedAt: string | null;
  sentAt: string | null;
  cursor: string | null;
  copies: number;
  excluded: number;
  keyDomainId: string | null;
  trackOpens: boolean;
  trackClicks: boolean;
  createdAt: string;
  updatedAt: string;
}

/** What the content fields an update may change are. */
export type BroadcastContent = Pick<
  BroadcastRecord,
  | 'name'
  | 'from'
  | 'replyTo'
  | 'subject'
  | 'previewText'
  | 'html'
  | 'text'
  | 'templateId'
  | 'templateVariables'
  | 'segmentId'
  | 'topicId'
  | 'trackOpens'
  | 'trackClicks'
>;

export interface ExclusionRecord {
  contactId: string;
  email: string;
  reason: ExclusionReason;
  createdAt: string;
}

const toRecord = (row: Row<'broadcasts'>): BroadcastRecord => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  from: row.from_address,
  replyTo: JSON.parse(row.reply_to) as string[],
  subject: row.subject,
  previewText: row.preview_text,
  html: row.html,
  text: row.text,
  templateId: row.template_id,
  templateVariables:
    row.template_variables === null ? null : (JSON.parse(row.template_variables) as Record<string, unknown>),
  personalization: row.personalization,
  segmentId: row.segment_id,
  topicId: row.topic_id,
  status: row.status,
  scheduledAt: row.scheduled_at,
  startedAt: row.started_at,
  sentAt: row.sent_at,
  cursor: row.cursor,
  copies: Number(row.copies),
  excluded: Number(row.excluded),
  keyDomainId: row.key_domain_id,
  trackOpens: Boolean(row.track_opens),
  trackClicks: Boolean(row.track_clicks),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

const contentRow = (record: BroadcastContent) => ({
  name: record.name,
  from_address: record.from,
  reply_to: JSON.stringify(record.replyTo),
  subject: record.subject,
  preview_text: record.previewText,
  html: record.html,
  text: record.text,
  template_id: record.templateId,
  template_variables: record.templateVariables === null ? null : JSON.stringify(record.templateVariables),
  segment_id: record.segmentId,
  topic_id: record.topicId,
  track_opens: record.trackOpens,
  track_clicks: record.trackClicks,
});

/** The row an insert writes: toRecord the other way. */
const toRow = (record: BroadcastRecord): Insertable<Database['broadcasts']> => ({
  id: record.id,
  project_id: record.projectId,
  ...contentRow(record),
  personalization: record.personalization,
  status: record.status,
  scheduled_at: record.scheduledAt,
  started_at: record.startedAt,
  sent_at: record.sentAt,
  cursor: record.cursor,
  copies: record.copies,
  excluded: record.excluded,
  key_domain_id: record.keyDomainId,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** What happened to the copies of a broadcast, by recipient. */
export type RecipientFilter = (typeof RECIPIENT_FILTERS)[number];

export interface BroadcastRecipientRow {
  emailId: string;
  contactId: string | null;
  address: string;
  status: string;
  openCount: number;
  clickCount: number;
  unsubscribedAt: string | null;
}

/** The broadcasts and broadcast_exclusions tables, and the reads over a broadcast's copies (emails). */
export function createBroadcastRepo(db: Kysely<Database>) {
  const select = (projectId: string, via: Kysely<Database> = db) =>
    via.selectFrom('broadcasts').selectAll().where('project_id', '=', projectId);

  /** A broadcast's copies with their recipient (one each) and engagement. */
  const copies = (broadcastId: string) =>
    db
      .selectFrom('emails')
      .innerJoin('email_recipients', 'email_recipients.email_id', 'emails.id')
      .leftJoin('recipient_engagement', 'recipient_engagement.recipient_id', 'email_recipients.id')
      .where('emails.broadcast_id', '=', broadcastId);

  return {
    async insert(record: BroadcastRecord, transaction: Transaction): Promise<void> {
      await transaction.db.insertInto('broadcasts').values(toRow(record)).execute();
    },

    /** In `transaction` when given. */
    async find(
      projectId: string,
      id: string,
      transaction?: Transaction,
    ): Promise<BroadcastRecord | undefined> {
      const row = await select(projectId, transaction?.db).where('id', '=', id).executeTakeFirst();
      return row && toRecord(row);
    },

    /** By id alone: the fan-out's read of the broadcast it holds. */
    async findById(id: string): Promise<BroadcastRecord | undefined> {
      const row = await db.selectFrom('broadcasts').selectAll().where('id', '=', id).executeTakeFirst();
      return row && toRecord(row);
    },

    async list(projectId: string, page: PageRequest): Promise<Page<BroadcastRecord>> {
      const result = await pageByIdDesc(page, (cursor, order, limit) => {
        let query = select(projectId);
        if (cursor) query = query.where('id', cursor.op, cursor.id);
        return query.orderBy('id', order).limit(limit).execute();
      });
      return { items: result.items.map(toRecord), hasMore: result.hasMore };
    },

    /** Writes the content of a draft; false when it is gone or no longer a draft. */
    async updateDraft(record: BroadcastRecord, transaction: Transaction): Promise<boolean> {
      const result = await transaction.db
        .updateTable('broadcasts')
        .set({ ...contentRow(record), updated_at: record.updatedAt })
        .where('project_id', '=', record.projectId)
        .where('id', '=', record.id)
        .where('status', '=', 'draft')
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },

    /**
     * Moves a broadcast from one of `from` to `to` (with the key that sent it and its time); false when it is
     * in none of them. The fan-out claims a `scheduled` one once its time has come, a `sending` one at once.
     */
    async move(
      projectId: string,
      id: string,
      from: readonly BroadcastStatus[],
      to: BroadcastStatus,
      changes: { scheduledAt?: string | null; keyDomainId?: string | null; updatedAt: string },
      transaction: Transaction,
    ): Promise<boolean> {
      const result = await transaction.db
        .updateTable('broadcasts')
        .set({
          status: to,
          updated_at: changes.updatedAt,
          ...(changes.scheduledAt !== undefined ? { scheduled_at: changes.scheduledAt } : {}),
          ...(changes.keyDomainId !== undefined ? { key_domain_id: changes.keyDomainId } : {}),
        })
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .where('status', 'in', [...from])
        // A broadcast whose fan-out has begun cannot be canceled: it has copies (started_at is written with
        // the first batch).
        .$if(to === 'canceled', (query) => query.where('started_at', 'is', null))
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },

    /** Deletes a draft (or a canceled broadcast, which sent nothing); false otherwise. */
    async deleteUnsent(projectId: string, id: string, transaction: Transaction): Promise<boolean> {
      const found = await select(projectId, transaction.db).where('id', '=', id).executeTakeFirst();
      if (!found || (found.status !== 'draft' && found.status !== 'canceled')) return false;
      return deleteProjectRow(transaction.db, 'broadcasts', projectId, id);
    },

    /**
     * One batch of the fan-out done, in its transaction: the broadcast's place in the segment moves from
     * `previous` to `next` with its counts, only if this worker still holds it and nobody moved it since (the
     * batch's copies commit with it or not at all). `done`: the last batch (status `sent`).
     */
    async advance(
      id: string,
      step: {
        workerId: string;
        previous: string | null;
        next: string | null;
        copies: number;
        excluded: number;
        done: boolean;
        now: string;
      },
      transaction: Transaction,
    ): Promise<boolean> {
      let query = transaction.db
        .updateTable('broadcasts')
        .set((eb) => ({
          cursor: step.next,
          copies: eb('copies', '+', step.copies),
          excluded: eb('excluded', '+', step.excluded),
          started_at: eb.fn.coalesce('started_at', sql.val(step.now)),
          updated_at: step.now,
          ...(step.done
            ? { status: 'sent' as const, sent_at: step.now, locked_by: null, locked_until: null }
            : {}),
        }))
        .where('id', '=', id)
        .where('status', '=', 'sending')
        .where('locked_by', '=', step.workerId);
      query =
        step.previous === null
          ? query.where('cursor', 'is', null)
          : query.where('cursor', '=', step.previous);
      const result = await query.executeTakeFirst();
      return Number(result.numUpdatedRows) === 1;
    },

    async insertExclusions(
      broadcastId: string,
      rows: readonly ExclusionRecord[],
      transaction: Transaction,
    ): Promise<void> {
      if (rows.length === 0) return;
      await transaction.db
        .insertInto('broadcast_exclusions')
        .values(
          rows.map((row) => ({
            broadcast_id: broadcastId,
            contact_id: row.contactId,
            email: row.email,
            reason: row.reason,
            created_at: row.createdAt,
          })),
        )
        .onConflict((conflict) => conflict.columns(['broadcast_id', 'contact_id']).doNothing())
        .execute();
    },

    /** The contacts a broadcast excluded, by contact id, after `after` (keyset), at most `limit`. */
    async exclusions(broadcastId: string, after: string | undefined, limit: number) {
      let query = db
        .selectFrom('broadcast_exclusions')
        .selectAll()
        .where('broadcast_id', '=', broadcastId)
        .orderBy('contact_id')
        .limit(limit + 1);
      if (after !== undefined) query = query.where('contact_id', '>', after);
      const rows = await query.execute();
      return {
        items: rows.slice(0, limit).map((row): ExclusionRecord => ({
          contactId: row.contact_id,
          email: row.email,
          reason: row.reason,
          createdAt: row.created_at,
        })),
        hasMore: rows.length > limit,
      };
    },

    /** How the copies fared: a count per recipient status, and of those opened, clicked and unsubscribed. */
    async counts(broadcastId: string) {
      const statuses = await copies(broadcastId)
        .select((eb) => ['email_recipients.status', eb.fn.countAll<number | string>().as('count')])
        .groupBy('email_recipients.status')
        .execute();
      const engaged = await copies(broadcastId)
        .select((eb) => [
          eb.fn
            .sum<number | string | null>(
              sql`CASE WHEN recipient_engagement.human_open_count > 0 THEN 1 ELSE 0 END`,
            )
            .as('opened'),
          eb.fn
            .sum<number | string | null>(
              sql`CASE WHEN recipient_engagement.human_click_count > 0 THEN 1 ELSE 0 END`,
            )
            .as('clicked'),
          eb.fn
            .sum<number | string | null>(
              sql`CASE WHEN recipient_engagement.unsubscribed_at IS NOT NULL THEN 1 ELSE 0 END`,
            )
            .as('unsubscribed'),
        ])
        .executeTakeFirst();
      return {
        byStatus: new Map(statuses.map((row) => [row.status as string, Number(row.count)])),
        opened: Number(engaged?.opened ?? 0),
        clicked: Number(engaged?.clicked ?? 0),
        unsubscribed: Number(engaged?.unsubscribed ?? 0),
      };
    },

    /** The recipients of a broadcast's copies, newest first, that `filter` says something happened to. */
    async recipients(
      broadcastId: string,
      filter: RecipientFilter | undefined,
      email: string | undefined,
      page: PageRequest,
    ): Promise<Page<BroadcastRecipientRow>> {
      const result = await pageByIdDesc(page, (cursor, order, limit) => {
        let query = copies(broadcastId).select([
          'emails.id as email_id',
          'emails.contact_id',
          'email_recipients.address',
          'email_recipients.status',
          'recipient_engagement.human_open_count',
          'recipient_engagement.human_click_count',
          'recipient_engagement.unsubscribed_at',
        ]);
        if (filter === 'opened') query = query.where('recipient_engagement.human_open_count', '>', 0);
        else if (filter === 'clicked') query = query.where('recipient_engagement.human_click_count', '>', 0);
        else if (filter === 'unsubscribed') {
          query = query.where('recipient_engagement.unsubscribed_at', 'is not', null);
        } else if (filter === 'sent') {
          query = query.where('email_recipients.status', 'in', [
            'sent',
            'delivered',
            'bounced',
            'complained',
          ]);
        } else if (filter === 'delivered') {
          query = query.where('email_recipients.status', 'in', ['delivered', 'complained']);
        } else if (filter === 'queued') {
          query = query.where('email_recipients.status', 'in', ['queued', 'delayed']);
        } else if (filter !== undefined) query = query.where('email_recipients.status', '=', filter);
        if (email !== undefined) query = query.where('email_recipients.address', '=', email.toLowerCase());
        if (cursor) query = query.where('emails.id', cursor.op, cursor.id);
        return query.orderBy('emails.id', order).limit(limit).execute();
      });
      return {
        items: result.items.map((row) => ({
          emailId: row.email_id,
          contactId: row.contact_id,
          address: row.address,
          status: row.status,
          openCount: Number(row.human_open_count ?? 0),
          clickCount: Number(row.human_click_count ?? 0),
          unsubscribedAt: row.unsubscribed_at ?? null,
        })),
        hasMore: result.hasMore,
      };
    },

    /** A broadcast's clicked links: clicks and unique clicks (recipients) per URL, from the click events. */
    async clickedLinks(broadcastId: string, urlOf: (data: string) => string | undefined) {
      const rows = await db
        .selectFrom('events')
        .select(['events.email_id', 'events.data'])
        .where('events.type', '=', 'email.clicked')
        .where('events.email_id', 'in', (eb) =>
          eb.selectFrom('emails').select('emails.id').where('emails.broadcast_id', '=', broadcastId),
        )
        .execute();
      const links = new Map<string, { clicks: number; recipients: Set<string> }>();
      for (const row of rows) {
        const url = urlOf(row.data);
        if (url === undefined) continue;
        const link = links.get(url) ?? { clicks: 0, recipients: new Set<string>() };
        link.clicks += 1;
        link.recipients.add(row.email_id ?? '');
        links.set(url, link);
      }
      return [...links]
        .map(([url, link]) => ({ url, clicks: link.clicks, uniqueClicks: link.recipients.size }))
        .sort((a, b) => b.clicks - a.clicks || a.url.localeCompare(b.url));
    },
  };
}

export type BroadcastRepo = ReturnType<typeof createBroadcastRepo>;
