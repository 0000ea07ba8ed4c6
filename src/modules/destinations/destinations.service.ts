import type { DestinationLimits, DestinationOverride } from '../../lib/destination-limits.ts';
import type { Clock } from '../../lib/clock.ts';
import { invalidParam, notFound } from '../../lib/errors.ts';
import type { DestinationsRepo } from './destinations.repo.ts';
import { destinationOf } from './providers.ts';

// The operator's view of the destinations (GET /v1/destinations): what the sending workers share of each,
// its limits as the table, DESTINATION_LIMITS and the API's overrides set them, and the recipients waiting for
// it; and those overrides (GET, PUT, DELETE /v1/destinations/overrides), which every sending worker reads
// within a second (destinations.sync.ts).

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** What an override may name: an MX host or recipient domain, all under one (`*.example.net`), or a provider. */
const PATTERN = /^(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*$/;

/** An override's limits as the API shows and takes them (null: the default). */
export interface OverrideLimits {
  connections?: number | null | undefined;
  messages_per_connection?: number | null | undefined;
  per_minute?: number | null | undefined;
  per_hour?: number | null | undefined;
}

const limitsView = (limits: Partial<DestinationLimits>) => ({
  connections: limits.connections ?? null,
  messages_per_connection: limits.messagesPerConnection ?? null,
  per_minute: limits.perMinute ?? null,
  per_hour: limits.perHour ?? null,
});

export function createDestinationsService(deps: {
  repo: DestinationsRepo;
  clock: Clock;
  /** DESTINATION_LIMITS. */
  overrides: readonly DestinationOverride[];
}) {
  function patternOf(raw: string): string {
    const pattern = raw.trim().toLowerCase().replace(/\.$/, '');
    if (!PATTERN.test(pattern) || pattern.length > 253) {
      throw invalidParam(
        'pattern',
        'A pattern is an MX host or recipient domain (`mx.example.net`), all under one (`*.example.net`), or a provider (`google`).',
      );
    }
    return pattern;
  }

  return {
    async list() {
      const now = deps.clock.now().getTime();
      const overrides = [...deps.overrides, ...(await deps.repo.overrides())];
      const rows = await deps.repo.list();
      return rows.map((row) => {
        const hosts = row.mxHosts.split(',').filter(Boolean);
        const { limits } = destinationOf(hosts[0] ?? row.key, hosts, overrides);
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

    /** DESTINATION_LIMITS's overrides, then the API's (a later one wins where both name a limit). */
    async overrides() {
      const saved = await deps.repo.overrides();
      return [
        ...deps.overrides.map((override) => ({
          object: 'destination_override' as const,
          pattern: override.pattern,
          origin: 'settings' as const,
          ...limitsView(override.limits),
          updated_at: null,
        })),
        ...saved.map((override) => ({
          object: 'destination_override' as const,
          pattern: override.pattern,
          origin: 'api' as const,
          ...limitsView(override.limits),
          updated_at: override.updatedAt,
        })),
      ];
    },

    async setOverride(rawPattern: string, body: OverrideLimits) {
      const pattern = patternOf(rawPattern);
      if (body.connections === 0)
        throw invalidParam('connections', 'A destination needs at least one connection.');
      const limits: Partial<DestinationLimits> = {};
      if (body.connections != null) limits.connections = body.connections;
      if (body.messages_per_connection != null) limits.messagesPerConnection = body.messages_per_connection;
      if (body.per_minute != null) limits.perMinute = body.per_minute;
      if (body.per_hour != null) limits.perHour = body.per_hour;
      const now = deps.clock.now().toISOString();
      await deps.repo.saveOverride({ pattern, limits }, now);
      return {
        object: 'destination_override' as const,
        pattern,
        origin: 'api' as const,
        ...limitsView(limits),
        updated_at: now,
      };
    },

    async removeOverride(rawPattern: string) {
      const pattern = patternOf(rawPattern);
      if (!(await deps.repo.removeOverride(pattern))) throw notFound('destination override', pattern);
      return { object: 'destination_override' as const, pattern, deleted: true as const };
    },
  };
}

export type DestinationsService = ReturnType<typeof createDestinationsService>;
