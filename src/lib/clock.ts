// Time comes through a Clock so tests can move it; timestamps are always ISO 8601 UTC with milliseconds.
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

export const isoNow = (clock: Clock): string => clock.now().toISOString();
