import type { Transaction } from '../../db/transaction.ts';
import type { EventKind } from '../event-kinds/event-kinds.ts';
import type { EmitWith, EventService, NewEvent } from '../events/events.service.ts';
import type { NewSuppression, SuppressionRepo } from '../suppressions/suppressions.repo.ts';
import type { BounceClass } from './bounce.ts';
import type { EmailRecord } from './emails.repo.ts';
import { emailEventData } from './event-data.ts';
import type { RecipientStatus } from '../../db/schema.ts';
import type { RecipientRepo, ReportedOutcome, ReportedRecipient } from './recipients.repo.ts';

// What happens to a recipient, written once for every path that learns it: the sending worker (the SMTP
// reply), the inbound worker (a delivery report or a complaint received later) and engagement (an
// unsubscribe). Applying an outcome moves the recipient's status (through the recipients' repository), emits
// the events that say so and puts the address on its project's suppression list where the rule below says,
// all in the caller's transaction.

/** What can happen to a recipient; each is said by one event. */
export type RecipientOutcomeKind =
  'sent' | 'delivered' | 'delayed' | 'failed' | 'bounced' | 'complained' | 'unsubscribed';

const EVENT_OF: Record<RecipientOutcomeKind, EventKind> = {
  sent: 'email.sent',
  delivered: 'email.delivered',
  delayed: 'email.delivery_delayed',
  failed: 'email.failed',
  bounced: 'email.bounced',
  complained: 'email.complained',
  unsubscribed: 'email.unsubscribed',
};

/** The email fields every event of its recipients carries. */
export type OutcomeEmail = Pick<
  EmailRecord,
  'id' | 'projectId' | 'from' | 'to' | 'subject' | 'templateId' | 'templateVersion' | 'tags' | 'messageId'
>;

/** What happened to one recipient: the events it makes and what the suppression list learns from it. */
export interface AppliedOutcome {
  email: OutcomeEmail;
  address: string;
  /**
   * What happened, in order, one event each (a final server's acceptance that reports a complaint at once
   * is `sent`, `delivered`, `complained`); empty when there is nothing new to say (a retry still waiting).
   */
  outcomes: readonly RecipientOutcomeKind[];
  /** What the events' data adds to the email's fields (`smtp_response`, `bounce`, `complaint`, …). */
  data: Record<string, unknown>;
  /** A bounce's class: a hard one suppresses the address. */
  bounce?: BounceClass | undefined;
  /** What the suppression entry of a complaint or an unsubscribe says (null when nothing). */
  detail?: string | null | undefined;
  /**
   * An unsubscribe from a broadcast's copy: the contact leaves the broadcasts (or the topic), and the address
   * stays off the suppression list (its transactional mail still goes).
   */
  unsuppressed?: boolean | undefined;
}

/** The new state of one recipient after an attempt. */
export interface RecipientUpdate {
  id: string;
  status: RecipientStatus;
  /** When status is `delayed`: when the retry is due. */
  retryAt?: string | undefined;
  /**
   * False for a destination's throttle (a deferral that says "slow down", issue 38): the attempt is not
   * counted in `attempts`, so it takes nothing from the retry schedule.
   */
  counted?: boolean | undefined;
  /** Why it waits when that is not a retry (issue 38): the email shows it as `throttled`. */
  waitReason?: 'warmup' | 'destination' | undefined;
  response: string | null;
  responseCode: number | null;
}

/** A sending attempt as the sending queue records it (sending/sending.queue.ts). */
export interface AttemptRecord {
  workerId: string;
  emailId: string;
  projectId: string;
  /** All recipients of the email (not only this attempt's). */
  recipientCount: number;
  attemptedAt: string;
  now: string;
  updates: RecipientUpdate[];
  /** The capture transport's MIME: in the record when small, else in the pieces `rawPiecesKey` names. */
  raw?: Buffer | undefined;
  rawPiecesKey?: string | undefined;
}

/** Where an attempt's recipient states are written: the sending queue, on the caller's transaction. */
export interface AttemptWriter {
  /** Returns, per attempt and update, whether this worker still held the recipient's lease. */
  recordAttempts(records: readonly AttemptRecord[]): Promise<boolean[][]>;
  /**
   * PostgreSQL: records the attempts and `alongside`'s writes in one statement, all of them if this worker
   * still holds every recipient's lease, else none; whether it did.
   */
  recordAllWith?(records: readonly AttemptRecord[], alongside: EmitWith['writes']): Promise<boolean>;
}

/** An attempt's outcome per recipient: its new state in the queue, and what that says. */
export type AttemptOutcome = Omit<AttemptRecord, 'updates'> & {
  updates: Array<RecipientUpdate & AppliedOutcome>;
};

/** A report's outcome for one recipient (inbound/report-matching.ts). */
export interface ReportedEffect extends Omit<AppliedOutcome, 'email' | 'address' | 'outcomes'> {
  recipient: ReportedRecipient;
  outcome: ReportedOutcome;
  /** What a complaint's suppression entry says; for a bounce, the server's words (its last response). */
  detail: string | null;
}

/**
 * The suppression rule: a complaint and an unsubscribe suppress the address, and so does a hard bounce (with
 * the server's words); nothing else does.
 */
