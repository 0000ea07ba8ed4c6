import { CompiledQuery, type Kysely, sql } from 'kysely';
import { idAt } from '../../lib/ids.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import type { EmailListFilters } from './emails.schemas.ts';
import type { Engine } from '../../db/connection.ts';
import { type Page, type PageRequest, pageByIdDesc } from '../../db/pagination.ts';
import type { Database, EmailStatus, Row } from '../../db/schema.ts';
import { createQuotaCounter, nextPositionText, type QuotaCount } from './fair-queue.repo.ts';
import { inChunks, inColumnOrder, placeholders, textsByShape } from '../../db/sql-text.ts';
import { notifyStatement, QUEUE_CHANNELS } from '../../queue/notifier.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { TrackingSettings } from './tracking.ts';

export interface NewRecipient {
  id: string;
  position: number;
  type: 'to' | 'cc' | 'bcc';
  address: string;
  host: string;
  /** On the project's suppression list: stored `suppressed`, never queued, not counted against the limit. */
  suppressed?: boolean;
}

const queued = (recipients: readonly NewRecipient[]) =>
  recipients.filter((recipient) => !recipient.suppressed);

/** What an email says, as stored and as read back. */
interface EmailContent {
  id: string;
  projectId: string;
  from: string;
  to: string[];
  cc: string[];
  bcc: string[];
  replyTo: string[];
  subject: string;
  html: string | null;
  text: string | null;
  headers: Record<string, string>;
  tags: Record<string, string>;
  templateId: string | null;
  templateVersion: number | null;
  messageId: string;
}

/** A file sent with an email; `content` is loaded only where the message is built. */
export interface EmailAttachment {
  filename: string;
  contentType: string | null;
  /** Set for an inline attachment, referred to as `cid:<contentId>` in the html. */
  contentId: string | null;
  size: number;
  content?: Buffer;
}

/** An email ready to store: addresses validated, the template rendered. */
export interface NewEmail extends EmailContent {
  attachments: Array<EmailAttachment & { content: Buffer }>;
  /** How it is authenticated (decided by the sending-domain rules when accepted); null when not decided. */
  dkimDomain?: string | null;
  returnPathDomain?: string | null;
  /** Null, or a time in the future: the recipients wait until then. */
  scheduledAt: string | null;
  createdAt: string;
  recipients: NewRecipient[];
  /** Opens, clicks, unsubscribe: stored by the engagement module in the same transaction. */
  tracking?: TrackingSettings | undefined;
}

export interface EmailRecord extends EmailContent {
  /** Empty unless loaded (`attachmentsOf`): with their content for sending, without for the API. */
  attachments: EmailAttachment[];
  /** The DKIM `d=` it is signed with, and its envelope sender's domain, as decided when it was accepted. */
  dkimDomain: string | null;
  returnPathDomain: string | null;
  status: EmailStatus;
  recipientCount: number;
  scheduledAt: string | null;
  createdAt: string;
  updatedAt: string;
}

export type RecipientRow = Row<'email_recipients'>;

/** Thrown inside the accept transaction (so nothing is stored) when the daily limit would be passed. */
export class DailyLimitReached extends Error {
  readonly usedBefore: number;
  constructor(usedBefore: number) {
    super('daily send limit reached');
    this.usedBefore = usedBefore;
  }
}

