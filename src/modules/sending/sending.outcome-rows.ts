import type { CompiledQuery } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { RECIPIENT_STATUSES, type RecipientStatus } from '../../db/schema.ts';
import { statement, valuesTable } from '../../db/sql-text.ts';
import type { AttemptOutcome, AttemptRecord } from '../emails/recipients.ts';
import type { EmailRecord } from '../emails/emails.repo.ts';
import { PENDING, summarizeStatus } from '../emails/status.ts';

// The rows of values (`v`) the sending queue's outcome statements read (sending.queue.ts): one per recipient
// whose attempt ended, by column; and those statements' texts, the engines' side by side.

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

/**
 * Every recipient's new state in one UPDATE, however many attempts finished together; first a write (see
 * fair-queue.repo.ts on SQLite lock upgrades). RETURNING names the rows whose lease still held.
 */
export const recordRecipients = (also = '') => `UPDATE email_recipients SET status = v.status,
    attempts = email_recipients.attempts + v.counted, ready_seq = NULL, wait_until = v.retry_at,
    next_attempt_at = v.retry_at, locked_until = NULL, locked_by = NULL, last_attempt_at = v.attempted_at,
    last_response = v.response, last_response_code = v.response_code, updated_at = v.now,
    completed_at = v.completed_at, wait_reason = v.wait_reason
  FROM v WHERE email_recipients.id = v.id AND email_recipients.locked_by = v.worker
    AND email_recipients.ready_seq IS NOT NULL${also}
  RETURNING email_recipients.id`;
const RECORD_RECIPIENTS = recordRecipients();

/** The emails whose status is known before the write (statusKnown), each if its recipient's lease held. */
export const RECORD_KNOWN_EMAILS = `emails_updated AS (UPDATE emails SET status = v.email_status, updated_at = v.now
    FROM v JOIN updated ON updated.id = v.id WHERE emails.id = v.email_id AND v.email_status IS NOT NULL)`;

/**
 * The recipients' outcome write, per engine. PostgreSQL: the emails whose status is known before the write
 * (statusKnown) move in the same statement, each only if its recipient's lease still held: one round trip
 * fewer per batch. SQLite cannot write in a WITH: the recipients alone, their emails after (recordEmails).
 */
export const RECORD_RECIPIENT_STATES: Record<
  Engine,
  (values: ReturnType<typeof outcomeValues>) => CompiledQuery
> = {
  postgres(values) {
    const update = statement('postgres');
    const v = valuesTable('v', RECIPIENT_OUTCOME_COLUMNS, values, update.param, COUNTS);
    return update.compile(`WITH ${v}, updated AS (${RECORD_RECIPIENTS}), ${RECORD_KNOWN_EMAILS}
      SELECT id FROM updated`);
  },
  sqlite(values) {
    const update = statement('sqlite');
    const columns = RECIPIENT_OUTCOME_COLUMNS.slice(0, -2);
    const v = valuesTable('v', columns, values, update.param, COUNTS);
    return update.compile(`WITH ${v} ${RECORD_RECIPIENTS}`);
  },
};
