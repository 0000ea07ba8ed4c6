import type { DestinationOverride } from '../../lib/destination-limits.ts';
import type { Clock } from '../../lib/clock.ts';
import type { DestinationsRepo } from './destinations.repo.ts';
import { destinationOf } from './providers.ts';

// The operator's view of the destinations (GET /v1/destinations): what the sending workers share of each,
// its limits as the table and DESTINATION_LIMITS set them, and the recipients waiting for it.

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function createDestinationsService(deps: {
  repo: DestinationsRepo;
  clock: Clock;
  overrides: readonly DestinationOverride[];
}) {
  return {
    async list() {
      const now = deps.clock.now().getTime();
      const rows = await deps.repo.list();
      return rows.map((row) => {
        const hosts = row.mxHosts.split(',').filter(Boolean);
        const { limits } = destinationOf(hosts[0] ?? row.key, hosts, deps.overrides);
        const suspended = row.suspendedUntil !== null && row.suspendedUntil > now;
        return {
          object: 'destination' as const,
          key: row.key,
          source: row.source,
          provider: row.provider,
          mx_hosts: hosts,
          limits: {
            connections: limits.connections,
            messages_per_connection: limits.messagesPerConnection,
            per_minute: limits.perMinute || null,
            per_hour: limits.perHour || null,
          },
          rate_per_minute: row.rate || null,
          connections: row.connections,
          suspended_until: suspended ? iso(row.suspendedUntil) : null,
          last_deferral: row.lastDeferral,
          last_deferral_at: iso(row.lastDeferralAt),
          deferrals: row.deferrals,
          suspensions: row.suspensions,
          queued: row.queued,
          waiting: row.waiting,
          updated_at: iso(row.updatedAt)!,
        };
      });
    },
  };
}

export type DestinationsService = ReturnType<typeof createDestinationsService>;
