import type { CompiledQuery, Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import {
  autocommitted,
  inTransaction,
  refusedByTheDatabase,
  type Transaction,
} from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { RetryLaterError } from '../../lib/errors.ts';
import type { Notifier } from '../../queue/notifier.ts';
import type { EventService } from '../events/events.service.ts';
import { type MetricsRecorder, noMetrics } from '../metrics/instruments.ts';
import { type SuppressionRepo, suppressionKey } from '../suppressions/suppressions.repo.ts';
import type { EmailRepo, NewEmail } from './emails.repo.ts';
import { DailyLimitReached, GuardFound } from './write-refusals.ts';
import { createSendGroups } from './send-groups.ts';
import { overDailyLimit, quotaDay } from './fair-queue.repo.ts';
import { emailEventData } from './event-data.ts';
import type { TrackingRepo } from './tracking.repo.ts';
import { trackedEmails } from './tracking.ts';
import type { SendPlan, SendPreparer, SuppressedEntries } from './send-prepare.ts';

/*
 * A prepared send stored: its large content in pieces, its emails, recipients, suppressed recipients' events
 * and tracking settings written in one transaction (alone, with others in a send group, or in an
 * Idempotency-Key's), the project's daily limit counted there, and the sending worker woken after the commit.
 */

/** A 429 that also says when the limit resets (the route sends it as `retry-after`). */
export class DailyLimitError extends RetryLaterError {
  constructor(message: string, retryAfterSeconds: number) {
    super('daily_send_limit', message, retryAfterSeconds);
  }
}

const secondsUntilNextUtcDay = (now: Date): number => {
  const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return Math.max(1, Math.ceil((next - now.getTime()) / 1000));
};

export interface SendStoreDeps {
  repo: EmailRepo;
  clock: Clock;
  /** Recipients a project may send to per UTC day; 0: no limit. */
  dailyLimit: number;
  /** Wakes this process's sending worker when emails are accepted. */
  notifier: Notifier;
  /** A suppressed recipient's event is emitted with the email. */
  events: Pick<EventService, 'emit'>;
  /** Counts accepted emails (/metrics); nothing is counted when absent. */
  metrics?: Pick<MetricsRecorder, 'emailsAccepted'> | undefined;
  /**
   * Read by the daily limit's early answer, at the limit only; and the guard of an accepting statement
   * (`matchingStatement`).
   */
  suppressions: Pick<SuppressionRepo, 'matchingIn' | 'matchingStatement'>;
  /** Where sends outside an Idempotency-Key's transaction open their own. */
  db: Kysely<Database>;
  /**
   * Concurrent sends written together, at most `maxEmails` a group and `inFlight` groups at once
   * (send-groups.ts); unset: each alone.
   */
  sendGroups?: { maxEmails: number; inFlight?: number | undefined } | undefined;
  /** Where the tracking settings are kept. */
  engagement: { repo: TrackingRepo };
  markSuppressed: SendPreparer['markSuppressed'];
}

export function createSendStore({
  repo,
  clock,
  dailyLimit,
  notifier,
  events: eventService,
  metrics = noMetrics,
  suppressions,
  db,
  sendGroups,
  engagement,
  markSuppressed,
}: SendStoreDeps) {
  /**
   * Writes the emails (of one send, or of many sent together), their recipients and, for recipients on the
   * suppression list, their `suppressed` status and `email.suppressed` event, in `transaction`: the
   * suppressed recipients' events and the tracking settings commit with the email, or none does. Throws
   * DailyLimitReached when a project passes its daily limit.
   */
  async function writeIn(
    transaction: Transaction,
    emails: NewEmail[],
    suppressed: SuppressedEntries,
  ): Promise<void> {
    await repo.insert(emails, { dailyLimit }, transaction);
    for (const email of emails) {
      for (const recipient of email.recipients) {
        const entry = recipient.suppressed
          ? suppressed.get(suppressionKey(email.projectId, recipient.address))
          : undefined;
        if (!entry) continue;
        const data = emailEventData(email, recipient.address, {
          suppression: { reason: entry.reason, created_at: entry.createdAt },
        });
        await eventService.emit(email.projectId, 'email.suppressed', data, {
          emailId: email.id,
          transaction,
        });
      }
    }
    const tracked = trackedEmails(emails);
    if (tracked.length > 0 && engagement) await engagement.repo.insertSettings(tracked, transaction);
  }

  /**
   * Writes the emails in a transaction of their own; `inside` hears of a failure inside the transaction
   * (rolled back, nothing stored), as against one of its COMMIT.
   */
  async function write(emails: NewEmail[], inside?: { failed(error: unknown): void }): Promise<void> {
    // PostgreSQL: the suppression list is read by the statement that writes the emails, as
    // a guard that has nothing written when it finds any of their recipients (one round trip instead of the
    // read and then the write). Found (rarely): the usual way below, which reads the list and writes each
    // suppressed recipient's event.
    const guard = guardedStatement(emails);
    if (guard !== undefined) {
      try {
        await autocommittedInsert(emails, guard);
        return;
      } catch (error) {
        if (!(error instanceof GuardFound)) throw notedInside(error, inside);
      }
    }
    const suppressed = await markSuppressed(emails);
    if (writtenByOneStatement(emails)) {
      // Nothing but the emails' one statement to write (which the daily limit refuses whole, writing
      // nothing): the statement is their transaction (PostgreSQL: one round trip instead of BEGIN, it and
      // COMMIT).
      try {
        await autocommittedInsert(emails);
      } catch (error) {
        throw notedInside(error, inside);
      }
      return;
    }
    await inTransaction(db, async (transaction) => {
      try {
        await writeIn(transaction, emails, suppressed);
      } catch (error) {
        inside?.failed(error);
        throw error;
      }
    });
  }

  /** The emails' one statement, autocommitted (writtenByOneStatement), with the guard when given. */
  const autocommittedInsert = (emails: NewEmail[], unlessFound?: CompiledQuery) =>
    autocommitted(db, (transaction) => repo.insert(emails, { dailyLimit, unlessFound }, transaction));

  /**
   * The error of an autocommitted statement, told to `inside` when nothing was stored: the database refused it,
   * or the daily limit in the statement itself did.
   */
  function notedInside(error: unknown, inside: { failed(error: unknown): void } | undefined): unknown {
    if (refusedByTheDatabase(error) || error instanceof DailyLimitReached) inside?.failed(error);
    return error;
  }

  /**
   * The suppression lookup to guard the emails' one statement with (`insert`'s `unlessFound`), when they are
   * written by one statement that can hold it, and not yet read: none of their recipients is marked yet.
   */
  function guardedStatement(emails: NewEmail[]): CompiledQuery | undefined {
    if (!repo.guardsInOneStatement(emails) || !writtenByOneStatement(emails)) return undefined;
    return suppressions.matchingStatement(
      emails.map((email) => email.projectId),
      emails.flatMap((email) => email.recipients.map((recipient) => recipient.address)),
    );
  }

  /**
   * Whether writeIn would make one statement only: the repository writes these emails with one, none of their
   * recipients is suppressed (an event each) and none is tracked (its settings). With a daily limit, one
   * project's emails only (emails.repo.ts says why).
   */
  const writtenByOneStatement = (emails: NewEmail[]): boolean =>
    repo.insertsInOneStatement(emails, { dailyLimit }) &&
    emails.every(
      (email) => email.tracking === undefined && email.recipients.every((recipient) => !recipient.suppressed),
    );

  /** Wakes this process's sending worker when some of the emails stored are due now. */
  function stored(emails: NewEmail[]): void {
    metrics.emailsAccepted(emails.map((email) => email.source));
    const due = emails.some(
      (email) => email.scheduledAt === null && email.recipients.some((r) => !r.suppressed),
    );
    if (due) notifier.notify();
  }

  /** A project past its daily limit: the 429 that says when it resets; any other error as it is. */
  function refusal(error: unknown, emails: NewEmail[], now: Date): unknown {
    if (!(error instanceof DailyLimitReached)) return error;
    const count = emails.reduce((sum, email) => sum + email.recipients.length, 0);
    return new DailyLimitError(
      `This project may send to ${dailyLimit} recipients a day (UTC); ${error.usedBefore} are used and this ` +
        `request has ${count}. The limit resets at midnight UTC.`,
      secondsUntilNextUtcDay(now),
    );
  }

  /** Stores one send's emails (a single send, or a batch: all or none), answering 429 past the limit. */
  async function store(emails: NewEmail[], now: Date): Promise<void> {
    try {
      await write(emails);
    } catch (error) {
      throw refusal(error, emails, now);
    }
    stored(emails);
  }

  // Sends are written in groups (send-groups.ts), except those with an Idempotency-Key, which are written
  // in the key's transaction (`writeSend`), so that they commit with the saved answer.
  const groups =
    sendGroups && createSendGroups({ writeTogether: write, storeAlone: store, stored, ...sendGroups });

  /**
   * Runs `store` with the plan's large content — submitted messages and files larger than one piece — written
   * to its pieces first (before the transaction that stores the emails, never inside it: see
   * db/message-pieces.ts), and removes them again when `store` fails. A plan whose content is already in its
   * pieces is stored as it is.
   */
  async function withContentInPieces<T>(plan: SendPlan, store: (plan: SendPlan) => Promise<T>): Promise<T> {
    const emails = await repo.keepLargeContentInPieces(plan.emails);
    try {
      return await store({ ...plan, emails });
    } catch (error) {
      // Best effort: pieces left when even this fails are named by no row, and retention removes them.
      await repo.removePieces(emails).catch(() => undefined);
      throw error;
    }
  }

  return {
    /**
     * The daily limit's early answer, for SMTP's RCPT: whether a message to `recipients` (those accepted so
     * far with the one asked about) still fits the project's count for today. Counted as the store counts
     * (each address once, suppressed recipients not), against the sends committed so far. Only the count in
     * the storing transaction holds: two sessions may both hear yes, and the one that passes the limit is
     * refused at DATA (452) with nothing stored.
     */
    async fitsDailyLimit(projectId: string, recipients: readonly string[]): Promise<boolean> {
      if (dailyLimit <= 0) return true;
      const addresses = [...new Set(recipients.map((address) => address.toLowerCase()))];
      const used = await repo.usedOn(projectId, quotaDay(clock.now().toISOString()));
      if (!overDailyLimit(used + addresses.length, dailyLimit)) return true;
      // Only at the limit is the suppression list read: a suppressed recipient is recorded, never counted.
      const suppressed = await suppressions.matchingIn([projectId], addresses);
      const counted = addresses.filter((address) => !suppressed.has(suppressionKey(projectId, address)));
      return !overDailyLimit(used + counted.length, dailyLimit);
    },

    withContentInPieces,

    /** Stores a prepared send with others (send groups); resolves once it is committed (it will be sent). */
    async accept(plan: SendPlan): Promise<void> {
      await withContentInPieces(plan, ({ emails }) =>
        groups ? groups.accept(emails, plan.now) : store(emails, plan.now),
      );
    },

    /**
     * Stores a prepared send in `transaction` (an Idempotency-Key's), its large content already in pieces
     * (`withContentInPieces`); the worker wakes at its commit.
     */
    async writeSend(transaction: Transaction, plan: SendPlan): Promise<void> {
      try {
        await writeIn(transaction, plan.emails, await markSuppressed(plan.emails, transaction));
      } catch (error) {
        throw refusal(error, plan.emails, plan.now);
      }
      transaction.afterCommit(() => stored(plan.emails));
    },
  };
}
