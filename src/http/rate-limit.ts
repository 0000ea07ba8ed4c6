export interface RateVerdict {
  limit: number;
  /** Negative when the request is over the limit. */
  remaining: number;
  resetSeconds: number;
}

export interface RateLimiter {
  /** Counts one request for `key`; undefined when limiting is off. */
  take(key: string): RateVerdict | undefined;
  /** The verdict when `key` has used up its window already (without counting this), else undefined. */
  exhausted(key: string): RateVerdict | undefined;
}

/**
 * Fixed-window counter per API key, in this process's memory. With several API processes each enforces
 * the limit on its own share, which is what a per-process limit behind a load balancer gives anyway.
 */
export function createRateLimiter({
  limit,
  windowMs,
  now = Date.now,
}: {
  limit: number;
  windowMs: number;
  now?: () => number;
}): RateLimiter {
  const windows = new Map<string, { startedAt: number; count: number }>();
  const verdict = (window: { startedAt: number; count: number }, time: number): RateVerdict => ({
    limit,
    remaining: limit - window.count,
    resetSeconds: Math.max(1, Math.ceil((window.startedAt + windowMs - time) / 1000)),
  });
  return {
    exhausted(key) {
      if (limit <= 0) return undefined;
      // Asked on every authenticated request, of an address that has almost never failed: the clock is read
      // only for one that has a full window.
      const window = windows.get(key);
      if (!window || window.count < limit) return undefined;
      const time = now();
      if (time - window.startedAt >= windowMs) return undefined;
      return verdict(window, time);
    },
    take(key) {
      if (limit <= 0) return undefined;
      const time = now();
      let window = windows.get(key);
      if (!window || time - window.startedAt >= windowMs) {
        if (windows.size > 10_000) windows.clear(); // bounded memory; a reset only forgives a window
        window = { startedAt: time, count: 0 };
        windows.set(key, window);
      }
      window.count += 1;
      return verdict(window, time);
    },
  };
}
