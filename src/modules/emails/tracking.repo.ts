import { CompiledQuery, type Kysely, sql } from 'kysely';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import type { Database } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Engine } from '../../db/connection.ts';
import { inChunks, inColumnOrder, placeholders, textsByShape } from '../../db/sql-text.ts';
import { idAt } from '../../lib/ids.ts';
import type { RecipientEngagement, TrackedEmail, TrackingSettings } from './tracking.ts';

// What each accepted email asked to track (email_tracking): written with the email, in its transaction, and
// read by the sending worker (to build tracked copies), the engagement module (a click's stored URL) and the
// email's view. Part of the email, so the emails module owns the table and the engagement module reads it.

const bool = (value: boolean | number) => Boolean(value);

const TRACKING_COLUMNS = [
  'email_id',
  'project_id',
  'opens',
  'clicks',
  'unsubscribe',
  'links',
  'created_at',
] as const;
/** Rows per INSERT: a broadcast's batch (fan-out.ts) in one statement. */
const TRACKING_INSERT_ROWS = 500;

export function createTrackingRepo(db: Kysely<Database>, engine: Engine) {
  // Written as SQL text once per number of rows: a batch of a broadcast's copies writes hundreds of rows,
  // whose building by the query builder cost more CPU than the statement's run.
  const insertText = textsByShape((rows) => {
    const slot = placeholders(engine);
    const row = () => `(${TRACKING_COLUMNS.map(slot).join(', ')})`;
    return `INSERT INTO email_tracking (${TRACKING_COLUMNS.join(', ')}) VALUES ${Array.from({ length: Number(rows) }, row).join(', ')}`;
  });
  return {
    /** Retention: the tracking settings and links of emails accepted before `cutoff` (their links then answer 404). */
    pruneTargets(cutoff: Date): PruneTarget[] {
      const before = idAt('msg', cutoff);
      return [pruneTarget(db, 'email_tracking', 'email_id', sql<boolean>`email_id < ${before}`)];
    },

    /** In `transaction`: the one the emails are written in. */
    async insertSettings(rows: readonly TrackedEmail[], transaction: Transaction): Promise<void> {
      await inChunks(rows, TRACKING_INSERT_ROWS, (chunk) =>
        transaction.db.executeQuery(
          CompiledQuery.raw(
            insertText(String(chunk.length)),
            chunk.flatMap((row) =>
              inColumnOrder(TRACKING_COLUMNS, {
                email_id: row.emailId,
                project_id: row.projectId,
                opens: row.settings.opens,
                clicks: row.settings.clicks,
                unsubscribe: row.settings.unsubscribe,
                links: JSON.stringify(row.settings.links),
                created_at: row.createdAt,
              }),
            ),
          ),
        ),
      );
    },

    /** The settings of these emails (those that asked for anything); in `transaction` when given. */
    async settingsFor(
      emailIds: readonly string[],
      transaction?: Transaction,
    ): Promise<Map<string, TrackingSettings>> {
      if (emailIds.length === 0) return new Map();
      const rows = await (transaction?.db ?? db)
        .selectFrom('email_tracking')
        .select(['email_id', 'opens', 'clicks', 'unsubscribe', 'links'])
        .where('email_id', 'in', [...emailIds])
        .execute();
      return new Map(
        rows.map((row) => [
          row.email_id,
          {
            opens: bool(row.opens),
            clicks: bool(row.clicks),
            unsubscribe: bool(row.unsubscribe),
            links: JSON.parse(row.links) as string[],
          },
        ]),
      );
    },

    /** The stored URL of link `index` of the recipient's email, if the email tracks clicks and has it. */
    async link(emailId: string, index: number): Promise<string | undefined> {
      const row = await db
        .selectFrom('email_tracking')
        .select(['links', 'clicks'])
        .where('email_id', '=', emailId)
        .executeTakeFirst();
      if (!row || !bool(row.clicks)) return undefined;
      const links = JSON.parse(row.links) as unknown;
      return Array.isArray(links) && typeof links[index] === 'string' ? links[index] : undefined;
    },

    /**
     * The engagement of an email's recipients, by recipient id, for its view (a read of the engagement
     * module's counters, which it writes as opens, clicks and unsubscribes arrive); in `transaction` when given.
     */
    async recipientEngagement(
      projectId: string,
      emailId: string,
      transaction?: Transaction,
    ): Promise<Map<string, RecipientEngagement>> {
      const rows = await (transaction?.db ?? db)
        .selectFrom('recipient_engagement')
        .select([
          'recipient_id',
          'open_count',
          'first_opened_at',
          'click_count',
          'first_clicked_at',
          'unsubscribed_at',
        ])
        .where('project_id', '=', projectId)
        .where('email_id', '=', emailId)
        .execute();
      return new Map(
        rows.map((row) => [
          row.recipient_id,
          {
            recipientId: row.recipient_id,
            openCount: Number(row.open_count),
            firstOpenedAt: row.first_opened_at,
            clickCount: Number(row.click_count),
            firstClickedAt: row.first_clicked_at,
            unsubscribedAt: row.unsubscribed_at,
          },
        ]),
      );
    },
  };
}

export type TrackingRepo = ReturnType<typeof createTrackingRepo>;
