import type { Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { DomainError, invalidParam } from '../../lib/errors.ts';
import type { Notifier } from '../../queue/notifier.ts';
import type { EmailRecord, EmailRepo } from './emails.repo.ts';
import { CancelRefused, RescheduleRefused } from './write-refusals.ts';
import type { EmailView, RescheduleEmailInput } from './emails.schemas.ts';
import { checkScheduledAt } from './send-checks.ts';
import { shownStatus, type EmailViews } from './email-views.ts';

/* Cancelling a scheduled email, and moving it to another time, while its time has not come. */

export interface ScheduledChangesDeps {
  repo: EmailRepo;
  clock: Clock;
  /** Woken when an email is rescheduled (its worker reads the next waiting time again). */
  notifier: Notifier;
  views: Pick<EmailViews, 'load' | 'view'>;
}

export function createScheduledChanges({ repo, clock, notifier, views }: ScheduledChangesDeps) {
  const { load, view } = views;

  /**
   * Makes `change` to an email that is scheduled and whose time has not come, in `transaction`, and answers
   * its view as read back in that transaction. The repository refuses (`refused`) when the email is no longer
   * such (a recipient already due, or the email not scheduled), and this is then a 409 whose `code` says it
   * cannot be `done`; the rollback undoes whatever the change had written.
   */
  async function whileScheduled(
    transaction: Transaction,
    email: EmailRecord,
    change: (now: string) => Promise<void>,
    refusal: { refused: new () => Error; code: string; done: string },
  ): Promise<EmailView> {
    const now = clock.now().toISOString();
    try {
      await change(now);
    } catch (error) {
      if (!(error instanceof refusal.refused)) throw error;
      throw new DomainError(
        'conflict',
        refusal.code,
        `Email '${email.id}' is ${shownStatus(email, now)}; only a scheduled email whose time has not come can be ${refusal.done}.`,
        'id',
      );
    }
    return view(await load(email.projectId, email.id, transaction), transaction);
  }

  return {
    /** Reads the email to cancel, before any transaction; `cancel` then cancels it. */
    async prepareCancel(projectId: string, id: string): Promise<{ email: EmailRecord }> {
      return { email: await load(projectId, id) };
    },

    /** Cancels the email in `transaction` (every recipient still waiting, else a 409) and answers its view. */
    async cancel(transaction: Transaction, { email }: { email: EmailRecord }): Promise<EmailView> {
      return whileScheduled(
        transaction,
        email,
        (now) => repo.cancel(email.projectId, email.id, now, transaction),
        { refused: CancelRefused, code: 'email_not_cancellable', done: 'cancelled' },
      );
    },

    /**
     * Reads the email to reschedule and checks the new time with a send's rule (up to 30 days ahead), before
     * any transaction; `reschedule` then moves it. A time that has come is refused: to send now, a client
     * cancels and sends again, rather than a reschedule sending at once by surprise.
     */
    async prepareReschedule(
      projectId: string,
      id: string,
      input: RescheduleEmailInput,
    ): Promise<{ email: EmailRecord; at: string }> {
      const email = await load(projectId, id);
      const at = checkScheduledAt(input.scheduled_at, clock.now(), '');
      if (at === null) {
        throw invalidParam('scheduled_at', 'scheduled_at must be in the future to reschedule an email.');
      }
      return { email, at };
    },

    /**
     * Moves the email to its new time in `transaction` (every recipient not suppressed still waiting, else a
     * 409) and answers its view.
     */
    async reschedule(
      transaction: Transaction,
      { email, at }: { email: EmailRecord; at: string },
    ): Promise<EmailView> {
      return whileScheduled(
        transaction,
        email,
        async (now) => {
          await repo.reschedule(email.projectId, email.id, at, now, transaction);
          // The worker reads the next waiting time again on its next claim (an earlier time, sooner).
          transaction.afterCommit(() => notifier.notify());
        },
        { refused: RescheduleRefused, code: 'email_not_reschedulable', done: 'rescheduled' },
      );
    },
  };
}
