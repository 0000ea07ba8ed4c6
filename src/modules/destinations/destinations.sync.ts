import type { DestinationOverride } from '../../lib/destination-limits.ts';
import type { DestinationsRepo } from './destinations.repo.ts';
import { WRITE_EVERY_MS } from './shaping.ts';
import type { SourcedShaping } from './source-shaping.ts';

// A sending worker's destinations kept in step with the other workers' through the database: what this worker
// changed is written (on a change, at most once a second per destination), what the others wrote is read (at
// most once a second, with the operator's overrides set through the API), and the domains it learns are
// recorded for the claim's filter. Every source's states (source-shaping.ts) are written in one statement and
// read in one; with them, how many sending workers are alive (their heartbeats), among whom each pair's limits
// are shared.

/** How many sending workers are alive at `now` (epoch ms), the caller included. */
export type AliveWorkers = (now: number) => Promise<number>;

export interface DestinationSync {
  readonly shaping: SourcedShaping;
  /**
   * Before a look over the queue: writes what changed and reads the others' states, each at most once a
   * second; and, with `alive`, how many workers share the destinations.
   */
  sync(now: number, alive?: AliveWorkers): Promise<void>;
  /** After a deferral: writes the change now if its destination was not written in the last second. */
  flush(now: number): Promise<void>;
  /**
   * Records a domain's destination (once per destination it moves to, per process), and the destination's
   * state when it is new: the row other workers learn the domain's destination with (shaping.adopt).
   */
  learned(domain: string, destination: string, now: number): Promise<void>;
}

export function createDestinationSync(deps: {
  repo: DestinationsRepo;
  shaping: SourcedShaping;
  /** DESTINATION_LIMITS: the API's overrides (read with the states) apply after these. */
  overrides?: readonly DestinationOverride[];
}): DestinationSync {
  const { repo, shaping } = deps;
  const settings = deps.overrides ?? [];
  let applied = '';
  let readAt = -Infinity;
  return {
    shaping,
    async sync(now, alive) {
      await repo.saveStates(shaping.takeWrites(now));
      if (now - readAt < WRITE_EVERY_MS) return;
      readAt = now;
      // The operator's overrides first, so the states merged are judged against the limits of now.
      const overrides = [...settings, ...(await repo.overrides())];
      const stamp = JSON.stringify(overrides.map(({ pattern, limits }) => [pattern, limits]));
      if (stamp !== applied) {
        applied = stamp;
        shaping.setOverrides(overrides);
      }
      shaping.merge(await repo.statesOf(shaping.sources));
      if (alive) shaping.shareAmong(await alive(now));
    },
    async flush(now) {
      await repo.saveStates(shaping.takeWrites(now));
    },
    async learned(domain, destination, now) {
      await repo.saveDomain(domain, destination, new Date(now).toISOString());
      await repo.saveStates(shaping.takeWrites(now));
    },
  };
}
