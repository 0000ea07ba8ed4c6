import type { PageRequest } from '../../db/pagination.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import { invalidParam, notFound, RetryLaterError } from '../../lib/errors.ts';
import { isId } from '../../lib/ids.ts';
import type { InboundRepo } from './inbound.repo.ts';
import type { ReceivedEmailRecord, ReceivedFilter, ReceivedRepo } from './received.repo.ts';
import type { ReceivedAttachmentContent, ReceivedReader } from './received-reader.ts';

// The received mail a project reads: its received emails, their bytes as received, and their attachments'
// bytes (read again out of the message, on the parse threads, when asked for).

/** When to ask again for an attachment the parse thread's budget stopped: a read's budget is seconds. */
const ATTACHMENT_RETRY_SECONDS = 5;

export interface ReceivedServiceDeps {
  repo: Pick<ReceivedRepo, 'list' | 'find' | 'latest'>;
  inbound: Pick<InboundRepo, 'raw'>;
  reader: Pick<ReceivedReader, 'attachment'>;
}

export function createReceivedService({ repo, inbound, reader }: ReceivedServiceDeps) {
  async function load(projectId: string, id: string): Promise<ReceivedEmailRecord> {
    const record = isId('rcv', id) ? await repo.find(projectId, id) : undefined;
    if (!record) throw notFound('received email', id);
    return record;
  }

  async function rawOf(record: ReceivedEmailRecord): Promise<ByteChunks> {
    const raw = await inbound.raw(record.inboundId);
    // The row outlives its bytes only between retention's two deletes.
    if (raw === undefined) throw notFound('received email', record.id);
    return raw;
  }

  return {
    list(projectId: string, page: PageRequest, filter: ReceivedFilter, options: { content?: boolean } = {}) {
      if (filter.routeId !== undefined && !isId('rte', filter.routeId)) {
        throw invalidParam('route_id', 'route_id must be an inbound route id (rte_…).');
      }
      return repo.list(projectId, page, { ...filter, recipient: filter.recipient?.toLowerCase() }, options);
    },

    get: load,

    /** For the operator (`postwire inbound received`): the latest, of every project. */
    latest: (limit: number): Promise<ReceivedEmailRecord[]> => repo.latest(limit),

    /** The message's bytes exactly as the listener stored them, in the chunks they are kept in. */
    async raw(projectId: string, id: string): Promise<ByteChunks> {
      return rawOf(await load(projectId, id));
    },

    /**
     * One attachment's decoded bytes; 404 for an index the message does not have, 503 (try again) when the
     * parse thread's budget stopped reading it now although it was read at receipt.
     */
    async attachment(projectId: string, id: string, index: number): Promise<ReceivedAttachmentContent> {
      const record = await load(projectId, id);
      const content = record.content as { readable: boolean; attachments?: unknown[] };
      if (!content.readable || index >= (content.attachments?.length ?? 0)) {
        throw notFound('attachment', `${id}/attachments/${index}`);
      }
      const attachment = await reader.attachment(await rawOf(record), index);
      if (!attachment) throw notFound('attachment', `${id}/attachments/${index}`);
      if ('stopped' in attachment) {
        throw new RetryLaterError(
          'attachment_unreadable_now',
          `The attachment could not be read now: ${attachment.stopped}. Try again shortly.`,
          ATTACHMENT_RETRY_SECONDS,
          'unavailable',
        );
      }
      return attachment;
    },
  };
}

export type ReceivedService = ReturnType<typeof createReceivedService>;
