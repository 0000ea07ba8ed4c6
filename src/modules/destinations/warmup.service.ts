import type { Clock } from '../../lib/clock.ts';
import { invalidParam } from '../../lib/errors.ts';
import type { DomainService } from '../domains/domains.service.ts';
import { dayOf, scheduleProblem, warmupDay } from '../../lib/warmup-schedule.ts';
import type { WarmupRecord, WarmupsRepo } from './warmups.repo.ts';

// A sending domain's warm-up as its project sees and sets it (GET and PUT /v1/domains/{id}/warmup,
// docs/guides/warm-up.md). The sending workers read what is written here within a second (warmup.ts).

export interface WarmupChange {
  enabled: boolean;
  /** Daily allowances per destination, day 1 first; null: WARMUP_SCHEDULE's; absent: as it was. */
  schedule?: number[] | null | undefined;
  /** Day 1 again from today (enabling a warm-up that is off always starts it from day 1). */
  restart?: boolean | undefined;
}

const iso = (ms: number) => new Date(ms).toISOString();

export function createWarmupService(deps: {
  repo: Pick<WarmupsRepo, 'get' | 'save' | 'usedOn'>;
  domains: Pick<DomainService, 'get'>;
  clock: Clock;
  /** WARMUP_SCHEDULE. */
  defaultSchedule: readonly number[];
}) {
  async function view(domain: { id: string; name: string }, warmup: WarmupRecord | undefined) {
    const now = deps.clock.now().getTime();
    const schedule = warmup?.schedule ?? deps.defaultSchedule;
    const state = warmup?.enabled ? warmupDay(schedule, warmup.startedAt, now) : undefined;
    const today = dayOf(now);
    return {
      object: 'warmup' as const,
      domain_id: domain.id,
      domain: domain.name,
      enabled: warmup?.enabled ?? false,
      schedule: [...schedule],
      default_schedule: warmup?.schedule == null,
      started_at: warmup?.enabled ? iso(warmup.startedAt) : null,
      day: state && state.allowance !== null ? state.day : null,
      allowance_per_destination: state?.allowance ?? null,
      ends_at: state ? iso(state.endsAt) : null,
      today,
      used_today: warmup ? await deps.repo.usedOn(domain.id, today) : [],
      updated_at: warmup?.updatedAt ?? null,
    };
  }

  return {
    async get(projectId: string, idOrName: string) {
      const domain = await deps.domains.get(projectId, idOrName);
      return view(domain, await deps.repo.get(domain.id));
    },

    async set(projectId: string, idOrName: string, change: WarmupChange) {
      if (change.schedule) {
        const problem = scheduleProblem(change.schedule);
        if (problem) throw invalidParam('schedule', `The schedule is not one: ${problem}.`);
      }
      const domain = await deps.domains.get(projectId, idOrName);
      const before = await deps.repo.get(domain.id);
      const now = deps.clock.now();
      const starts = change.enabled && (!before?.enabled || change.restart === true);
      const record: WarmupRecord = {
        domainId: domain.id,
        projectId,
        domainName: domain.name,
        enabled: change.enabled,
        schedule: change.schedule === undefined ? (before?.schedule ?? null) : change.schedule,
        startedAt: starts || !before ? now.getTime() : before.startedAt,
        createdAt: before?.createdAt ?? now.toISOString(),
        updatedAt: now.toISOString(),
      };
      await deps.repo.save(record);
      return view(domain, record);
    },
  };
}

export type WarmupService = ReturnType<typeof createWarmupService>;
