import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inTransaction, type Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { DomainError, invalidParam } from '../../lib/errors.ts';
import type { EventKind } from '../event-kinds/event-kinds.ts';
import type { EventService } from '../events/events.service.ts';
import {
  dayOf,
  judge,
  type Judgement,
  type ReputationSettings,
  type WindowCounts,
  windowCounts,
  windowStart,
  zeroCounts,
} from './reputation-rates.ts';
import type {
  ReputationLevel,
  ReputationRepo,
  ReputationStateRecord,
  ScopeCount,
} from './reputation.repo.ts';

// The reputation breaker (issue 38 item 4). Per project and per From domain, the hard-bounce and complaint
// rates over a rolling window of UTC days, read from the daily counts the events' transactions keep
// (email_stats_daily, with a `@from:<domain>` tag per domain): judging them reads a few rows per scope and
// day, never the emails. The workers judge every project each REPUTATION_CHECK_INTERVAL; a scope past a
// warning threshold moves to `warning` (`project.warning`), past a limit to `paused`
// (`project.sending_paused`), and stays paused until resumed (`project.sending_resumed`). A send reads only
// the state rows, kept in memory for at most a second (below).

/** What is being sent: a broadcast always stops at a pause, a transactional send only with pause_all_sending. */
export type SendKind = 'transactional' | 'broadcast';

/** The state rows of a project are read again after this long (a pause another process wrote is seen then). */
const STATE_CACHE_MS = 1000;

export interface ReputationDeps {
  db: Kysely<Database>;
  repo: ReputationRepo;
  events: Pick<EventService, 'emitIn'>;
  clock: Clock;
  settings: ReputationSettings;
}

/** What a resume writes, read before its transaction. */
export interface ResumePlan {
  projectId: string;
  now: string;
  scopes: Array<{ row: ReputationStateRecord; baseline: NonNullable<ReputationStateRecord['baseline']> }>;
}

/** One scope as the API shows it. */
export interface ReputationScopeView {
  domain: string | null;
  state: ReputationLevel;
  reason: string | null;
  /** What a send from it meets now: nothing, broadcasts refused, or every send refused. */
  holds: 'nothing' | 'broadcasts' | 'all';
  sent: number;
  bounced: number;
  bounced_hard: number;
  complained: number;
  hard_bounce_rate: number | null;
  complaint_rate: number | null;
  changed_at: string | null;
  resumed_at: string | null;
}

const scopeName = (domain: string) => (domain === '' ? 'the project' : `the domain ${domain}`);
const percent = (rate: number | null) => (rate === null ? 'n/a' : `${(rate * 100).toFixed(2)} %`);

