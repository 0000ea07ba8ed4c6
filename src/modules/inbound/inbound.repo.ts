import { type Kysely, sql } from 'kysely';
import { idAt } from '../../lib/ids.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import { createMessagePieces } from '../../db/message-pieces.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import type { Engine } from '../../db/connection.ts';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, InboundKind, InboundStatus, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';

// The inbound_messages table: what the listener received (stored before its 250), and the API's and the
// operator's reads of it; and inbound_raw, each message's bytes. The queue the inbound worker reads it from
// (claims, leases, verdicts) is its adapter's, inbound.queue.ts.
//
// The bytes live apart from the queue row: the queue's claims, postponements and verdicts update that row,
// and with the bytes in it SQLite rewrote megabytes at each (a 10 MB message: ~100 ms on the process's one
// connection, the API waiting). They are written once, with the row, and read only for the read itself.

/** A recipient an inbound route took at RCPT, as the listener decided it. */
export interface RoutedRecipient {
  /** The envelope recipient, lowercased. */
  address: string;
  projectId: string;
  routeId: string;
  action: 'webhook' | 'store';
  mailboxHash: string | null;
  /** The route refuses a message spamd scores at or above this. */
  spamRejectScore: number | null;
}

/** SpamAssassin's verdict on a message (spamd). */
export interface SpamVerdict {
  score: number;
  threshold: number;
  flagged: boolean;
}

export interface NewInboundMessage {
  receivedAt: string;
  mailFrom: string;
  rcptTo: string[];
  remoteAddress: string | null;
  /** The name given in HELO/EHLO. */
  helo?: string | null;
  /** The routed recipients; none for a report. */
  routing?: RoutedRecipient[] | null;
  spam?: SpamVerdict | null;
  /** The message's bytes, or the chunks they arrived in (lib/byte-chunks.ts). */
  raw: Buffer | ByteChunks;
}

/** A stored message as the API and the operator's listing show it (without its bytes). */
export interface InboundRecord {
  id: string;
  receivedAt: string;
  mailFrom: string;
  rcptTo: string[];
  remoteAddress: string | null;
  size: number;
  status: InboundStatus;
  kind: InboundKind | null;
  detail: string | null;
  subject: string | null;
  projectId: string | null;
  emailId: string | null;
  recipient: string | null;
  processedAt: string | null;
}

/** A message leased to a worker (inbound.queue.ts; its bytes are read apart: `raw`). */
export interface ClaimedInbound {
  id: string;
  receivedAt: string;
  mailFrom: string;
  rcptTo: string[];
  remoteAddress: string | null;
  helo: string | null;
  /** Its routed recipients, as the listener decided them at RCPT (empty: a report). */
  routing: RoutedRecipient[];
  spam: SpamVerdict | null;
  size: number;
  /** Claims so far, this one included. */
  attempts: number;
}

const SUMMARY_COLUMNS = [
  'id',
  'received_at',
  'mail_from',
  'rcpt_to',
  'remote_address',
  'size',
  'status',
  'kind',
  'detail',
  'subject',
  'project_id',
  'email_id',
  'recipient',
  'processed_at',
] as const;

type SummaryRow = Pick<Row<'inbound_messages'>, (typeof SUMMARY_COLUMNS)[number]>;

const toRecord = (row: SummaryRow): InboundRecord => ({
  id: row.id,
  receivedAt: row.received_at,
  mailFrom: row.mail_from,
  rcptTo: JSON.parse(row.rcpt_to) as string[],
  remoteAddress: row.remote_address,
  size: Number(row.size),
  status: row.status,
  kind: row.kind,
  detail: row.detail,
  subject: row.subject,
  projectId: row.project_id,
  emailId: row.email_id,
  recipient: row.recipient,
  processedAt: row.processed_at,
});

