import { type Kysely, sql } from 'kysely';
import { idAt } from '../../lib/ids.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import type { Database } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';

/** A recipient a token named, with what its events carry. */
export interface EngagementTarget {
  recipientId: string;
  projectId: string;
  emailId: string;
  address: string;
  /** When its server accepted the message (null while still being sent). */
  completedAt: string | null;
  /** A broadcast's copy: the broadcast and the contact it went to (null for any other email). */
  broadcastId: string | null;
  contactId: string | null;
  email: {
    id: string;
    from: string;
    to: string[];
    subject: string;
    templateId: string | null;
    templateVersion: number | null;
    tags: Record<string, string>;
    messageId: string;
  };
}

/** Counters after an open, a click or an unsubscribe was counted. */
export interface Counts {
  total: number;
  human: number;
  automated: number;
}

/** The engagement module's table (recipient_engagement), and the reads its public routes make. */
export function createEngagementRepo(db: Kysely<Database>) {
  return {
    /**
     * Retention: the per-recipient counters of emails accepted before `cutoff` (the daily numbers stay; the
     * emails' tracking settings and links go with emails/tracking.repo.ts).
     */
    pruneTargets(cutoff: Date): PruneTarget[] {
      const before = idAt('msg', cutoff);
      return [pruneTarget(db, 'recipient_engagement', 'recipient_id', sql<boolean>`email_id < ${before}`)];
    },

    /** The recipient and its email's event fields (a read of the emails module's tables). */
    async target(recipientId: string): Promise<EngagementTarget | undefined> {
      const row = await db
        .selectFrom('email_recipients as r')
        .innerJoin('emails as e', 'e.id', 'r.email_id')
        .select([
          'r.id',
          'r.project_id',
          'r.email_id',
          'r.address',
          'r.completed_at',
          'e.from_address',
          'e.to_addresses',
          'e.subject',
          'e.template_id',
          'e.template_version',
          'e.tags',
          'e.message_id',
          'e.broadcast_id',
          'e.contact_id',
        ])
        .where('r.id', '=', recipientId)
        .executeTakeFirst();
      if (!row) return undefined;
      return {
        recipientId: row.id,
        projectId: row.project_id,
        emailId: row.email_id,
        address: row.address,
        completedAt: row.completed_at,
        broadcastId: row.broadcast_id,
        contactId: row.contact_id,
        email: {
          id: row.email_id,
          from: row.from_address,
          to: JSON.parse(row.to_addresses) as string[],
          subject: row.subject,
          templateId: row.template_id,
          templateVersion: row.template_version === null ? null : Number(row.template_version),
          tags: JSON.parse(row.tags) as Record<string, string>,
          messageId: row.message_id,
        },
      };
    },

    /**
     * Counts an open, in `transaction`; the counters after it say whether it was the first (of any kind, of
     * people, of machines).
     */
    countOpen: (target: EngagementTarget, automated: boolean, at: string, transaction: Transaction) =>
      count(target, 'open', automated, at, transaction),

    countClick: (target: EngagementTarget, automated: boolean, at: string, transaction: Transaction) =>
      count(target, 'click', automated, at, transaction),

    /** Counts an unsubscribe, in `transaction`; `total` is 1 the first time. */
    async countUnsubscribe(target: EngagementTarget, at: string, transaction: Transaction): Promise<number> {
      const row = await transaction.db
        .insertInto('recipient_engagement')
        .values({ ...key(target), unsubscribe_count: 1, unsubscribed_at: at })
        .onConflict((conflict) =>
          conflict.column('recipient_id').doUpdateSet((eb) => ({
            unsubscribe_count: eb('recipient_engagement.unsubscribe_count', '+', 1),
            unsubscribed_at: eb.fn.coalesce(
              'recipient_engagement.unsubscribed_at',
              eb.ref('excluded.unsubscribed_at'),
            ),
          })),
        )
        .returning('unsubscribe_count')
        .executeTakeFirstOrThrow();
      return Number(row.unsubscribe_count);
    },
  };
}

const key = (target: EngagementTarget) => ({
  recipient_id: target.recipientId,
  project_id: target.projectId,
  email_id: target.emailId,
});

/**
 * One upsert: a concurrent first open (or click) of the same recipient is counted once as the first, since
 * the database serializes the two increments and each reads its own result.
 */
async function count(
  target: EngagementTarget,
  what: 'open' | 'click',
  automated: boolean,
  at: string,
  transaction: Transaction,
): Promise<Counts> {
  const db = transaction.db;
  const human = automated ? 0 : 1;
  const machine = automated ? 1 : 0;
  if (what === 'open') {
    const row = await db
      .insertInto('recipient_engagement')
      .values({
        ...key(target),
        open_count: 1,
        human_open_count: human,
        automated_open_count: machine,
        first_opened_at: at,
        last_opened_at: at,
      })
      .onConflict((conflict) =>
        conflict.column('recipient_id').doUpdateSet((eb) => ({
          open_count: eb('recipient_engagement.open_count', '+', 1),
          human_open_count: eb('recipient_engagement.human_open_count', '+', human),
          automated_open_count: eb('recipient_engagement.automated_open_count', '+', machine),
          first_opened_at: eb.fn.coalesce(
            'recipient_engagement.first_opened_at',
            eb.ref('excluded.first_opened_at'),
          ),
          last_opened_at: eb.ref('excluded.last_opened_at'),
        })),
      )
      .returning(['open_count', 'human_open_count', 'automated_open_count'])
      .executeTakeFirstOrThrow();
    return {
      total: Number(row.open_count),
      human: Number(row.human_open_count),
      automated: Number(row.automated_open_count),
    };
  }
  const row = await db
    .insertInto('recipient_engagement')
    .values({
      ...key(target),
      click_count: 1,
      human_click_count: human,
      automated_click_count: machine,
      first_clicked_at: at,
      last_clicked_at: at,
    })
    .onConflict((conflict) =>
      conflict.column('recipient_id').doUpdateSet((eb) => ({
        click_count: eb('recipient_engagement.click_count', '+', 1),
        human_click_count: eb('recipient_engagement.human_click_count', '+', human),
        automated_click_count: eb('recipient_engagement.automated_click_count', '+', machine),
        first_clicked_at: eb.fn.coalesce(
          'recipient_engagement.first_clicked_at',
          eb.ref('excluded.first_clicked_at'),
        ),
        last_clicked_at: eb.ref('excluded.last_clicked_at'),
      })),
    )
    .returning(['click_count', 'human_click_count', 'automated_click_count'])
    .executeTakeFirstOrThrow();
  return {
    total: Number(row.click_count),
    human: Number(row.human_click_count),
    automated: Number(row.automated_click_count),
  };
}

export type EngagementRepo = ReturnType<typeof createEngagementRepo>;
