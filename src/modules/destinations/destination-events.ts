import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { EventService } from '../events/events.service.ts';
import type { DestinationsRepo } from './destinations.repo.ts';
import type { SharedState, Throttled } from './shaping.ts';
import type { SourcedShaping } from './source-shaping.ts';

// The operator's events of direct delivery (issue 38): `destination.suspended` when a reply begins a
// destination's suspension, `destination.resumed` when its back-off has ended. A destination is no project's,
// so the event goes to the projects it concerns: every project with mail queued or waiting for it then (and
// the project whose attempt was deferred), each through its own webhooks. The worker whose reply began a
// suspension announces it, and the same worker its end (at its first look over the queue past it, unless it
// was suspended again meanwhile, by it or by another worker): one pair per suspension, not one per worker.
// A suspension is of one (destination, sending source) pair (source-shaping.ts): the events name the source.

/** Projects told of one change, at most: past it the busiest destinations would write an event per project. */
const MAX_PROJECTS = 1000;

export interface DestinationEvents {
  /** A reply that began a suspension (`throttled.began`), deferring a job of `projectId`. */
  suspended(throttled: Throttled, projectId: string): Promise<void>;
  /** Before a look: the suspensions this worker announced that have ended. */
  resumed(now: number, shaping: SourcedShaping): Promise<void>;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function createDestinationEvents(deps: {
  db: Kysely<Database>;
  events: Pick<EventService, 'emitIn'>;
  repo: Pick<DestinationsRepo, 'projectsWaitingFor'>;
}): DestinationEvents {
  /** The suspensions this worker announced: their destination and source. */
  const announced = new Map<string, { key: string; source: string }>();

  async function emit(
    kind: 'destination.suspended' | 'destination.resumed',
    destination: string,
    data: Record<string, unknown>,
    also: string[] = [],
  ): Promise<void> {
    const waiting = await deps.repo.projectsWaitingFor(destination, MAX_PROJECTS);
    const projects = [...new Set([...also, ...waiting])];
    await inTransaction(deps.db, (transaction) =>
      deps.events.emitIn(
        transaction,
        projects.map((projectId) => ({ projectId, kind, data })),
      ),
    );
  }

  const dataOf = (state: Pick<SharedState, 'key' | 'source' | 'provider' | 'rate' | 'connections'>) => ({
    destination: state.key,
    source: state.source,
    provider: state.provider,
    rate_per_minute: state.rate || null,
    connections: state.connections,
  });

  return {
    async suspended(throttled, projectId) {
      // Begun again before this worker's next look saw the last one end: to the operator, the same one.
      const pair = `${throttled.destination} ${throttled.source}`;
      if (!throttled.began || announced.has(pair)) return;
      announced.set(pair, { key: throttled.destination, source: throttled.source });
      await emit(
        'destination.suspended',
        throttled.destination,
        {
          ...dataOf({ ...throttled, key: throttled.destination }),
          suspended_until: iso(throttled.suspendedUntil),
          last_deferral: throttled.reply,
        },
        [projectId],
      );
    },
    async resumed(now, shaping) {
      for (const [pair, { key, source }] of announced) {
        const state = shaping.of(source).stateOf(key);
        if (state && state.suspendedUntil !== null && state.suspendedUntil > now) continue;
        announced.delete(pair);
        if (!state) continue;
        await emit('destination.resumed', key, {
          ...dataOf(state),
          suspended_until: null,
          last_deferral: state.lastDeferral,
        });
      }
    },
  };
}
