import type { Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { DomainError, invalidParam } from '../../lib/errors.ts';
import type { Notifier } from '../../queue/notifier.ts';
import { CancelRefused, RescheduleRefused, type EmailRecord, type EmailRepo } from './emails.repo.ts';
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
  return {
    /** Reads the email to cancel and its view, before any transaction; `cancel` then cancels it. */
    async prepareCancel(projectId: string, id: string): Promise<{ email: EmailRecord; view: EmailView }> {
      const email = await load(projectId, id);
      return { email, view: await view(email) };
    },

    /**
     * Cancels the email in `transaction` and answers its view as cancelled: every recipient was still
     * waiting (else nothing changes and this is a 409), so what the cancel changed is known without a read.
     */
    async cancel(
      transaction: Transaction,
      { email, view: before }: { email: EmailRecord; view: EmailView },
    ): Promise<EmailView> {
      const now = clock.now().toISOString();
      try {
        await repo.cancel(transaction, email.projectId, email.id, now);
      } catch (error) {
        if (!(error instanceof CancelRefused)) throw error;
        throw new DomainError(
          'conflict',
          'email_not_cancellable',
          `Email '${email.id}' is ${shownStatus(email, now)}; only a scheduled email whose time has not come can be cancelled.`,
          'id',
        );
      }
      return {
        ...before,
        status: 'cancelled',
        updated_at: now,
        recipients: before.recipients.map((recipient) => ({
          ...recipient,
          status: 'cancelled',
          next_attempt_at: null,
          completed_at: now,
        })),
      };
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
    ): Promise<{ email: EmailRecord; view: EmailView; at: string }> {
      const email = await load(projectId, id);
      const at = checkScheduledAt(input.scheduled_at, clock.now(), '');
      if (at === null) {
        throw invalidParam('scheduled_at', 'scheduled_at must be in the future to reschedule an email.');
      }
      return { email, view: await view(email), at };
    },

    /**
     * Moves the email to its new time in `transaction` and answers its view: every recipient not suppressed
     * was still waiting (else nothing changes and this is a 409), so the new view is known without a read.
     */
    async reschedule(
      transaction: Transaction,
      { email, view: before, at }: { email: EmailRecord; view: EmailView; at: string },
    ): Promise<EmailView> {
      const now = clock.now().toISOString();
      try {
        await repo.reschedule(transaction, email.projectId, email.id, at, now);
      } catch (error) {
        if (!(error instanceof RescheduleRefused)) throw error;
        throw new DomainError(
          'conflict',
          'email_not_reschedulable',
          `Email '${email.id}' is ${shownStatus(email, now)}; only a scheduled email whose time has not come can be rescheduled.`,
          'id',
        );
      }
      // The worker reads the next waiting time again on its next claim (an earlier time, sooner).
      transaction.afterCommit(() => notifier.notify());
      return {
        ...before,
        scheduled_at: at,
        updated_at: now,
        recipients: before.recipients.map((recipient) =>
          recipient.status === 'queued' ? { ...recipient, next_attempt_at: at } : recipient,
        ),
      };
    },
  };
}
