import type { Kysely } from 'kysely';
import type { Database, RecipientStatus } from '../../db/schema.ts';
import { type EmailRecord, toEmailRecord } from './emails.repo.ts';
import { summarizeStatus } from './status.ts';

// What reports received after a message left (DSNs, complaints) do to its recipients. The emails module owns
// these rows; the inbound worker reads and moves them only through here.

/** A recipient a report may be about, with its email (for the event's data). */
export interface ReportedRecipient {
  id: string;
  address: string;
  status: RecipientStatus;
  delayReportedAt: string | null;
  email: EmailRecord;
}

/** What a report says happened to a recipient after the next hop accepted it. */
export type ReportedOutcome = 'bounced' | 'delivered' | 'complained' | 'delayed';

/**
 * The statuses each outcome may move a recipient from. Reports are about mail already handed on, so only
 * `sent` (accepted by a relay) and `delivered` (accepted by the final server) recipients move: a bounce or a
 * complaint can follow a delivery, a delivery only a hand-off. Anything else is a late or repeated report.
 */
const MOVES_FROM: Record<ReportedOutcome, readonly RecipientStatus[]> = {
  bounced: ['sent', 'delivered'],
  complained: ['sent', 'delivered'],
  delivered: ['sent'],
  // A delay changes no status (the relay is still trying): it is only said once per waiting streak.
  delayed: ['sent'],
};

export function createReportedRecipientRepo(db: Kysely<Database>) {
  const withEmails = async (
    rows: Array<{
      id: string;
      email_id: string;
      address: string;
      status: RecipientStatus;
      delay_reported_at: string | null;
    }>,
  ): Promise<ReportedRecipient[]> => {
    if (rows.length === 0) return [];
    const emails = await db
      .selectFrom('emails')
      .selectAll()
      .where('id', 'in', [...new Set(rows.map((row) => row.email_id))])
      .execute();
    const byId = new Map(emails.map((row) => [row.id, toEmailRecord(row)]));
    return rows.flatMap((row) => {
      const email = byId.get(row.email_id);
      return email
        ? [
            {
              id: row.id,
              address: row.address,
              status: row.status,
              delayReportedAt: row.delay_reported_at,
              email,
            },
          ]
        : [];
    });
  };

  const recipientColumns = ['id', 'email_id', 'address', 'status', 'delay_reported_at'] as const;

  return {
    async findById(recipientId: string): Promise<ReportedRecipient | undefined> {
      const rows = await db
        .selectFrom('email_recipients')
        .select([...recipientColumns])
        .where('id', '=', recipientId)
        .execute();
      return (await withEmails(rows))[0];
    },

    /** The email with this Message-ID (`<…>`), or with this id (a DSN's ENVID), if any. */
    async findEmail(reference: { messageId?: string | null; emailId?: string | null }) {
      if (!reference.messageId && !reference.emailId) return undefined;
      const row = await db
        .selectFrom('emails')
        .selectAll()
        .$if(Boolean(reference.messageId), (query) => query.where('message_id', '=', reference.messageId!))
        .$if(!reference.messageId, (query) => query.where('id', '=', reference.emailId!))
        .executeTakeFirst();
      return row ? toEmailRecord(row) : undefined;
    },

    /** The recipients of an email, to find the one a report names by its address. */
    async recipientsOf(emailId: string): Promise<ReportedRecipient[]> {
      const rows = await db
        .selectFrom('email_recipients')
        .select([...recipientColumns])
        .where('email_id', '=', emailId)
        .orderBy('position')
        .execute();
      return withEmails(rows);
    },

    /**
     * Applies a report's outcome if the recipient is still where the outcome may move it from (checked in
     * the statement itself, so two reports racing move it once), and refreshes its email's status. Run on
     * the caller's transaction, which also emits the event. True when something changed.
     */
    async apply(
      recipient: ReportedRecipient,
      outcome: ReportedOutcome,
      details: { response: string | null; now: string },
    ): Promise<boolean> {
      const from = [...MOVES_FROM[outcome]];
      if (outcome === 'delayed') {
        const result = await db
          .updateTable('email_recipients')
          .set({ delay_reported_at: details.now, updated_at: details.now })
          .where('id', '=', recipient.id)
          .where('status', 'in', from)
          .where('delay_reported_at', 'is', null)
          .executeTakeFirst();
        return Number(result.numUpdatedRows) > 0;
      }
      const result = await db
        .updateTable('email_recipients')
        .set({
          status: outcome,
          delay_reported_at: null,
          updated_at: details.now,
          ...(details.response !== null ? { last_response: details.response } : {}),
        })
        .where('id', '=', recipient.id)
        .where('status', 'in', from)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) return false;
      const statuses = await db
        .selectFrom('email_recipients')
        .select('status')
        .where('email_id', '=', recipient.email.id)
        .execute();
      await db
        .updateTable('emails')
        .set({ status: summarizeStatus(statuses.map((row) => row.status)), updated_at: details.now })
        .where('id', '=', recipient.email.id)
        .execute();
      return true;
    },
  };
}

export type ReportedRecipientRepo = ReturnType<typeof createReportedRecipientRepo>;
