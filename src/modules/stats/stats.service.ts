import { type Clock, instantOf } from '../../lib/clock.ts';
import { invalidParam } from '../../lib/errors.ts';
import { METRICS, type Metric, type StatsRepo } from './stats.repo.ts';
import type { StatsQueryInput, StatsView } from './stats.schemas.ts';

const DAY_MS = 86_400_000;
/** The range when none is given: the last 30 UTC days, today included. */
const DEFAULT_DAYS = 30;
export const MAX_DAYS = 366;
/** Gmail's published spam-rate limit for bulk senders, and its recommendation. */
export const COMPLAINT_RATE_LIMIT = 0.003;
export const COMPLAINT_RATE_RECOMMENDED = 0.001;

export type Counts = Record<Metric, number>;

/** Every metric at 0. */
export const zero = (): Counts => Object.fromEntries(METRICS.map((metric) => [metric, 0])) as Counts;

const withRates = (counts: Counts) => ({
  ...counts,
  bounce_rate: counts.sent + counts.bounced > 0 ? counts.bounced / (counts.sent + counts.bounced) : null,
  complaint_rate: counts.sent > 0 ? counts.complained / counts.sent : null,
});

/** The UTC midnight (ms) of the day of a time filter's value; 422 naming `param` when it is none. */
export const dayOf = (value: string, param: string): number => {
  const time = instantOf(value).getTime();
  if (Number.isNaN(time))
    throw invalidParam(param, `${param} must be a date (YYYY-MM-DD) or an ISO 8601 date-time.`);
  return Math.floor(time / DAY_MS) * DAY_MS;
};

export function createStatsService({ repo, clock }: { repo: Pick<StatsRepo, 'readCounts'>; clock: Clock }) {
  return {
    async get(projectId: string, query: StatsQueryInput): Promise<StatsView> {
      const today = Math.floor(clock.now().getTime() / DAY_MS) * DAY_MS;
      const until = query.until !== undefined ? dayOf(query.until, 'until') : today;
      const since =
        query.since !== undefined ? dayOf(query.since, 'since') : until - (DEFAULT_DAYS - 1) * DAY_MS;
      if (since > until) throw invalidParam('since', 'since must not be after until.');
      if ((until - since) / DAY_MS + 1 > MAX_DAYS) {
        throw invalidParam('since', `At most ${MAX_DAYS} days at once.`);
      }
      const iso = (time: number) => new Date(time).toISOString().slice(0, 10);
      const rows = await repo.readCounts({
        projectId,
        tag: query.tag ?? '',
        since: iso(since),
        until: iso(until),
      });
      const days = new Map<string, Counts>();
      for (let time = since; time <= until; time += DAY_MS) days.set(iso(time), zero());
      const total = zero();
      for (const row of rows) {
        if (!(METRICS as readonly string[]).includes(row.metric)) continue;
        const metric = row.metric as Metric;
        const counts = days.get(row.day);
        if (counts) counts[metric] += row.count;
        total[metric] += row.count;
      }
      const totals = withRates(total);
      return {
        object: 'stats',
        since: iso(since),
        until: iso(until),
        tag: query.tag ?? null,
        total: totals,
        days: [...days.entries()].map(([date, counts]) => ({ date, ...withRates(counts) })),
        thresholds: {
          complaint_rate: COMPLAINT_RATE_LIMIT,
          complaint_rate_recommended: COMPLAINT_RATE_RECOMMENDED,
        },
        complaint_rate_ok: (totals.complaint_rate ?? 0) < COMPLAINT_RATE_LIMIT,
      };
    },
  };
}

export type StatsService = ReturnType<typeof createStatsService>;
