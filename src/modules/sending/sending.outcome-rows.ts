import { RECIPIENT_STATUSES, type RecipientStatus } from '../../db/schema.ts';
import type { AttemptOutcome, AttemptRecord } from '../emails/recipients.ts';
import type { EmailRecord } from '../emails/emails.repo.ts';
import { PENDING, summarizeStatus } from '../emails/status.ts';

// The rows of values (`v`) the sending queue's outcome statements read (sending.queue.ts): one per recipient
// whose attempt ended, by column.

/**
 * A recipient's attempt as the row of values its statement reads (`v`), by column; the last two (PostgreSQL
 * only) move its email's status in the same statement.
 */
export const RECIPIENT_OUTCOME_COLUMNS = [
  'id',
  'worker',
  'status',
  'retry_at',
  'attempted_at',
  'response',
  'response_code',
  'now',
  'completed_at',
  'counted',
  'wait_reason',
  'email_id',
  'email_status',
] as const;

/** The outcome rows' typed columns (PostgreSQL reads a VALUES list's parameters as text otherwise). */
export const COUNTS = { response_code: 'integer', counted: 'integer' } as const;

/** Statuses a recipient does not leave: every one but those still being worked on. */
const FINAL: ReadonlySet<RecipientStatus> = new Set(
  RECIPIENT_STATUSES.filter((status) => !PENDING.has(status)),
);

/** An email with one recipient has that recipient's status: known before the write. */
export const statusKnown = (record: AttemptRecord) =>
  record.recipientCount === 1 && record.updates.length === 1;

/** The recipients' outcome rows (`v`), by column, for the statements that record attempts. */
export function outcomeValues(records: readonly AttemptRecord[]) {
  return records.flatMap((record) =>
    record.updates.map((change) => {
      const final = FINAL.has(change.status);
      return {
        id: change.id,
        worker: record.workerId,
        status: change.status,
        retry_at: final ? null : (change.retryAt ?? null),
        attempted_at: record.attemptedAt,
        response: change.response,
        response_code: change.responseCode,
        now: record.now,
        completed_at: final ? record.now : null,
        counted: change.counted === false ? 0 : 1,
        wait_reason: final ? null : (change.waitReason ?? null),
        email_id: record.emailId,
        email_status: statusKnown(record) ? summarizeStatus([change.status]) : null,
      };
    }),
  );
}

/** What an attempt of one of `email`'s jobs came to: each recipient's update. */
export function attemptOutcome(
  workerId: string,
  email: Pick<EmailRecord, 'id' | 'projectId' | 'recipientCount'>,
  attemptedAt: Date,
  now: Date,
  updates: AttemptOutcome['updates'],
): AttemptOutcome {
  return {
    workerId,
    emailId: email.id,
    projectId: email.projectId,
    recipientCount: email.recipientCount,
    attemptedAt: attemptedAt.toISOString(),
    now: now.toISOString(),
    updates,
  };
}