export const toEmailRecord = (row: Row<'emails'>): EmailRecord => ({
  id: row.id,
  projectId: row.project_id,
  from: row.from_address,
  to: JSON.parse(row.to_addresses) as string[],
  cc: JSON.parse(row.cc_addresses) as string[],
  bcc: JSON.parse(row.bcc_addresses) as string[],
  replyTo: JSON.parse(row.reply_to) as string[],
  subject: row.subject,
  html: row.html,
  text: row.text,
  headers: JSON.parse(row.headers) as Record<string, string>,
  tags: JSON.parse(row.tags) as Record<string, string>,
  templateId: row.template_id,
  templateVersion: row.template_version === null ? null : Number(row.template_version),
  messageId: row.message_id,
  attachments: [],
  dkimDomain: row.dkim_domain,
  returnPathDomain: row.return_path_domain,
  status: row.status,
  recipientCount: Number(row.recipient_count),
  scheduledAt: row.scheduled_at,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

// Bounded so one INSERT stays far below the bind-parameter limits (PostgreSQL 65 535, SQLite 32 766).
const INSERT_CHUNK = 500;

/**
 * The attachments of these emails, in order, with their content or (for the API) without: read where a
 * message is built or shown, never with every email.
 */
export async function attachmentsOf(
  db: Kysely<Database>,
  emailIds: readonly string[],
  options: { content: boolean },
): Promise<Map<string, EmailAttachment[]>> {
  const found = new Map<string, EmailAttachment[]>();
  if (emailIds.length === 0) return found;
  const rows = await db
    .selectFrom('email_attachments')
    .select(['email_id', 'filename', 'content_type', 'content_id', 'size'])
    .$if(options.content, (query) => query.select('content'))
    .where('email_id', 'in', [...emailIds])
    .orderBy('email_id')
    .orderBy('position')
    .execute();
  for (const row of rows) {
    const list = found.get(row.email_id) ?? [];
    list.push({
      filename: row.filename,
      contentType: row.content_type,
      contentId: row.content_id,
      size: Number(row.size),
      ...('content' in row ? { content: Buffer.from(row.content as Uint8Array) } : {}),
    });
    found.set(row.email_id, list);
  }
  return found;
}

/** The emails table's columns, in its INSERT's order; the sending claim reads them all by name. */
export const EMAIL_COLUMNS = [
  'id',
  'project_id',
  'from_address',
  'to_addresses',
  'cc_addresses',
  'bcc_addresses',
  'reply_to',
  'subject',
  'html',
  'text',
  'headers',
  'tags',
  'template_id',
  'template_version',
  'message_id',
  'dkim_domain',
  'return_path_domain',
  'status',
  'recipient_count',
  'scheduled_at',
  'created_at',
  'updated_at',
] as const;

// A recipient row's columns, in its INSERT's order (ready_seq an expression for a due row, see
// nextPositionText).
const RECIPIENT_COLUMNS = [
  'id',
  'email_id',
  'project_id',
  'position',
  'type',
  'address',
  'host',
  'created_at',
  'updated_at',
  'status',
  'ready_seq',
  'wait_until',
  'next_attempt_at',
  'completed_at',
] as const;

/** An email's row as the INSERT writes it, by column. */
function emailRow(email: NewEmail): Record<(typeof EMAIL_COLUMNS)[number], unknown> {
  return {
    id: email.id,
    project_id: email.projectId,
    from_address: email.from,
    to_addresses: JSON.stringify(email.to),
    cc_addresses: JSON.stringify(email.cc),
    bcc_addresses: JSON.stringify(email.bcc),
    reply_to: JSON.stringify(email.replyTo),
    subject: email.subject,
    html: email.html,
    text: email.text,
    headers: JSON.stringify(email.headers),
    tags: JSON.stringify(email.tags),
    template_id: email.templateId,
    template_version: email.templateVersion,
    message_id: email.messageId,
    dkim_domain: email.dkimDomain ?? null,
    return_path_domain: email.returnPathDomain ?? null,
    status:
      queued(email.recipients).length === 0
        ? 'suppressed'
        : email.scheduledAt === null
          ? 'queued'
          : 'scheduled',
    recipient_count: email.recipients.length,
    scheduled_at: email.scheduledAt,
    created_at: email.createdAt,
    updated_at: email.createdAt,
  };
}

/**
 * A due row's place in the queue, read in the INSERT itself (nextPositionText): its project, and its place
 * among that project's due rows in the statement, from 1.
 */
interface QueuePosition {
  projectId: string;
  place: number;
}

/**
 * A recipient's row as the INSERT writes it, by column: suppressed (never queued), waiting for its scheduled
 * time, or due at `position` (its ready_seq, then an expression of the position's two parameters).
 */
function recipientRow(
  email: NewEmail,
  recipient: NewRecipient,
  position: QueuePosition | null,
): Record<(typeof RECIPIENT_COLUMNS)[number], unknown> {
  const waiting = !recipient.suppressed && email.scheduledAt !== null;
  return {
    id: recipient.id,
    email_id: email.id,
    project_id: email.projectId,
    position: recipient.position,
    type: recipient.type,
    address: recipient.address,
    host: recipient.host,
    created_at: email.createdAt,
    updated_at: email.createdAt,
    status: recipient.suppressed ? 'suppressed' : 'queued',
    ready_seq: position,
    wait_until: waiting ? email.scheduledAt : null,
    next_attempt_at: recipient.suppressed ? null : (email.scheduledAt ?? email.createdAt),
    completed_at: recipient.suppressed ? email.createdAt : null,
  };
}

export function createEmailRepo(db: Kysely<Database>, engine: Engine) {
  // The accepting INSERTs, written as SQL text once per number of rows (and, for recipients, which rows are
  // due `q`, waiting `w` or suppressed `s`): built with the query builder they cost more CPU than running.
  const emailsInsert = textsByShape((rows) => {
    const slot = placeholders(engine);
    const row = () => `(${EMAIL_COLUMNS.map(slot).join(', ')})`;
    return `INSERT INTO emails (${EMAIL_COLUMNS.join(', ')}) VALUES ${Array.from({ length: Number(rows) }, row).join(', ')}`;
  });
  const recipientsInsert = textsByShape((shape) => {
    const slot = placeholders(engine);
    const rows = [...shape].map((kind) => {
      const values = RECIPIENT_COLUMNS.map((column) =>
        column === 'ready_seq' && kind === 'q' ? nextPositionText(engine, slot) : slot(),
      );
      return `(${values.join(', ')})`;
    });
    return `INSERT INTO email_recipients (${RECIPIENT_COLUMNS.join(', ')}) VALUES ${rows.join(', ')}`;
  });
  const countAgainstQuota = createQuotaCounter(engine);
  let wakePending = false;
  /**
   * Wakes sending workers in other processes (PostgreSQL NOTIFY), after the commit and at most once per few
   * milliseconds: a NOTIFY inside the accepting transaction takes a database-wide lock at commit, which made
   * concurrent sends wait for each other. Workers poll anyway, so a lost wake-up only delays a send (≤ 1 s).
   */
  function wakeOtherProcesses(): void {
    if (engine !== 'postgres' || wakePending) return;
    wakePending = true;
    setTimeout(() => {
      wakePending = false;
      notifyStatement(QUEUE_CHANNELS.sending)
        .execute(db)
        .catch(() => undefined);
    }, 5).unref();
  }

  return {
    /**
     * Retention: the stored MIME of emails accepted before `cutoff`, and their attachments once every
     * recipient is done (the email itself and its recipients stay).
     */
    pruneTargets(cutoff: Date): PruneTarget[] {
      const before = idAt('msg', cutoff);
      return [
        pruneTarget(db, 'email_raw', 'email_id', sql<boolean>`email_id < ${before}`),
        pruneTarget(
          db,
          'email_attachments',
          'email_id',
          sql<boolean>`email_id < ${before} AND email_id IN (SELECT id FROM emails
            WHERE id < ${before} AND status NOT IN ('queued', 'delayed', 'scheduled'))`,
        ),
      ];
    },

    /**
     * Stores emails and their recipient rows in `transaction`, counting the recipients against the daily
     * limit (0: none) and queueing the due ones fairly. Either every email is stored or none is. The emails
     * may be of many projects (sends accepted together): still one INSERT per table, and one count per project
     * and day, whose limit refuses them all (DailyLimitReached) when one project passes it.
     */
    async insert(
      transaction: Transaction,
      emails: NewEmail[],
      options: { dailyLimit: number },
    ): Promise<void> {
      if (emails.length === 0) return;
      const counts = new Map<string, QuotaCount>();
      let due = 0;
      for (const email of emails) {
        const recipients = queued(email.recipients).length;
        if (email.scheduledAt === null) due += recipients;
        const day = email.createdAt.slice(0, 10);
        const key = `${email.projectId} ${day}`;
        const count = counts.get(key);
        if (count) count.recipients += recipients;
        else counts.set(key, { projectId: email.projectId, day, recipients });
      }

      const trx = transaction.db;
      await inChunks(emails, INSERT_CHUNK, (chunk) =>
        trx.executeQuery(
          CompiledQuery.raw(
            emailsInsert(String(chunk.length)),
            chunk.flatMap((email) => inColumnOrder(EMAIL_COLUMNS, emailRow(email))),
          ),
        ),
      );

      // One statement per file: a statement holding many large files would hold them all in memory at once.
      for (const email of emails) {
        for (const [position, attachment] of email.attachments.entries()) {
          await trx
            .insertInto('email_attachments')
            .values({
              email_id: email.id,
              position,
              project_id: email.projectId,
              filename: attachment.filename,
              content_type: attachment.contentType,
              content_id: attachment.contentId,
              size: attachment.content.length,
              content: attachment.content,
            })
            .execute();
        }
      }

      const rows = emails.flatMap((email) => email.recipients.map((recipient) => ({ email, recipient })));
      // Each statement's due rows take the queue positions after their project's last (read in the INSERT).
      await inChunks(rows, INSERT_CHUNK, (chunk) => {
        const taken = new Map<string, number>();
        let shape = '';
        const parameters: unknown[] = [];
        for (const { email, recipient } of chunk) {
          let position: QueuePosition | null = null;
          if (!recipient.suppressed && email.scheduledAt === null) {
            const place = (taken.get(email.projectId) ?? 0) + 1;
            taken.set(email.projectId, place);
            position = { projectId: email.projectId, place };
          }
          shape += position ? 'q' : 'v';
          const row = recipientRow(email, recipient, position);
          for (const column of RECIPIENT_COLUMNS) {
            if (column === 'ready_seq' && position) parameters.push(position.projectId, position.place);
            else parameters.push(row[column]);
          }
        }
        return trx.executeQuery(CompiledQuery.raw(recipientsInsert(shape), parameters));
      });
      // Last, so the count rows are locked (PostgreSQL) only for the moment before the commit.
      const limited = options.dailyLimit > 0;
      // In one order everywhere: two processes' groups lock the same count rows (PostgreSQL) in the same
      // order, never each waiting for the other's.
      const ordered = [...counts.values()].sort((a, b) =>
        a.projectId === b.projectId ? a.day.localeCompare(b.day) : a.projectId < b.projectId ? -1 : 1,
      );
      const totals = await countAgainstQuota(trx, ordered, limited);
      const over = totals.find((counted) => counted.total > options.dailyLimit);
      if (limited && over) throw new DailyLimitReached(over.total - over.recipients);
      if (due > 0) transaction.afterCommit(wakeOtherProcesses);
    },

    async find(projectId: string, id: string): Promise<EmailRecord | undefined> {
      const row = await db
        .selectFrom('emails')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && toEmailRecord(row);
    },

    /** An email's attachments without their content (for the API). */
    async attachments(emailId: string): Promise<EmailAttachment[]> {
      return (await attachmentsOf(db, [emailId], { content: false })).get(emailId) ?? [];
    },

    async list(
      projectId: string,
      page: PageRequest,
      filters: EmailListFilters = {},
    ): Promise<Page<EmailRecord>> {
      // LIKE patterns: the user's text matches as itself, wildcards included.
      const literal = (text: string) => text.toLowerCase().replace(/[\\%_]/g, (char) => `\\${char}`);
      const result = await pageByIdDesc(page, (cursor, order, limit) => {
        let query = db.selectFrom('emails').selectAll().where('project_id', '=', projectId);
        if (cursor) query = query.where('id', cursor.op, cursor.id);
        if (filters.status) query = query.where('status', '=', filters.status);
        if (filters.since) query = query.where('created_at', '>=', new Date(filters.since).toISOString());
        if (filters.until) query = query.where('created_at', '<', new Date(filters.until).toISOString());
        if (filters.tag) {
          // Tags are stored as JSON of [A-Za-z0-9_-] names and values: `"name":"value"` is exact.
          const [name, value] = filters.tag.split(':');
          query = query.where('tags', 'like', `%"${name}":"${value}"%`);
        }
        if (filters.recipient) {
          const pattern = `%${literal(filters.recipient)}%`;
          query = query.where((eb) =>
            eb.exists(
              eb
                .selectFrom('email_recipients')
                .select(sql`1`.as('one'))
                .whereRef('email_recipients.email_id', '=', 'emails.id')
                .where(sql<boolean>`lower(email_recipients.address) LIKE ${pattern} ESCAPE '\\'`),
            ),
          );
        }
        return query.orderBy('id', order).limit(limit).execute();
      });
      return { items: result.items.map(toEmailRecord), hasMore: result.hasMore };
    },

    async recipients(projectId: string, emailId: string): Promise<RecipientRow[]> {
      return db
        .selectFrom('email_recipients')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('email_id', '=', emailId)
        .orderBy('position')
        .execute();
    },

    async raw(projectId: string, emailId: string): Promise<string | undefined> {
      const row = await db
        .selectFrom('email_raw')
        .select('raw')
        .where('project_id', '=', projectId)
        .where('email_id', '=', emailId)
        .executeTakeFirst();
      return row?.raw;
    },

    /**
     * Cancels a scheduled email whose time has not come, in `transaction`: every recipient must still be
     * waiting (not yet promoted into the queue, so no worker can hold it). When that no longer holds it
     * throws CancelRefused, and the transaction's rollback undoes the recipients already cancelled.
     */
    async cancel(transaction: Transaction, projectId: string, emailId: string, now: string): Promise<void> {
      const trx = transaction.db;
      const cancelled = await trx
        .updateTable('email_recipients')
        .set({
          status: 'cancelled',
          wait_until: null,
          next_attempt_at: null,
          updated_at: now,
          completed_at: now,
        })
        .where('email_id', '=', emailId)
        .where('project_id', '=', projectId)
        .where('status', '=', 'queued')
        .where('wait_until', '>', now)
        .executeTakeFirst();
      const email = await trx
        .updateTable('emails')
        .set({ status: 'cancelled', updated_at: now })
        .where('id', '=', emailId)
        .where('project_id', '=', projectId)
        .where('status', '=', 'scheduled')
        .where('recipient_count', '=', Number(cancelled.numUpdatedRows))
        .executeTakeFirst();
      // Some recipient was already due (or the email is not scheduled): nothing may be cancelled.
      if (Number(email.numUpdatedRows) !== 1) throw new CancelRefused();
    },
  };
}

/** The email can no longer be cancelled; thrown so that the cancelling transaction rolls back. */
export class CancelRefused extends Error {}

export type EmailRepo = ReturnType<typeof createEmailRepo>;
