import type { Kysely } from 'kysely';
import { keptInPieces } from '../../db/message-pieces.ts';
import type { PageRequest } from '../../db/pagination.ts';
import type { Database } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { chunksOf, totalBytes } from '../../lib/byte-chunks.ts';
import { notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { InboundRecord, InboundRepo, NewInboundMessage } from './inbound.repo.ts';
import type { InboundMessageView } from './inbound.schemas.ts';

export const toInboundView = (record: InboundRecord): InboundMessageView => ({
  object: 'inbound_message',
  id: record.id,
  received_at: record.receivedAt,
  processed_at: record.processedAt,
  mail_from: record.mailFrom,
  rcpt_to: record.rcptTo,
  subject: record.subject,
  size: record.size,
  kind: record.kind,
  status: record.status,
  detail: record.detail,
  email_id: record.emailId,
  recipient: record.recipient,
});

/**
 * What the inbound listener received, stored; and the reports a project sees: those matched to one of its
 * emails. Unmatched and unreadable ones belong to no project; the operator lists them (`postwire inbound
 * list`).
 */
export function createInboundService({ db, repo }: { db: Kysely<Database>; repo: InboundRepo }) {
  return {
    /**
     * Stores a received message, pending, with its bytes (a large one's pieces first, outside the
     * transaction, then its row in one): once this resolves, the listener may answer 250.
     */
    async store(message: NewInboundMessage): Promise<string> {
      const id = newId('inb');
      const raw = chunksOf(message.raw);
      const size = totalBytes(raw);
      const piecesKey = keptInPieces(size) ? await repo.writePieces(id, raw) : null;
      try {
        await inTransaction(db, (transaction) =>
          repo.insert(id, { message, raw, size, piecesKey }, transaction),
        );
      } catch (error) {
        // Best effort: pieces left when even this fails are named by no row and go with retention.
        if (piecesKey) await repo.removePieces(piecesKey).catch(() => undefined);
        throw error;
      }
      return id;
    },

    list: (projectId: string, page: PageRequest) => repo.listForProject(projectId, page),

    /** For the operator (`postwire inbound list`): every project's, or (`all: false`) only the unmatched and unreadable. */
    listForOperator: (options: { all: boolean; limit: number }) => repo.listForOperator(options),

    async get(projectId: string, id: string): Promise<InboundRecord> {
      const record = isId('inb', id) ? await repo.findForProject(projectId, id) : undefined;
      if (!record) throw notFound('inbound message', id);
      return record;
    },
  };
}

export type InboundService = ReturnType<typeof createInboundService>;
