import type { Clock } from '../../lib/clock.ts';
import { invalidParam } from '../../lib/errors.ts';
import { METRICS, type Metric, type StatsRepo } from '../stats/stats.repo.ts';
import { type Counts, dayOf, MAX_DAYS, zero } from '../stats/stats.service.ts';
import type { UsageCounts, UsageRepo } from './usage.repo.ts';

const DAY_MS = 86_400_000;

export type Granularity = 'daily' | 'weekly' | 'monthly';
export type { Counts };

/** The counts of a range of UTC days, in total and per period (a day, an ISO week from Monday, a month). */
export interface PeriodCounts {
  /** The first and last UTC day counted (YYYY-MM-DD). */
  since: string;
  until: string;
  total: Counts;
  periods: Array<{ start: string; counts: Counts }>;
}

const dayString = (time: number) => new Date(time).toISOString().slice(0, 10);

/** The first day of the period `day` (a UTC midnight, in ms) is in. */
function periodStart(day: number, granularity: Granularity): number {
  if (granularity === 'daily') return day;
  const date = new Date(day);
  if (granularity === 'monthly') return Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1);
  return day - ((date.getUTCDay() + 6) % 7) * DAY_MS;
}

/** What a project has used, with the limits Postwire has (Resend's `usage`, docs/api/resend.md). */
export interface Usage extends UsageCounts {
  /** SEND_DAILY_LIMIT; null when there is none (0). */
  dailyLimit: number | null;
  /** When today's and this month's counts start again (UTC). */
  dayEndsAt: string;
  monthEndsAt: string;
  /** POSTWIRE_RATE_LIMIT per key and its window; null when the limiter is off. */
  rateLimit: { limit: number; windowMs: number } | null;
}

export function createUsageService(deps: {
  repo: UsageRepo;
  stats: Pick<StatsRepo, 'readCounts'>;
  clock: Clock;
  dailyLimit: number;
  rateLimit: number;
  rateLimitWindowMs: number;
}) {
  return {
    async get(projectId: string): Promise<Usage> {
      const now = deps.clock.now();
      const today = now.toISOString().slice(0, 10);
      const counts = await deps.repo.counts(projectId, today);
      const year = now.getUTCFullYear();
      const month = now.getUTCMonth();
      return {
        ...counts,
        dailyLimit: deps.dailyLimit > 0 ? deps.dailyLimit : null,
        dayEndsAt: new Date(Date.UTC(year, month, now.getUTCDate() + 1)).toISOString(),
        monthEndsAt: new Date(Date.UTC(year, month + 1, 1)).toISOString(),
        rateLimit: deps.rateLimit > 0 ? { limit: deps.rateLimit, windowMs: deps.rateLimitWindowMs } : null,
      };
    },

    /**
     * The daily counts (GET /v1/stats's, every email of the project) of the UTC days from `since`'s to
     * `until`'s, summed per period. `until` defaults to today, `since` to `defaultDays` - 1 days before it.
     * `names`: the query parameters a refusal names (Resend's `start_date` and `end_date`).
     */
    async periods(
      projectId: string,
      query: { since?: string | undefined; until?: string | undefined; granularity: Granularity },
      defaultDays: number,
      names = { since: 'since', until: 'until' },
    ): Promise<PeriodCounts> {
      const today = Math.floor(deps.clock.now().getTime() / DAY_MS) * DAY_MS;
      const until = query.until !== undefined ? dayOf(query.until, names.until) : today;
      const since =
        query.since !== undefined ? dayOf(query.since, names.since) : until - (defaultDays - 1) * DAY_MS;
      if (since > until) throw invalidParam(names.since, `${names.since} must not be after ${names.until}.`);
      if ((until - since) / DAY_MS + 1 > MAX_DAYS)
        throw invalidParam(names.since, `At most ${MAX_DAYS} days at once.`);
      const rows = await deps.stats.readCounts({
        projectId,
        tag: '',
        since: dayString(since),
        until: dayString(until),
      });
      const periods = new Map<string, Counts>();
      for (let day = since; day <= until; day += DAY_MS) {
        // A period is shown from its first day in the range: the first week or month may start inside it.
        const start = dayString(Math.max(since, periodStart(day, query.granularity)));
        if (!periods.has(start)) periods.set(start, zero());
      }
      const total = zero();
      for (const row of rows) {
        if (!(METRICS as readonly string[]).includes(row.metric)) continue;
        const metric = row.metric as Metric;
        const day = Date.parse(`${row.day}T00:00:00.000Z`);
        const start = dayString(Math.max(since, periodStart(day, query.granularity)));
        periods.get(start)![metric] += row.count;
        total[metric] += row.count;
      }
      return {
        since: dayString(since),
        until: dayString(until),
        total,
        periods: [...periods.entries()].map(([start, counts]) => ({ start, counts })),
      };
    },
  };
}

export type UsageService = ReturnType<typeof createUsageService>;
