// When the next attempt of a queued job that failed is due (a webhook delivery, an email's recipient): the
// queue's retry schedule, shared by its workers. Pure functions: the worker supplies time and randomness.

/**
 * The delay before attempt `attemptsMade + 1`, or undefined when the schedule is exhausted (the job has
 * failed). `schedule[i]` is the delay before attempt i+1, so after attempt k the next delay is
 * `schedule[k]`. Jitter moves it by up to ± `jitter` of itself. A `retry-after` the receiver sent (429/503)
 * replaces it, capped at twice the step so a receiver cannot park a delivery indefinitely.
 */
export function nextRetryDelay(options: {
  attemptsMade: number;
  schedule: readonly number[];
  jitter: number;
  random: () => number;
  retryAfterMs?: number | undefined;
}): number | undefined {
  const step = options.schedule[options.attemptsMade];
  if (step === undefined) return undefined;
  if (options.retryAfterMs !== undefined) return Math.min(Math.max(0, options.retryAfterMs), 2 * step);
  const spread = step * options.jitter * (2 * options.random() - 1);
  return Math.max(0, Math.round(step + spread));
}

/** `retry-after` as milliseconds from `now`: delta-seconds or an HTTP date; undefined when unreadable. */
export function parseRetryAfter(value: string | undefined, now: Date): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const date = Date.parse(text);
  if (Number.isNaN(date) || !/[a-z]/i.test(text)) return undefined;
  return Math.max(0, date - now.getTime());
}
