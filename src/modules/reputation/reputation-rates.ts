import type { Config } from '../../config.ts';
import type {
  ReputationLevel,
  ReputationReason,
  ReputationStateRecord,
  ScopeCount,
} from './reputation.repo.ts';

// The breaker's arithmetic, without a database: a scope's counts over the window (less what came before a
// resume) and what its rates say.

export type ReputationSettings = Config['reputation'];

export interface WindowCounts {
  sent: number;
  bounced: number;
  bouncedHard: number;
  complained: number;
}

export interface Judgement {
  level: ReputationLevel;
  /** The rate that decided it (`hard_bounce_rate` or `complaint_rate`); null when `ok`. */
  reason: ReputationReason | null;
  /** Hard bounces per sent or bounced message; null below the minimum volume. */
  hardBounceRate: number | null;
  /** Complaints per sent message; null below the minimum volume. */
  complaintRate: number | null;
}

const DAY_MS = 86_400_000;
export const dayOf = (time: Date): string => time.toISOString().slice(0, 10);

/** The window's first day: `windowDays` UTC days, today the last. */
export const windowStart = (now: Date, windowDays: number): string =>
  dayOf(new Date(now.getTime() - (windowDays - 1) * DAY_MS));

export const zeroCounts = (): WindowCounts => ({ sent: 0, bounced: 0, bouncedHard: 0, complained: 0 });

const FIELD: Record<string, keyof WindowCounts> = {
  sent: 'sent',
  bounced: 'bounced',
  bounced_hard: 'bouncedHard',
  complained: 'complained',
};

/**
 * A scope's counts from `since` on, less what was counted before its last resume: the days before the
 * resume's day are left out, and that day's counts then taken off.
 */
export function windowCounts(
  counts: readonly ScopeCount[],
  since: string,
  baseline: ReputationStateRecord['baseline'],
): WindowCounts {
  const from = baseline && baseline.day > since ? baseline.day : since;
  const total = zeroCounts();
  for (const count of counts) {
    const field = FIELD[count.metric];
    if (field && count.day >= from) total[field] += count.count;
  }
  if (baseline && baseline.day >= since) {
    total.sent = Math.max(0, total.sent - baseline.sent);
    total.bounced = Math.max(0, total.bounced - baseline.bounced);
    total.bouncedHard = Math.max(0, total.bouncedHard - baseline.bouncedHard);
    total.complained = Math.max(0, total.complained - baseline.complained);
  }
  return total;
}

/** What a scope's counts say against the thresholds; a rate below its minimum volume says nothing. */
export function judge(counts: WindowCounts, settings: ReputationSettings): Judgement {
  const attempted = counts.sent + counts.bounced;
  const hardBounceRate = attempted >= settings.minBounceVolume ? counts.bouncedHard / attempted : null;
  const complaintRate = counts.sent >= settings.minComplaintVolume ? counts.complained / counts.sent : null;
  // Each rate's level, and how far past its limit it is: the worse one is the reason.
  const rated = [
    {
      reason: 'hard_bounce_rate',
      rate: hardBounceRate,
      warning: settings.hardBounceWarning,
      limit: settings.hardBounceLimit,
    },
    {
      reason: 'complaint_rate',
      rate: complaintRate,
      warning: settings.complaintWarning,
      limit: settings.complaintLimit,
    },
  ] as const;
  let level: ReputationLevel = 'ok';
  let reason: Judgement['reason'] = null;
  let worst = 0;
  for (const { reason: which, rate, warning, limit } of rated) {
    if (rate === null) continue;
    const found: ReputationLevel =
      rate >= limit && limit > 0 ? 'paused' : rate >= warning && warning > 0 ? 'warning' : 'ok';
    const severity = found === 'paused' ? 2 + rate / limit : found === 'warning' ? 1 + rate / limit : 0;
    if (severity > worst) {
      worst = severity;
      level = found;
      reason = which;
    }
  }
  return { level, reason, hardBounceRate, complaintRate };
}
