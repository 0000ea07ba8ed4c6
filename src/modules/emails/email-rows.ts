import { bufferOver, type ByteChunks } from '../../lib/byte-chunks.ts';
import { createMessagePieces, type MessagePieces } from '../../db/message-pieces.ts';
import type { Kysely } from 'kysely';
import type { Database, EmailSource, EmailStatus, Row } from '../../db/schema.ts';
import type { TrackingSettings } from './tracking.ts';

// An email's rows as both its repositories read and write them: emails.repo.ts (the emails table, and what
// is accepted) and recipients.repo.ts (the recipient rows, which load their emails to send them). Here, so
// that neither repository imports the other's code for them.

export interface NewRecipient {
  id: string;
  position: number;
  type: 'to' | 'cc' | 'bcc';
  address: string;
  host: string;
  /** On the project's suppression list: stored `suppressed`, never queued, not counted against the limit. */
  suppressed?: boolean;
}

export const queued = (recipients: readonly NewRecipient[]) =>
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
  /** The HTTP API, or SMTP submission. */
  source: EmailSource;
  /** The username an SMTP client gave in AUTH; null for API sends. */
  smtpUsername: string | null;
  /** A broadcast's copy: its broadcast (`bc_…`) and contact (`con_…`); null for any other email. */
  broadcastId?: string | null | undefined;
  contactId?: string | null | undefined;
}

/** A file sent with an email; `content` is loaded only where the message is built. */
export interface EmailAttachment {
  filename: string;
  contentType: string | null;
  /** Set for an inline attachment, referred to as `cid:<contentId>` in the html. */
  contentId: string | null;
  size: number;
  /** In the chunks it is kept in (joined only where the message is built: lib/byte-chunks.ts). */
  content?: ByteChunks;
}

/** A file of a send being stored: a large one's pieces are written before the email (`piecesKey`). */
export interface NewAttachment extends EmailAttachment {
  content: ByteChunks;
  /** A large file's pieces (db/message-pieces.ts), written before the email is stored. */
  piecesKey?: string | undefined;
}

