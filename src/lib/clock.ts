// Time comes through a Clock so tests can move it; timestamps are always ISO 8601 UTC with milliseconds.
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

export const isoNow = (clock: Clock): string => clock.now().toISOString();

/**
 * A record's next `updated_at`: now, or a millisecond after the previous one when now is not later, so it
 * moves on every change, even two within one millisecond (clients order by it).
 */
export const nextUpdatedAt = (clock: Clock, previous: string): string =>
  new Date(Math.max(clock.now().getTime(), Date.parse(previous) + 1)).toISOString();

/**
 * The moment a time filter names (`since`, `until`): an ISO 8601 date-time as written, or a plain date
 * (`2026-11-20`) as 00:00:00Z of that day. The one reading of every time filter of the API (see
 * `timeFilter` in src/http/schema-helpers.ts, whose schema the value has passed).
 */
export function instantOf(value: string): Date {
  return new Date(/^\d{4}-\d{2}-\d{2}$/.test(value) ? `${value}T00:00:00.000Z` : value);
}
