import type { Transaction } from '../../db/transaction.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import type { Clock } from '../../lib/clock.ts';
import { MESSAGE_ID_PATTERN } from '../../lib/addresses.ts';
import { newId } from '../../lib/ids.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';
import type { RecipientRepo } from '../emails/recipients.repo.ts';
import type { EventService } from '../events/events.service.ts';
import type { ClaimedInbound, RoutedRecipient } from './inbound.repo.ts';
import type { ReceivedEmailRecord, ReceivedRepo } from './received.repo.ts';
import type { ReceivedAuthentication, ReceivedAuthenticator } from './received-authentication.ts';
import type { ReceivedReader } from './received-reader.ts';
import { receivedEventData } from './received-view.ts';

// What becomes of a message the listener took for inbound routes: read (on the parse threads), authenticated
// (SPF, DKIM, DMARC, ARC, with DNS_SERVERS), threaded to the email of the project it replies to, and stored as
// one received email per accepted recipient, with `email.received` for the recipients whose route says
// `webhook`, in the transaction that records the message's verdict. All the slow work (parsing, DNS) is done
// before that transaction opens.

/** A received email to store, and whether its route emits `email.received`. */
export interface ReceivedWrite {
  record: ReceivedEmailRecord;
  emit: boolean;
}

export interface ReceivedIntakeDeps {
  reader: Pick<ReceivedReader, 'read'>;
  /** Absent: authentication is not computed (null). */
  authenticator: ReceivedAuthenticator | undefined;
  recipients: Pick<RecipientRepo, 'findThread'>;
  /** Where the received emails are stored. */
  received: Pick<ReceivedRepo, 'insert'>;
  clock: Clock;
  logger: WorkerLogger;
}

/** Message-IDs a reply may name its parent by, the closest first: In-Reply-To, then References newest first. */
function parentIds(inReplyTo: string | null, references: readonly string[]): string[] {
  const ids = [...(inReplyTo ? [inReplyTo] : []), ...[...references].reverse()];
  return [...new Set(ids.map((id) => id.trim()).filter((id) => MESSAGE_ID_PATTERN.test(id)))];
}

/** The routed recipients once each: a client may name the same address twice. */
function distinct(routing: readonly RoutedRecipient[]): RoutedRecipient[] {
  const seen = new Set<string>();
  return routing.filter((route) => !seen.has(route.address) && seen.add(route.address));
}

export function createReceivedIntake(deps: ReceivedIntakeDeps) {
  async function authenticate(
    message: ClaimedInbound,
    raw: ByteChunks,
  ): Promise<ReceivedAuthentication | null> {
    if (!deps.authenticator) return null;
    try {
      return await deps.authenticator.authenticate(raw, {
        remoteAddress: message.remoteAddress,
        helo: message.helo,
        mailFrom: message.mailFrom,
      });
    } catch (error) {
      // Not the message's fault, and no reason to keep it from its application: shown as not computed.
      deps.logger.warn(
        { err: error, id: message.id },
        'inbound worker: could not authenticate a received message',
      );
      return null;
    }
  }

  return {
    /** Reads a routed message into its received emails; outside any transaction. */
    async read(message: ClaimedInbound, raw: ByteChunks): Promise<ReceivedWrite[]> {
      const content = await deps.reader.read(raw);
      const authentication = await authenticate(message, raw);
      const now = deps.clock.now().toISOString();
      const parents = content.readable ? parentIds(content.in_reply_to, content.references) : [];
      const from = content.readable ? (content.from?.address ?? null) : null;
      const writes: ReceivedWrite[] = [];
      for (const route of distinct(message.routing)) {
        const thread =
          parents.length > 0 ? await deps.recipients.findThread(route.projectId, parents, from) : undefined;
        writes.push({
          emit: route.action === 'webhook',
          record: {
            id: newId('rcv'),
            projectId: route.projectId,
            inboundId: message.id,
            routeId: route.routeId,
            recipient: route.address,
            mailboxHash: route.mailboxHash,
            receivedAt: message.receivedAt,
            mailFrom: message.mailFrom,
            fromAddress: from,
            subject: content.subject,
            messageId: content.readable ? content.message_id : null,
            inReplyToEmailId: thread?.emailId ?? null,
            inReplyToRecipient: thread?.recipient ?? null,
            status: content.readable ? 'received' : 'unreadable',
            size: message.size,
            attachmentCount: content.readable ? content.attachments.length : 0,
            content,
            authentication,
            spam: message.spam,
            createdAt: now,
          },
        });
      }
      return writes;
    },

    /**
     * Stores the received emails and emits their events, on the transaction that records the message's
     * verdict. A second read of the same message (its worker died after the first committed) writes nothing:
     * the rows are there, so their events were emitted once.
     */
    async write(
      transaction: Transaction,
      events: Pick<EventService, 'emitIn'>,
      writes: readonly ReceivedWrite[],
    ): Promise<number> {
      const records = writes.map((write) => write.record);
      const written = await deps.received.insert(records, transaction);
      await events.emitIn(
        transaction,
        writes
          .filter((write) => write.emit && written.has(write.record.id))
          .map((write) => ({
            projectId: write.record.projectId,
            kind: 'email.received' as const,
            data: receivedEventData(write.record),
          })),
      );
      return written.size;
    },
  };
}

export type ReceivedIntake = ReturnType<typeof createReceivedIntake>;
