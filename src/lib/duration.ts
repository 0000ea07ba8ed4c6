const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parses `250ms`, `5s`, `5m`, `2h`, `1d` or a bare number of milliseconds; undefined when malformed. */
export function parseDuration(text: string): number | undefined {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (!match) return undefined;
  return Math.round(Number(match[1]) * UNIT_MS[match[2] ?? 'ms']!);
}

/** Parses a comma-separated schedule of durations, e.g. `0,5s,5m`. */
export function parseSchedule(text: string): number[] | undefined {
  const steps = text.split(',').map(parseDuration);
  return steps.length > 0 && steps.every((step) => step !== undefined) ? (steps as number[]) : undefined;
}
