import { type Kysely, sql } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { idAt } from '../../lib/ids.ts';
import { quotaUsed } from '../emails/fair-queue.repo.ts';

// What a project uses (Resend's `usage`), read from the tables that already count it: the daily limit's count
// (send_quota), the daily counts (email_stats_daily), received emails, and the audience's and domains' rows.
// Reads only: each table is written by its owner.

export interface UsageCounts {
  /** Recipients counted against SEND_DAILY_LIMIT today. */
  quotaToday: number;
  /** `email.sent` events of today and of the month so far (the daily counts). */
  sentToday: number;
  sentThisMonth: number;
  /** Emails received today and this month (as long as RETENTION keeps them). */
  receivedToday: number;
  receivedThisMonth: number;
  contacts: number;
  segments: number;
  broadcasts: number;
  domains: number;
}

const countOf = async (query: { executeTakeFirst(): Promise<{ n: string | number } | undefined> }) =>
  Number((await query.executeTakeFirst())?.n ?? 0);

export function createUsageRepo(db: Kysely<Database>) {
  const rowsOf = (table: 'contacts' | 'segments' | 'broadcasts' | 'domains', projectId: string) =>
    countOf(
      db
        .selectFrom(table)
        .select(sql<string | number>`count(*)`.as('n'))
        .where('project_id', '=', projectId),
    );
  const sentSince = (projectId: string, day: string) =>
    countOf(
      db
        .selectFrom('email_stats_daily')
        .select(sql<string | number>`coalesce(sum(count), 0)`.as('n'))
        .where('project_id', '=', projectId)
        .where('tag', '=', '')
        .where('metric', '=', 'sent')
        .where('day', '>=', day),
    );
  // Received ids are time-sortable: "since" is a range of the (project_id, id) index.
  const receivedSince = (projectId: string, since: Date) =>
    countOf(
      db
        .selectFrom('received_emails')
        .select(sql<string | number>`count(*)`.as('n'))
        .where('project_id', '=', projectId)
        .where('id', '>=', idAt('rcv', since)),
    );

  return {
    /** The counts of `projectId` for the UTC day `today` (YYYY-MM-DD) and the month it is in. */
    async counts(projectId: string, today: string): Promise<UsageCounts> {
      const month = `${today.slice(0, 7)}-01`;
      const [quotaToday, sentToday, sentThisMonth, receivedToday, receivedThisMonth] = await Promise.all([
        quotaUsed(db, projectId, today),
        sentSince(projectId, today),
        sentSince(projectId, month),
        receivedSince(projectId, new Date(`${today}T00:00:00.000Z`)),
        receivedSince(projectId, new Date(`${month}T00:00:00.000Z`)),
      ]);
      const [contacts, segments, broadcasts, domains] = await Promise.all([
        rowsOf('contacts', projectId),
        rowsOf('segments', projectId),
        rowsOf('broadcasts', projectId),
        rowsOf('domains', projectId),
      ]);
      return {
        quotaToday,
        sentToday,
        sentThisMonth,
        receivedToday,
        receivedThisMonth,
        contacts,
        segments,
        broadcasts,
        domains,
      };
    },
  };
}

export type UsageRepo = ReturnType<typeof createUsageRepo>;