/** `_engine`: this repository's statements are the same on both (the queue's differ: inbound.queue.ts). */
export function createInboundRepo(db: Kysely<Database>, _engine?: Engine) {
  const pieces = createMessagePieces(db);

  return {
    /**
     * Retention: received messages from before `cutoff` that have been read, their bytes first (the large
     * part, counted apart by `postwire prune --dry-run`; the foreign key's cascade would take them anyway).
     */
    pruneTargets: (cutoff: Date): PruneTarget[] => {
      const before = idAt('inb', cutoff);
      return [
        pruneTarget(
          db,
          'inbound_raw',
          'id',
          sql<boolean>`id < ${before} AND id IN (SELECT id FROM inbound_messages
            WHERE id < ${before} AND status <> 'pending')`,
        ),
        // A large message's pieces (`inbound:<id>`) go with it, once it has been read.
        pieces.pruneTarget(
          'inbound',
          before,
          sql<boolean>`substr(owner, 9) IN (SELECT id FROM inbound_messages
            WHERE id < ${before} AND status <> 'pending')`,
        ),
        pruneTarget(db, 'inbound_messages', 'id', sql<boolean>`id < ${before} AND status <> 'pending'`),
      ];
    },

    /**
     * A large message's bytes, as pieces named `inbound:<id>`, before the transaction that stores its row
     * (db/message-pieces.ts says why); the key its row names.
     */
    async writePieces(id: string, raw: ByteChunks): Promise<string> {
      const piecesKey = `inbound:${id}`;
      await pieces.write(piecesKey, raw);
      return piecesKey;
    },

    /** The pieces of a message whose row was not stored after all. */
    removePieces: (piecesKey: string): Promise<void> => pieces.remove(piecesKey),

    /** A received message's row, pending, and (when it is small, `piecesKey` null) its bytes, in `transaction`. */
    async insert(
      id: string,
      {
        message,
        raw,
        size,
        piecesKey,
      }: { message: NewInboundMessage; raw: ByteChunks; size: number; piecesKey: string | null },
      transaction: Transaction,
    ): Promise<void> {
      const trx = transaction.db;
      await trx
        .insertInto('inbound_messages')
        .values({
          id,
          received_at: message.receivedAt,
          mail_from: message.mailFrom,
          rcpt_to: JSON.stringify(message.rcptTo),
          remote_address: message.remoteAddress,
          size,
          status: 'pending',
          kind: null,
          detail: null,
          subject: null,
          project_id: null,
          email_id: null,
          recipient: null,
          locked_until: null,
          locked_by: null,
          processed_at: null,
          helo: message.helo ?? null,
          routing: message.routing ? JSON.stringify(message.routing) : null,
          spam: message.spam ? JSON.stringify(message.spam) : null,
        })
        .execute();
      await trx
        .insertInto('inbound_raw')
        .values({
          id,
          raw: piecesKey ? new Uint8Array(0) : Buffer.concat(raw),
          pieces_key: piecesKey,
        })
        .execute();
    },

    /**
     * A message's bytes as received, or undefined if they are gone (retention, or the project's deletion), in
     * chunks (a large one's pieces). The worker reads them per job, outside any transaction, once it holds the
     * lease: claims never carry them.
     */
    async raw(id: string): Promise<ByteChunks | undefined> {
      const row = await db
        .selectFrom('inbound_raw')
        .select(['raw', 'pieces_key'])
        .where('id', '=', id)
        .executeTakeFirst();
      if (!row) return undefined;
      if (row.pieces_key !== null) return pieces.read(row.pieces_key);
      // A view of the driver's bytes, not a copy.
      return [
        Buffer.isBuffer(row.raw)
          ? row.raw
          : Buffer.from(row.raw.buffer, row.raw.byteOffset, row.raw.byteLength),
      ];
    },

    /** The messages matched to a project's email, newest first. */
    async listForProject(projectId: string, page: PageRequest): Promise<Page<InboundRecord>> {
      const query = db
        .selectFrom('inbound_messages')
        .select([...SUMMARY_COLUMNS])
        .where('project_id', '=', projectId);
      return mapPage(await pageOfQuery(query, page), toRecord);
    },

    async findForProject(projectId: string, id: string): Promise<InboundRecord | undefined> {
      const row = await db
        .selectFrom('inbound_messages')
        .select([...SUMMARY_COLUMNS])
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row ? toRecord(row) : undefined;
    },

    /**
     * For the operator: reports that belong to no project (unmatched, unreadable), or all messages, newest
     * first. Received mail is listed as such (`postwire inbound received`).
     */
    async listForOperator(options: { all: boolean; limit: number }): Promise<InboundRecord[]> {
      const rows = await db
        .selectFrom('inbound_messages')
        .select([...SUMMARY_COLUMNS])
        .$if(!options.all, (query) =>
          query
            .where('project_id', 'is', null)
            .where((eb) => eb.or([eb('kind', 'is', null), eb('kind', '<>', 'received')])),
        )
        .orderBy('id', 'desc')
        .limit(options.limit)
        .execute();
      return rows.map(toRecord);
    },
  };
}

export type InboundRepo = ReturnType<typeof createInboundRepo>;
