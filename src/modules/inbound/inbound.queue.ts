import { type Kysely, sql, type Updateable } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import type { Database, InboundKind, InboundStatus } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { type Lease, releaseLeases, storedLease } from '../../queue/lease.ts';
import type { QueueJob, QueueSource } from '../../queue/runtime.ts';
import type { RecipientRepo } from '../emails/recipients.repo.ts';
import { createRecipientOutcomes } from '../emails/recipients.ts';
import type { SuppressionRepo } from '../suppressions/suppressions.repo.ts';
import type { EventService } from '../events/events.service.ts';
import type { MetricsRecorder } from '../metrics/instruments.ts';
import type { ClaimedInbound, RoutedRecipient, SpamVerdict } from './inbound.repo.ts';
import type { ReceivedIntake, ReceivedWrite } from './received-intake.ts';
import type { Interpretation } from './report-matching.ts';

// The inbound queue: received messages (inbound_messages rows) still pending, claimed by the inbound worker
// under a lease, postponed, and settled with the verdict of their read, in one transaction with what they
// say. All of the queue's SQL is here; the worker holds the policy (reading, matching, what a report means).

/** How a message was read, written by the worker that holds it. */
export interface InboundResult {
  id: string;
  status: Exclude<InboundStatus, 'pending'>;
  kind: InboundKind;
  detail: string | null;
  subject: string | null;
  projectId: string | null;
  emailId: string | null;
  recipient: string | null;
}

export interface InboundJob extends QueueJob {
  message: ClaimedInbound;
}

/** How a message was read: what a report says, and the received emails of its routed recipients. */
export interface InboundOutcome extends Interpretation {
  received?: ReceivedWrite[];
}

/** A report about a recipient still being sent is read again after this. */
const EARLY_RETRY_MS = 2000;

/** The inbound queue's statements on `db` (the database, or a transaction's for the verdicts). */
export function createInboundQueue(db: Kysely<Database>, engine: Engine) {
  /**
   * An UPDATE of a message `workerId` still holds (pending, leased to it): the one lease check of every
   * write of a read's outcome. The caller sets what changes; true when the lease still held.
   */
  async function updateHeld(
    id: string,
    workerId: string,
    set: Updateable<Database['inbound_messages']>,
  ): Promise<boolean> {
    const updated = await db
      .updateTable('inbound_messages')
      .set(set)
      .where('id', '=', id)
      .where('locked_by', '=', workerId)
      .where('status', '=', 'pending')
      .executeTakeFirst();
    return Number(updated.numUpdatedRows) > 0;
  }

  return {
    /** Leases up to `limit` pending messages, oldest first (or whose lease ran out: their worker died). */
    async claim(lease: Lease, limit: number): Promise<ClaimedInbound[]> {
      const { workerId, now, lockedUntil } = storedLease(lease);
      const due = db
        .selectFrom('inbound_messages')
        .select('id')
        .where('status', '=', 'pending')
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', now)]))
        .orderBy('id')
        .limit(limit)
        .$if(engine === 'postgres', (query) => query.forUpdate().skipLocked());
      const rows = await db
        .updateTable('inbound_messages')
        .set((eb) => ({ locked_until: lockedUntil, locked_by: workerId, attempts: eb('attempts', '+', 1) }))
        .where('id', 'in', due)
        .returning([
          'id',
          'received_at',
          'mail_from',
          'rcpt_to',
          'remote_address',
          'helo',
          'routing',
          'spam',
          'size',
          'attempts',
        ])
        .execute();
      return rows
        .map((row) => ({
          id: row.id,
          receivedAt: row.received_at,
          mailFrom: row.mail_from,
          rcptTo: JSON.parse(row.rcpt_to) as string[],
          remoteAddress: row.remote_address,
          helo: row.helo,
          routing: row.routing === null ? [] : (JSON.parse(row.routing) as RoutedRecipient[]),
          spam: row.spam === null ? null : (JSON.parse(row.spam) as SpamVerdict),
          size: Number(row.size),
          attempts: Number(row.attempts),
        }))
        .sort((a, b) => (a.id < b.id ? -1 : 1));
    },

    release(workerId: string, rows?: readonly string[]): Promise<string[]> {
      return releaseLeases(db, 'inbound_messages', {
        workerId,
        rows,
        waiting: sql<boolean>`status = 'pending'`,
      });
    },

    /**
     * Writes how a message was read, if `workerId` still holds it (on the caller's transaction, which also
     * applies what the report says). False when the lease was lost: another worker reads it again.
     */
    finish: (result: InboundResult, workerId: string, now: string): Promise<boolean> =>
      updateHeld(result.id, workerId, {
        status: result.status,
        kind: result.kind,
        detail: result.detail,
        subject: result.subject,
        project_id: result.projectId,
        email_id: result.emailId,
        recipient: result.recipient,
        locked_until: null,
        locked_by: null,
        processed_at: now,
      }),

    /** Leaves a message pending, not claimable before `until`, if `workerId` still holds it. */
    postpone: (id: string, workerId: string, until: string): Promise<boolean> =>
      updateHeld(id, workerId, { locked_by: null, locked_until: until }),

    /** Settles the verdict `finish` wrote provisionally, once the report's effects are applied. */
    async setVerdict(id: string, status: 'applied' | 'no_change', detail: string): Promise<void> {
      await db.updateTable('inbound_messages').set({ status, detail }).where('id', '=', id).execute();
    },
  };
}