/** An email ready to store: addresses validated, the template rendered. */
export interface NewEmail extends EmailContent {
  attachments: NewAttachment[];
  /** How it is authenticated (decided by the sending-domain rules when accepted); null when not decided. */
  dkimDomain?: string | null;
  returnPathDomain?: string | null;
  /** Null, or a time in the future: the recipients wait until then. */
  scheduledAt: string | null;
  createdAt: string;
  recipients: NewRecipient[];
  /** Opens, clicks, unsubscribe: stored by the engagement module in the same transaction. */
  tracking?: TrackingSettings | undefined;
  /** SMTP submission: the message as it is sent (Bcc and X-Postwire-* removed, Message-ID and Date added). */
  submitted?: ByteChunks | undefined;
  /** A large submitted message's pieces (db/message-pieces.ts), written before the email is stored. */
  submittedPiecesKey?: string | undefined;
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
  /** SMTP submission: the message to send as it is (loaded only where the message is built). */
  submitted?: ByteChunks | undefined;
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
  source: row.source,
  smtpUsername: row.smtp_username,
  broadcastId: row.broadcast_id ?? null,
  contactId: row.contact_id ?? null,
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
export const INSERT_CHUNK = 500;

/**
 * The attachments of these emails, in order, with their content or (for the API) without: read where a
 * message is built or shown, never with every email. `position`: only the one there.
 */
export async function attachmentsOf(
  db: Kysely<Database>,
  emailIds: readonly string[],
  options: { content: boolean; position?: number },
): Promise<Map<string, EmailAttachment[]>> {
  const found = new Map<string, EmailAttachment[]>();
  if (emailIds.length === 0) return found;
  const rows = await db
    .selectFrom('email_attachments')
    .select(['email_id', 'filename', 'content_type', 'content_id', 'size'])
    .$if(options.content, (query) => query.select(['content', 'pieces_key']))
    .where('email_id', 'in', [...emailIds])
    .$if(options.position !== undefined, (query) => query.where('position', '=', options.position!))
    .orderBy('email_id')
    .orderBy('position')
    .execute();
  const pieces = createMessagePieces(db);
  for (const row of rows) {
    const list = found.get(row.email_id) ?? [];
    list.push({
      filename: row.filename,
      contentType: row.content_type,
      contentId: row.content_id,
      size: Number(row.size),
      ...(row.content !== undefined ? { content: await contentOf(row.content, row.pieces_key, pieces) } : {}),
    });
    found.set(row.email_id, list);
  }
  return found;
}

/** A file's bytes: in its pieces when it has some, else in its row (a view of the driver's bytes). */
async function contentOf(
  content: Uint8Array,
  piecesKey: string | null | undefined,
  pieces: MessagePieces,
): Promise<ByteChunks> {
  if (piecesKey) return pieces.read(piecesKey);
  return [bufferOver(content)];
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
  'source',
  'smtp_username',
  'broadcast_id',
  'contact_id',
] as const;

/** An email as the sending worker needs it: with its attachments, and whether it asked for tracking. */
export type LoadedEmail = EmailRecord & { tracked: boolean };

/** Whether an email (the `emails` row in the query) has attachments, and whether it asked for tracking. */
const EMAIL_FLAGS = `EXISTS (SELECT 1 FROM email_attachments WHERE email_attachments.email_id = emails.id) AS has_attachments,
  EXISTS (SELECT 1 FROM email_tracking WHERE email_tracking.email_id = emails.id) AS tracked`;

/**
 * An email's row with its flags, named (not `emails.*`: the sending queue's claim on PostgreSQL returns them,
 * and it is a prepared statement, whose result columns must not change under a migration).
 */
export const LOADED_EMAIL_COLUMNS = `${EMAIL_COLUMNS.map((column) => `emails.${column}`).join(', ')}, ${EMAIL_FLAGS}`;

export type LoadedEmailRow = Row<'emails'> & { has_attachments: unknown; tracked: unknown };

/**
 * Emails' rows (LOADED_EMAIL_COLUMNS) made into loaded emails: the attachments read only for emails that have
 * some, and the submitted message only for SMTP submissions.
 */
export async function loadedEmails(
  db: Kysely<Database>,
  rows: readonly LoadedEmailRow[],
): Promise<Map<string, LoadedEmail>> {
  const withFiles = [...new Set(rows.filter((row) => Boolean(row.has_attachments)).map((row) => row.id))];
  const attachments = await attachmentsOf(db, withFiles, { content: true });
  const submittedIds = [...new Set(rows.filter((row) => row.source === 'smtp').map((row) => row.id))];
  const submitted = new Map<string, ByteChunks>();
  if (submittedIds.length > 0) {
    const pieces = createMessagePieces(db);
    const found = await db
      .selectFrom('email_submissions')
      .select(['email_id', 'raw', 'pieces_key'])
      .where('email_id', 'in', submittedIds)
      .execute();
    for (const row of found) {
      submitted.set(
        row.email_id,
        row.pieces_key === null ? [Buffer.from(row.raw)] : await pieces.read(row.pieces_key),
      );
    }
  }
  return new Map(
    rows.map((row) => [
      row.id,
      {
        ...toEmailRecord(row),
        attachments: attachments.get(row.id) ?? [],
        tracked: Boolean(row.tracked),
        submitted: submitted.get(row.id),
      },
    ]),
  );
}

/** An email's row as the INSERT writes it, by column. */
export function emailRow(email: NewEmail): Record<(typeof EMAIL_COLUMNS)[number], unknown> {
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
    source: email.source,
    smtp_username: email.smtpUsername,
    broadcast_id: email.broadcastId ?? null,
    contact_id: email.contactId ?? null,
  };
}
