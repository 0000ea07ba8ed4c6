import type { Clock } from '../../lib/clock.ts';
import type { UsageCounts, UsageRepo } from './usage.repo.ts';

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
  };
}

export type UsageService = ReturnType<typeof createUsageService>;