export function createReputationService({ db, repo, events, clock, settings }: ReputationDeps) {
  const cache = new Map<string, { readAt: number; rows: Promise<Map<string, ReputationStateRecord>> }>();

  function statesOf(projectId: string): Promise<Map<string, ReputationStateRecord>> {
    const cached = cache.get(projectId);
    if (cached && performance.now() - cached.readAt < STATE_CACHE_MS) return cached.rows;
    const rows = repo.states(projectId).then((found) => new Map(found.map((row) => [row.domain, row])));
    // Shared by the sends that miss together; a failed read is not kept.
    cache.set(projectId, { readAt: performance.now(), rows });
    rows.catch(() => cache.delete(projectId));
    return rows;
  }

  const pausesAll = (project: ReputationStateRecord | undefined): boolean =>
    project?.pauseAllSending ?? settings.pauseAllSending;

  const thresholds = () => ({
    window_days: settings.windowDays,
    hard_bounce_warning: settings.hardBounceWarning,
    hard_bounce_limit: settings.hardBounceLimit,
    complaint_warning: settings.complaintWarning,
    complaint_limit: settings.complaintLimit,
    min_bounce_volume: settings.minBounceVolume,
    min_complaint_volume: settings.minComplaintVolume,
  });

  /** What a state event carries. */
  function eventData(
    projectId: string,
    domain: string,
    state: ReputationLevel,
    previous: ReputationLevel,
    judgement: Pick<Judgement, 'reason' | 'hardBounceRate' | 'complaintRate'>,
    counts: WindowCounts,
    extra: Record<string, unknown> = {},
  ): Record<string, unknown> {
    return {
      project_id: projectId,
      domain: domain === '' ? null : domain,
      state,
      previous_state: previous,
      reason: judgement.reason,
      hard_bounce_rate: judgement.hardBounceRate,
      complaint_rate: judgement.complaintRate,
      sent: counts.sent,
      bounced: counts.bounced,
      bounced_hard: counts.bouncedHard,
      complained: counts.complained,
      thresholds: thresholds(),
      ...extra,
    };
  }

  /** Every scope with counts or a row, with its counts over the window. */
  function scopes(counts: readonly ScopeCount[], rows: readonly ReputationStateRecord[], since: string) {
    const byScope = new Map<
      string,
      { projectId: string; domain: string; counts: ScopeCount[]; row?: ReputationStateRecord }
    >();
    const scopeOf = (projectId: string, domain: string) => {
      const key = `${projectId}\u0000${domain}`;
      let scope = byScope.get(key);
      if (!scope) byScope.set(key, (scope = { projectId, domain, counts: [] }));
      return scope;
    };
    for (const count of counts) scopeOf(count.projectId, count.domain).counts.push(count);
    for (const row of rows) scopeOf(row.projectId, row.domain).row = row;
    return [...byScope.values()].map((scope) => ({
      ...scope,
      window: windowCounts(scope.counts, since, scope.row?.baseline ?? null),
    }));
  }

  /** Moves a scope to what its rates say, with its event, in one transaction; whether it moved. */
  async function move(
    scope: {
      projectId: string;
      domain: string;
      row?: ReputationStateRecord | undefined;
      window: WindowCounts;
    },
    judgement: Judgement,
    now: string,
    /** The project's own row (what a pause holds), as read with the scope's. */
    project: ReputationStateRecord | undefined,
  ): Promise<boolean> {
    const previous = scope.row?.state ?? 'ok';
    const kind: EventKind | undefined =
      judgement.level === 'paused'
        ? 'project.sending_paused'
        : judgement.level === 'warning' && previous === 'ok'
          ? 'project.warning'
          : undefined;
    const moved = await inTransaction(db, async (transaction) => {
      const changed = await repo.move(
        {
          projectId: scope.projectId,
          domain: scope.domain,
          // A pause is left only by a resume; another process may have moved the row since it was read.
          from: [previous],
          to: judgement.level,
          reason: judgement.reason,
          hardBounceRate: judgement.hardBounceRate,
          complaintRate: judgement.complaintRate,
          now,
        },
        transaction,
      );
      if (changed && kind) {
        const data = eventData(
          scope.projectId,
          scope.domain,
          judgement.level,
          previous,
          judgement,
          scope.window,
          {
            holds: judgement.level === 'paused' ? (pausesAll(project) ? 'all' : 'broadcasts') : 'nothing',
          },
        );
        await events.emitIn(transaction, [{ projectId: scope.projectId, kind, data }]);
      }
      return changed;
    });
    if (moved) cache.delete(scope.projectId);
    return moved;
  }

  /**
   * Judges every project's scopes on the counts of the window and moves those whose level changed (a paused
   * one stays paused). Returns how many moved. The workers call it every REPUTATION_CHECK_INTERVAL.
   */
  async function evaluate(): Promise<number> {
    const now = clock.now();
    const since = windowStart(now, settings.windowDays);
    const [counts, rows] = await Promise.all([repo.counts(since), repo.states()]);
    const projects = new Map(rows.filter((row) => row.domain === '').map((row) => [row.projectId, row]));
    let moved = 0;
    for (const scope of scopes(counts, rows, since)) {
      const previous = scope.row?.state ?? 'ok';
      if (previous === 'paused') continue;
      const judgement = judge(scope.window, settings);
      if (judgement.level === previous) continue;
      if (await move(scope, judgement, now.toISOString(), projects.get(scope.projectId))) moved += 1;
    }
    return moved;
  }

  /** Why a send is refused: a 403 that names the scope, the rate and how to resume. */
  function pausedError(row: ReputationStateRecord, param: string | undefined): DomainError {
    const rate =
      row.reason === 'complaint_rate'
        ? `its complaint rate over the last ${settings.windowDays} days is ${percent(row.complaintRate)}, past the ${percent(settings.complaintLimit)} limit`
        : `its hard-bounce rate over the last ${settings.windowDays} days is ${percent(row.hardBounceRate)}, past the ${percent(settings.hardBounceLimit)} limit`;
    return new DomainError(
      'forbidden',
      'sending_paused',
      `Sending is paused for ${scopeName(row.domain)} since ${row.changedAt}: ${rate}. A full_access key resumes it (POST /v1/reputation/resume), or the operator (postwire reputation resume); GET /v1/reputation shows the rates.`,
      param,
    );
  }

  const service = {
    evaluate,

    /**
     * Refuses (403 `sending_paused`) a send from `domain` while the project or that domain is paused: a
     * broadcast always, a transactional send when the project's pause holds all sending. Reads the state rows
     * kept in memory (at most a second old), so it costs a send nothing but a map lookup most of the time.
     */
    async assertSendingAllowed(
      projectId: string,
      domain: string,
      kind: SendKind,
      param?: string,
    ): Promise<void> {
      const rows = await statesOf(projectId);
      if (rows.size === 0) return;
      const project = rows.get('');
      if (kind === 'transactional' && !pausesAll(project)) return;
      for (const row of [project, rows.get(domain.toLowerCase())]) {
        if (row?.state === 'paused') throw pausedError(row, param);
      }
    },

    /** The project's scopes now: their state and, counted now, their rates over the window. */
    async view(projectId: string) {
      const now = clock.now();
      const since = windowStart(now, settings.windowDays);
      const [counts, rows] = await Promise.all([repo.counts(since, projectId), repo.states(projectId)]);
      const project = rows.find((row) => row.domain === '');
      const all = pausesAll(project);
      const views: ReputationScopeView[] = scopes(counts, rows, since).map((scope) => {
        const judgement = judge(scope.window, settings);
        const state = scope.row?.state ?? 'ok';
        return {
          domain: scope.domain === '' ? null : scope.domain,
          state,
          reason: scope.row?.reason ?? null,
          holds: state === 'paused' ? (all ? 'all' : 'broadcasts') : 'nothing',
          sent: scope.window.sent,
          bounced: scope.window.bounced,
          bounced_hard: scope.window.bouncedHard,
          complained: scope.window.complained,
          hard_bounce_rate: judgement.hardBounceRate,
          complaint_rate: judgement.complaintRate,
          changed_at: scope.row?.changedAt ?? null,
          resumed_at: scope.row?.resumedAt ?? null,
        };
      });
      const projectView = views.find((view) => view.domain === null) ?? {
        ...emptyScope(),
      };
      const domains = views
        .filter((view) => view.domain !== null)
        .sort((a, b) => (a.domain! < b.domain! ? -1 : 1));
      return {
        object: 'reputation' as const,
        since,
        sending_paused: views.some((view) => view.state === 'paused'),
        pause_all_sending: all,
        project: projectView,
        domains,
        thresholds: thresholds(),
      };
    },

    /**
     * What a resume of a project's paused scopes (only `domain`'s when given) writes, read before its
     * transaction: each scope with today's counts so far, which the window after the resume leaves out. 409
     * `not_paused` when nothing is paused.
     */
    async prepareResume(projectId: string, domain: string | undefined): Promise<ResumePlan> {
      const now = clock.now();
      const today = dayOf(now);
      const wanted = domain?.toLowerCase();
      const [counts, rows] = await Promise.all([repo.counts(today, projectId), repo.states(projectId)]);
      const paused = rows.filter(
        (row) => row.state === 'paused' && (wanted === undefined || row.domain === wanted),
      );
      if (paused.length === 0) {
        throw new DomainError(
          'conflict',
          'not_paused',
          domain === undefined
            ? 'Sending is not paused for this project or any of its domains.'
            : `Sending is not paused for ${domain}.`,
          domain === undefined ? undefined : 'domain',
        );
      }
      return {
        projectId,
        now: now.toISOString(),
        scopes: paused.map((row) => ({
          row,
          baseline: {
            day: today,
            ...windowCounts(
              counts.filter((count) => count.domain === row.domain),
              today,
              null,
            ),
          },
        })),
      };
    },

    /** Resumes what `prepareResume` found, each scope with `project.sending_resumed`; the scopes resumed. */
    async resume(
      transaction: Transaction,
      plan: ResumePlan,
      by: 'api' | 'operator',
    ): Promise<Array<string | null>> {
      const { projectId, now } = plan;
      const resumed: Array<string | null> = [];
      for (const { row, baseline } of plan.scopes) {
        if (!(await repo.resume(projectId, row.domain, baseline, now, transaction))) continue;
        resumed.push(row.domain === '' ? null : row.domain);
        const data = eventData(projectId, row.domain, 'ok', 'paused', row, zeroCounts(), {
          holds: 'nothing',
          resumed_by: by,
        });
        await events.emitIn(transaction, [{ projectId, kind: 'project.sending_resumed', data }]);
      }
      transaction.afterCommit(() => cache.delete(projectId));
      return resumed;
    },

    /** The operator's resume (`postwire reputation resume`): prepared, then written in a transaction of its own. */
    async resumeAsOperator(projectId: string, domain: string | undefined): Promise<Array<string | null>> {
      const plan = await service.prepareResume(projectId, domain);
      return inTransaction(db, (transaction) => service.resume(transaction, plan, 'operator'));
    },

    /** Whether a pause holds every send (true), only broadcasts (false) or what the configuration says (null). */
    async setPauseAllSending(
      transaction: Transaction,
      projectId: string,
      value: boolean | null,
    ): Promise<void> {
      if (value !== null && typeof value !== 'boolean')
        throw invalidParam('pause_all_sending', 'pause_all_sending must be true, false or null.');
      await repo.setPauseAllSending(projectId, value, clock.now().toISOString(), transaction);
      transaction.afterCommit(() => cache.delete(projectId));
    },

    /** Starts judging every `REPUTATION_CHECK_INTERVAL` (the workers); `stop` ends it. */
    start(logger: { error(object: unknown, message: string): void }) {
      let timer: NodeJS.Timeout | undefined;
      let running: Promise<unknown> | undefined;
      let stopped = false;
      const tick = () => {
        running = evaluate()
          .catch((error: unknown) => logger.error({ err: error }, 'reputation: the check failed'))
          .finally(() => {
            if (!stopped) timer = setTimeout(tick, settings.checkIntervalMs).unref();
          });
      };
      timer = setTimeout(tick, settings.checkIntervalMs).unref();
      return {
        async stop() {
          stopped = true;
          clearTimeout(timer);
          await running;
        },
      };
    },
  };
  return service;

  function emptyScope(): ReputationScopeView {
    const zero = zeroCounts();
    return {
      domain: null,
      state: 'ok',
      reason: null,
      holds: 'nothing',
      sent: zero.sent,
      bounced: zero.bounced,
      bounced_hard: zero.bouncedHard,
      complained: zero.complained,
      hard_bounce_rate: null,
      complaint_rate: null,
      changed_at: null,
      resumed_at: null,
    };
  }
}

export type ReputationService = ReturnType<typeof createReputationService>;