function suppressionOf(applied: AppliedOutcome): Pick<NewSuppression, 'reason' | 'detail'> | undefined {
  if (applied.unsuppressed) return undefined;
  if (applied.outcomes.includes('complained')) return { reason: 'complaint', detail: applied.detail ?? null };
  if (applied.outcomes.includes('unsubscribed')) {
    return { reason: 'unsubscribe', detail: applied.detail ?? null };
  }
  if (applied.outcomes.includes('bounced') && applied.bounce?.type === 'hard') {
    return { reason: 'hard_bounce', detail: applied.bounce.diagnostic };
  }
  return undefined;
}

/** Applies outcomes in the caller's transaction, which it hands to every write. */
export function createRecipientOutcomes(deps: {
  /** With emitWith (the sending worker's), attempts can be recorded in one statement (recordAttemptsAtOnce). */
  events: Pick<EventService, 'emitIn'> & Partial<Pick<EventService, 'emitWith'>>;
  /** The suppression list's repository, which the rule below adds to. */
  suppressions: Pick<SuppressionRepo, 'add'>;
}) {
  /** The events and suppressions of outcomes whose state is written. */
  function effectsOf(applied: readonly AppliedOutcome[], createdAt: string) {
    const events: NewEvent[] = [];
    const suppressions: NewSuppression[] = [];
    for (const outcome of applied) {
      const { email, address } = outcome;
      const suppression = suppressionOf(outcome);
      if (suppression) {
        suppressions.push({
          projectId: email.projectId,
          address,
          emailId: email.id,
          createdAt,
          ...suppression,
        });
      }
      if (outcome.outcomes.length === 0) continue;
      const data = emailEventData(email, address, outcome.data);
      for (const said of outcome.outcomes) {
        events.push({ projectId: email.projectId, kind: EVENT_OF[said], data, emailId: email.id });
      }
    }
    return { events, suppressions };
  }

  /** Writes the effects of outcomes: one event insert and at most one suppression insert however many. */
  async function emitAndSuppress(
    transaction: Transaction,
    applied: readonly AppliedOutcome[],
    createdAt: string,
  ): Promise<void> {
    const { events, suppressions } = effectsOf(applied, createdAt);
    await deps.events.emitIn(transaction, events);
    await deps.suppressions.add(suppressions, transaction);
  }

  return {
    /**
     * Records sending attempts: each recipient's new state (only while this worker still holds its lease),
     * and the events and suppressions of those it moved. Returns, per attempt and update, whether the lease
     * still held. `at`: when the suppressions are made.
     */
    async recordAttempts(
      transaction: Transaction,
      recipients: AttemptWriter,
      attempts: readonly AttemptOutcome[],
      at: string,
    ): Promise<boolean[][]> {
      const held = await recipients.recordAttempts(attempts);
      await emitAndSuppress(
        transaction,
        attempts.flatMap((attempt, index) => attempt.updates.filter((_, position) => held[index]![position])),
        at,
      );
      return held;
    },

    /**
     * Records sending attempts as recordAttempts does, in one statement (PostgreSQL), when every recipient's
     * lease still holds and the outcomes suppress nobody and go to no webhook (the common case). Returns
     * false, having written nothing, when it cannot: recordAttempts, in the same transaction, then sorts out
     * which leases held and writes the rest. In a transaction still, not autocommitted: a worker killed
     * while its statement waits for a lock must leave nothing written (test/send-crash.test.ts), and a
     * statement already sent commits on its own once the lock is free, whether or not its worker lives.
     */
    async recordAttemptsAtOnce(
      transaction: Transaction,
      recipients: AttemptWriter,
      attempts: readonly AttemptOutcome[],
      at: string,
    ): Promise<boolean> {
      if (!recipients.recordAllWith || !deps.events.emitWith) return false;
      const { events, suppressions } = effectsOf(
        attempts.flatMap((attempt) => attempt.updates),
        at,
      );
      if (suppressions.length > 0) return false;
      const alongside = await deps.events.emitWith(transaction, events);
      if (!alongside || !(await recipients.recordAllWith(attempts, alongside.writes))) return false;
      transaction.afterCommit(alongside.committed);
      return true;
    },

    /**
     * Applies what reports say, each only if its recipient is still where the outcome may move it from (so a
     * late or repeated report changes nothing), with the events and suppressions of those that moved. In
     * order: two reports about one recipient apply as they came. Returns, per effect, whether it changed.
     */
    async applyReports(
      transaction: Transaction,
      recipients: RecipientRepo,
      effects: readonly ReportedEffect[],
      now: string,
    ): Promise<boolean[]> {
      const changed: boolean[] = [];
      const applied: AppliedOutcome[] = [];
      for (const effect of effects) {
        const { recipient, outcome } = effect;
        const response = outcome === 'bounced' ? effect.detail : null;
        const moved = await recipients.applyReported(recipient, outcome, { response, now }, transaction);
        changed.push(moved);
        if (moved) {
          const { data, bounce, detail } = effect;
          applied.push({
            email: recipient.email,
            address: recipient.address,
            outcomes: [outcome],
            data,
            bounce,
            detail,
          });
        }
      }
      await emitAndSuppress(transaction, applied, now);
      return changed;
    },

    /**
     * Records an outcome that moves no status (an unsubscribe, counted by the engagement module, which
     * decides that it is the first): its event and its suppression.
     */
    record: (transaction: Transaction, applied: readonly AppliedOutcome[], at: string): Promise<void> =>
      emitAndSuppress(transaction, applied, at),
  };
}

export type RecipientOutcomes = ReturnType<typeof createRecipientOutcomes>;
