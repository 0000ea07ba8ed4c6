import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import type { Usage, UsageService } from '../usage/usage.service.ts';
import { hide } from './resend-routing.ts';

// Resend's `usage.get` over what Postwire counts (docs/api/resend.md): a limit Postwire does not have is null,
// even where Resend's type says a number (a plan's monthly, contact or automation quota); what Postwire does
// not have at all (AI credits, automations) is used 0.

const seconds = (ms: number) => `${ms / 1000}s`;

export const toResendUsage = (usage: Usage) => ({
  object: 'usage' as const,
  emails: {
    daily: {
      used: usage.quotaToday,
      limit: usage.dailyLimit,
      sent: usage.sentToday,
      received: usage.receivedToday,
      resets_at: usage.dayEndsAt,
    },
    monthly: {
      used: usage.sentThisMonth,
      limit: null,
      sent: usage.sentThisMonth,
      received: usage.receivedThisMonth,
      resets_at: usage.monthEndsAt,
    },
  },
  contacts: { used: usage.contacts, limit: null },
  segments: { used: usage.segments, limit: null },
  broadcasts: { used: usage.broadcasts, limit: null },
  ai_credits: { used: 0, limit: null, next_increase_at: null },
  automation_runs: { used: 0, limit: null, resets_at: usage.monthEndsAt },
  domains: { used: usage.domains, limit: null },
  rate_limit: usage.rateLimit && {
    limit: usage.rateLimit.limit,
    duration: seconds(usage.rateLimit.windowMs),
  },
});

export function registerResendUsageRoutes(server: FastifyInstance, { usage }: { usage: UsageService }): void {
  server.get('/usage', { config: { permission: 'read_only' }, schema: hide }, async (request) =>
    toResendUsage(await usage.get(projectOf(request))),
  );
}