export type InboundQueue = ReturnType<typeof createInboundQueue>;

/**
 * The inbound_messages table as the runtime's queue: each pending message a job (one lane), claimed, given
 * back, and recorded: each read's verdict (only while its lease holds), with the received emails it makes and
 * what its reports say (their recipients' states, events and suppressions), in one transaction.
 */
export function createInboundQueueSource(deps: {
  db: Kysely<Database>;
  engine: Engine;
  clock: Clock;
  /** The worker whose leases the verdicts are written under. */
  workerId: string;
  events: Pick<EventService, 'emitIn'>;
  /** The recipients' repository, through which reports move them. */
  recipients: RecipientRepo;
  /** The suppression list's repository: what reports say adds to it. */
  suppressions: Pick<SuppressionRepo, 'add'>;
  intake: Pick<ReceivedIntake, 'write'>;
  metrics: Pick<MetricsRecorder, 'inboundReportRead'>;
}): QueueSource<InboundJob, InboundOutcome> {
  const { db, engine, clock, workerId, intake, metrics } = deps;
  const repo = createInboundQueue(db, engine);
  const recipientOutcomes = createRecipientOutcomes({ events: deps.events, suppressions: deps.suppressions });
  return {
    async claim(lease, request) {
      const messages = await repo.claim(lease, request.limit);
      return messages.map((message) => ({ lane: '', rows: [message.id], message }));
    },
    release: (releasing, rows) => repo.release(releasing, rows),
    // Nothing waits for a time: every stored message is due at once.
    nextDueAt: async () => undefined,
    async record(attempted) {
      // The verdicts of the messages read, counted once their transaction has committed.
      const verdicts: string[] = [];
      const recorded = await inTransaction(db, async (transaction) => {
        const messages = createInboundQueue(transaction.db, engine);
        const now = clock.now().toISOString();
        const results: Array<{ held: boolean; retryAt?: number }> = [];
        /** The messages still held whose effects apply: all applied at once, in order, then each one's verdict. */
        const applying: Array<{ id: string; outcome: Interpretation }> = [];
        for (const { job, outcome } of attempted) {
          if (outcome.early) {
            const retryAt = clock.now().getTime() + EARLY_RETRY_MS;
            const held = await messages.postpone(job.message.id, workerId, new Date(retryAt).toISOString());
            results.push({ held, retryAt });
            continue;
          }
          const first = outcome.effects[0]?.recipient ?? outcome.about;
          const verdict: InboundResult = {
            id: job.message.id,
            kind: outcome.kind,
            subject: outcome.subject,
            status: outcome.status ?? 'applied',
            detail: outcome.detail,
            projectId: first?.email.projectId ?? outcome.projectId ?? null,
            emailId: first?.email.id ?? null,
            recipient: first?.address ?? null,
          };
          // The lease is checked by the first write: a message another worker took over is left to it.
          const held = await messages.finish(verdict, workerId, now);
          results.push({ held });
          if (!held) continue;
          if (outcome.received) await intake.write(transaction, deps.events, outcome.received);
          if (outcome.status === undefined) applying.push({ id: job.message.id, outcome });
          else verdicts.push(outcome.status);
        }
        const changed = await recipientOutcomes.applyReports(
          transaction,
          deps.recipients,
          applying.flatMap(({ outcome }) => outcome.effects),
          now,
        );
        let next = 0;
        for (const { id, outcome } of applying) {
          const moved = outcome.effects.filter(() => changed[next++]);
          if (moved.length > 0) {
            const said = moved.map((effect) => `${effect.recipient.address}: ${effect.outcome}`);
            await messages.setVerdict(id, 'applied', `${outcome.detail}; ${said.join(', ')}`);
            verdicts.push('applied');
          } else {
            const settled = outcome.effects
              .map((effect) => `${effect.recipient.address} is ${effect.recipient.status}`)
              .join(', ');
            await messages.setVerdict(id, 'no_change', `${outcome.detail}; nothing changed (${settled})`);
            verdicts.push('no_change');
          }
        }
        return results;
      });
      for (const verdict of verdicts) metrics.inboundReportRead(verdict);
      return recorded;
    },
  };
}
