import type { Kysely } from 'kysely';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { FROM_DOMAIN_TAG, REPUTATION_METRICS } from '../stats/stats.repo.ts';

// The reputation breaker's reads and writes: its state rows (reputation_states, written here only) and the
// daily counts it judges them on (email_stats_daily, written by the events' transactions, read here).

export type ReputationLevel = 'ok' | 'warning' | 'paused';
/** The rate that moved a scope: hard bounces per sent or bounced message, or complaints per sent message. */
export type ReputationReason = 'hard_bounce_rate' | 'complaint_rate';

/** A project's ('' domain) or a sending domain's state. */
export interface ReputationStateRecord {
  projectId: string;
  /** '' for the project as a whole. */
  domain: string;
  state: ReputationLevel;
  reason: ReputationReason | null;
  hardBounceRate: number | null;
  complaintRate: number | null;
  changedAt: string;
  resumedAt: string | null;
  /** The day of the last resume, and that day's counts then: the window after it counts what came later. */
  baseline: { day: string; sent: number; bounced: number; bouncedHard: number; complained: number } | null;
  /** The project's row only: whether a pause holds every send; null follows the configuration. */
  pauseAllSending: boolean | null;
}

/** One day's count of one metric for a project ('' domain) or one of its From domains. */
export interface ScopeCount {
  projectId: string;
  domain: string;
  day: string;
  metric: string;
  count: number;
}

function toRecord(row: Row<'reputation_states'>): ReputationStateRecord {
  return {
    projectId: row.project_id,
    domain: row.domain,
    state: row.state,
    reason: row.reason as ReputationReason | null,
    hardBounceRate: row.hard_bounce_rate === null ? null : Number(row.hard_bounce_rate),
    complaintRate: row.complaint_rate === null ? null : Number(row.complaint_rate),
    changedAt: row.changed_at,
    resumedAt: row.resumed_at,
    baseline:
      row.baseline_day === null
        ? null
        : {
            day: row.baseline_day,
            sent: Number(row.baseline_sent),
            bounced: Number(row.baseline_bounced),
            bouncedHard: Number(row.baseline_bounced_hard),
            complained: Number(row.baseline_complained),
          },
    pauseAllSending: row.pause_all_sending === null ? null : Boolean(row.pause_all_sending),
  };
}

const DOMAIN_TAG_PREFIX = `${FROM_DOMAIN_TAG}:`;

export function createReputationRepo(db: Kysely<Database>) {
  /** The row, made `ok` first if there is none, in `transaction`. */
  async function ensure(projectId: string, domain: string, now: string, transaction: Transaction) {
    await transaction.db
      .insertInto('reputation_states')
      .values({ project_id: projectId, domain, state: 'ok', changed_at: now })
      .onConflict((conflict) => conflict.columns(['project_id', 'domain']).doNothing())
      .execute();
  }

  return {
    /** The state rows of one project, or of every project. */
    async states(projectId?: string): Promise<ReputationStateRecord[]> {
      let query = db.selectFrom('reputation_states').selectAll();
      if (projectId !== undefined) query = query.where('project_id', '=', projectId);
      return (await query.execute()).map(toRecord);
    },

    /**
     * The counts the breaker judges, from `since` (a UTC day) on: the project-wide ones and each From
     * domain's, for one project (a primary-key range) or every project (the workers' check).
     */
    async counts(since: string, projectId?: string): Promise<ScopeCount[]> {
      let query = db
        .selectFrom('email_stats_daily')
        .select(['project_id', 'tag', 'day', 'metric', 'count'])
        .where('day', '>=', since)
        .where('metric', 'in', REPUTATION_METRICS)
        .where((eb) => eb.or([eb('tag', '=', ''), eb('tag', 'like', `${DOMAIN_TAG_PREFIX}%`)]));
      if (projectId !== undefined) query = query.where('project_id', '=', projectId);
      const rows = await query.execute();
      return rows.map((row) => ({
        projectId: row.project_id,
        domain: row.tag === '' ? '' : row.tag.slice(DOMAIN_TAG_PREFIX.length),
        day: row.day,
        metric: row.metric,
        count: Number(row.count),
      }));
    },

    /**
     * Moves a row from one of `from` to `to` (made `ok` first if there is none), with the rates that moved
     * it; whether it moved (another process may have moved it first).
     */
    async move(
      change: {
        projectId: string;
        domain: string;
        from: readonly ReputationLevel[];
        to: ReputationLevel;
        reason: ReputationReason | null;
        hardBounceRate: number | null;
        complaintRate: number | null;
        now: string;
      },
      transaction: Transaction,
    ): Promise<boolean> {
      await ensure(change.projectId, change.domain, change.now, transaction);
      const result = await transaction.db
        .updateTable('reputation_states')
        .set({
          state: change.to,
          reason: change.reason,
          hard_bounce_rate: change.hardBounceRate,
          complaint_rate: change.complaintRate,
          changed_at: change.now,
        })
        .where('project_id', '=', change.projectId)
        .where('domain', '=', change.domain)
        .where('state', 'in', change.from)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) === 1;
    },

    /** Resumes a paused row: `ok`, with the resume's day and that day's counts; whether it was paused. */
    async resume(
      projectId: string,
      domain: string,
      baseline: NonNullable<ReputationStateRecord['baseline']>,
      now: string,
      transaction: Transaction,
    ): Promise<boolean> {
      const result = await transaction.db
        .updateTable('reputation_states')
        .set({
          state: 'ok',
          reason: null,
          changed_at: now,
          resumed_at: now,
          baseline_day: baseline.day,
          baseline_sent: baseline.sent,
          baseline_bounced: baseline.bounced,
          baseline_bounced_hard: baseline.bouncedHard,
          baseline_complained: baseline.complained,
        })
        .where('project_id', '=', projectId)
        .where('domain', '=', domain)
        .where('state', '=', 'paused')
        .executeTakeFirst();
      return Number(result.numUpdatedRows) === 1;
    },

    /** The project's choice of what a pause holds (null: the configuration's). */
    async setPauseAllSending(
      projectId: string,
      value: boolean | null,
      now: string,
      transaction: Transaction,
    ): Promise<void> {
      await ensure(projectId, '', now, transaction);
      await transaction.db
        .updateTable('reputation_states')
        .set({ pause_all_sending: value })
        .where('project_id', '=', projectId)
        .where('domain', '=', '')
        .execute();
    },
  };
}

export type ReputationRepo = ReturnType<typeof createReputationRepo>;
