import { type Kysely, sql } from 'kysely';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import type { Database, ReceivedStatus, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { instantOf } from '../../lib/clock.ts';
import { idAt } from '../../lib/ids.ts';

// The received_emails table, written only here: one row per accepted recipient of a received message, with
// what was read out of it. The message's bytes stay in inbound_raw (inbound.repo.ts), once per message.

export interface ReceivedEmailRecord {
  id: string;
  projectId: string;
  inboundId: string;
  routeId: string | null;
  recipient: string;
  mailboxHash: string | null;
  receivedAt: string;
  mailFrom: string;
  fromAddress: string | null;
  subject: string | null;
  messageId: string | null;
  inReplyToEmailId: string | null;
  inReplyToRecipient: string | null;
  status: ReceivedStatus;
  size: number;
  attachmentCount: number;
  /** The parsed message (received-reader.ts's ParsedReceived), or why it could not be read. */
  content: unknown;
  authentication: unknown;
  spam: unknown;
  createdAt: string;
}

/** The filters of the list: one route, one recipient address, a time window. */
export interface ReceivedFilter {
  routeId?: string | undefined;
  recipient?: string | undefined;
  since?: string | undefined;
  until?: string | undefined;
}

const SUMMARY_COLUMNS = [
  'id',
  'project_id',
  'inbound_id',
  'route_id',
  'recipient',
  'mailbox_hash',
  'received_at',
  'mail_from',
  'from_address',
  'subject',
  'message_id',
  'in_reply_to_email_id',
  'in_reply_to_recipient',
  'status',
  'size',
  'attachment_count',
  'authentication',
  'spam',
  'created_at',
] as const;

type SummaryRow = Pick<Row<'received_emails'>, (typeof SUMMARY_COLUMNS)[number]> & { content?: string };

const parsed = (text: string | null): unknown => (text === null ? null : JSON.parse(text));

const toRecord = (row: SummaryRow): ReceivedEmailRecord => ({
  id: row.id,
  projectId: row.project_id,
  inboundId: row.inbound_id,
  routeId: row.route_id,
  recipient: row.recipient,
  mailboxHash: row.mailbox_hash,
  receivedAt: row.received_at,
  mailFrom: row.mail_from,
  fromAddress: row.from_address,
  subject: row.subject,
  messageId: row.message_id,
  inReplyToEmailId: row.in_reply_to_email_id,
  inReplyToRecipient: row.in_reply_to_recipient,
  status: row.status,
  size: Number(row.size),
  attachmentCount: Number(row.attachment_count),
  content: row.content === undefined ? undefined : parsed(row.content),
  authentication: parsed(row.authentication),
  spam: parsed(row.spam),
  createdAt: row.created_at,
});

export function createReceivedRepo(db: Kysely<Database>) {
  return {
    /**
     * Stores a message's received emails in `transaction` (with the message's verdict). A row already there
     * (the same message and recipient: a second read after a crash) is left as it is; the ids of the rows
     * written are answered.
     */
    async insert(records: readonly ReceivedEmailRecord[], transaction: Transaction): Promise<Set<string>> {
      if (records.length === 0) return new Set();
      const rows = await transaction.db
        .insertInto('received_emails')
        .values(
          records.map((record) => ({
            id: record.id,
            project_id: record.projectId,
            inbound_id: record.inboundId,
            route_id: record.routeId,
            recipient: record.recipient,
            mailbox_hash: record.mailboxHash,
            received_at: record.receivedAt,
            mail_from: record.mailFrom,
            from_address: record.fromAddress,
            subject: record.subject,
            message_id: record.messageId,
            in_reply_to_email_id: record.inReplyToEmailId,
            in_reply_to_recipient: record.inReplyToRecipient,
            status: record.status,
            size: record.size,
            attachment_count: record.attachmentCount,
            content: JSON.stringify(record.content),
            authentication: record.authentication === null ? null : JSON.stringify(record.authentication),
            spam: record.spam === null ? null : JSON.stringify(record.spam),
            created_at: record.createdAt,
          })),
        )
        .onConflict((conflict) => conflict.columns(['inbound_id', 'recipient']).doNothing())
        .returning('id')
        .execute();
      return new Set(rows.map((row) => row.id));
    },

    /** `content`: with each one's parsed content (Resend's list shows addresses and attachments). */
    async list(
      projectId: string,
      page: PageRequest,
      filter: ReceivedFilter,
      { content = false }: { content?: boolean } = {},
    ): Promise<Page<ReceivedEmailRecord>> {
      let query = db
        .selectFrom('received_emails')
        .select([...SUMMARY_COLUMNS, ...(content ? (['content'] as const) : [])])
        .where('project_id', '=', projectId);
      if (filter.routeId !== undefined) query = query.where('route_id', '=', filter.routeId);
      if (filter.recipient !== undefined) query = query.where('recipient', '=', filter.recipient);
      // Ids are time-ordered: a time window is an id range, on the (project_id, id) index.
      if (filter.since !== undefined) query = query.where('id', '>=', idAt('rcv', instantOf(filter.since)));
      if (filter.until !== undefined) query = query.where('id', '<', idAt('rcv', instantOf(filter.until)));
      return mapPage(await pageOfQuery(query, page), toRecord);
    },

    /** One received email, with its parsed content. */
    async find(projectId: string, id: string): Promise<ReceivedEmailRecord | undefined> {
      const row = await db
        .selectFrom('received_emails')
        .select([...SUMMARY_COLUMNS, 'content'])
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row ? toRecord(row) : undefined;
    },

    /** For the operator (`postwire inbound received`): the latest, of every project. */
    async latest(limit: number): Promise<ReceivedEmailRecord[]> {
      const rows = await db
        .selectFrom('received_emails')
        .select([...SUMMARY_COLUMNS])
        .orderBy('id', 'desc')
        .limit(limit)
        .execute();
      return rows.map(toRecord);
    },

    /** Retention: received emails from before `cutoff` (their message and bytes go with inbound.repo's). */
    pruneTargets: (cutoff: Date): PruneTarget[] => [
      pruneTarget(db, 'received_emails', 'id', sql<boolean>`id < ${idAt('rcv', cutoff)}`),
    ],
  };
}

export type ReceivedRepo = ReturnType<typeof createReceivedRepo>;
