import type { PageRequest } from '../../db/pagination.ts';
import { notFound } from '../../lib/errors.ts';
import { isId } from '../../lib/ids.ts';
import type { InboundRecord, InboundRepo } from './inbound.repo.ts';
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
 * The reports a project sees: those matched to one of its emails. Unmatched and unreadable ones belong to
 * no project; the operator lists them (`postwire inbound list`).
 */
export function createInboundService({
  repo,
}: {
  repo: Pick<InboundRepo, 'listForProject' | 'findForProject' | 'listForOperator'>;
}) {
  return {
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
