// A warm-up's schedule (src/modules/destinations/warmup.ts): daily allowances per destination, day 1 first, on
// UTC days; as WARMUP_SCHEDULE and the API write it.

export const DAY_MS = 86_400_000;
/** Schedules are 1–365 days of 1–10 000 000 messages. */
export const MAX_SCHEDULE_DAYS = 365;
export const MAX_DAILY_ALLOWANCE = 10_000_000;
/**
 * WARMUP_SCHEDULE's value: daily allowances separated by commas (`50,100,200`), or `start x growth / days`
 * (`50x1.5/16`: 50 on day 1, ×1.5 a day, rounded, for 16 days). Returns the schedule or why it is not one.
 */
export function parseWarmupSchedule(value: string): number[] | string {
  const compact = value.replace(/\s+/g, '');
  const growth = /^(\d+)x(\d+(?:\.\d+)?)\/(\d+)$/i.exec(compact);
  if (growth && Number(growth[3]) > MAX_SCHEDULE_DAYS) return `a schedule has 1 to ${MAX_SCHEDULE_DAYS} days`;
  const schedule = growth
    ? Array.from({ length: Number(growth[3]) }, (_, day) =>
        Math.round(Number(growth[1]) * Number(growth[2]) ** day),
      )
    : compact.split(',').map((entry) => (/^\d+$/.test(entry) ? Number(entry) : NaN));
  return scheduleProblem(schedule) ?? schedule;
}

/** Why a schedule is not one (or undefined): the API's and the setting's one rule. */
export function scheduleProblem(schedule: readonly number[]): string | undefined {
  if (schedule.length === 0 || schedule.length > MAX_SCHEDULE_DAYS)
    return `a schedule has 1 to ${MAX_SCHEDULE_DAYS} days`;
  const bad = schedule.findIndex(
    (count) => !Number.isInteger(count) || count < 1 || count > MAX_DAILY_ALLOWANCE,
  );
  if (bad >= 0) return `day ${bad + 1}'s allowance is not a whole number from 1 to ${MAX_DAILY_ALLOWANCE}`;
  return undefined;
}

const dayStart = (ms: number) => Math.floor(ms / DAY_MS) * DAY_MS;
export const dayOf = (ms: number) => new Date(dayStart(ms)).toISOString().slice(0, 10);

/** Where a warm-up stands at `now`: its day (from 1), that day's allowance per destination (null: warm). */
export function warmupDay(
  schedule: readonly number[],
  startedAt: number,
  now: number,
): { day: number; allowance: number | null; endsAt: number } {
  const day = Math.max(1, Math.round((dayStart(now) - dayStart(startedAt)) / DAY_MS) + 1);
  return {
    day,
    allowance: schedule[day - 1] ?? null,
    endsAt: dayStart(startedAt) + schedule.length * DAY_MS,
  };
}
