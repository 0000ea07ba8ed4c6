import type { Kysely } from 'kysely';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { DestinationOverride } from '../../lib/destination-limits.ts';
import type { SharedState } from './shaping.ts';

// The destinations and destination_domains tables: what the sending workers share of each destination, and
// which destination each recipient domain rolls up to; and the operator's view of them with their queues.

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
const ms = (value: string | null) => (value === null ? null : Date.parse(value));

const toShared = (row: Row<'destinations'>): SharedState => ({
  key: row.key,
  source: row.source,
  provider: row.provider,
  mxHosts: row.mx_hosts,
  rate: Number(row.rate),
  connections: Number(row.connections),
  suspendedUntil: ms(row.suspended_until),
  backoffMs: Number(row.backoff_ms),
  lastDeferral: row.last_deferral,
  lastDeferralAt: ms(row.last_deferral_at),
  deferrals: Number(row.deferrals),
  suspensions: Number(row.suspensions),
  updatedAt: Date.parse(row.updated_at),
});

/** A destination as the operator sees it: its shared state and the recipients waiting for it. */
export interface DestinationRow extends SharedState {
  /** Recipients queued for it now, and waiting (a retry or a throttle's back-off). */
  queued: number;
  waiting: number;
}

export function createDestinationsRepo(db: Kysely<Database>) {
  return {
    /** Writes these (destination, source) states (one statement), as this worker last changed them. */
    async saveStates(states: readonly SharedState[], transaction?: Transaction): Promise<void> {
      if (states.length === 0) return;
      await (transaction?.db ?? db)
        .insertInto('destinations')
        .values(
          states.map((state) => ({
            source: state.source,
            key: state.key,
            provider: state.provider,
            mx_hosts: state.mxHosts,
            rate: state.rate,
            connections: state.connections,
            suspended_until: iso(state.suspendedUntil),
            backoff_ms: state.backoffMs,
            last_deferral: state.lastDeferral,
            last_deferral_at: iso(state.lastDeferralAt),
            deferrals: state.deferrals,
            suspensions: state.suspensions,
            updated_at: new Date(state.updatedAt).toISOString(),
          })),
        )
        .onConflict((conflict) =>
          conflict.columns(['source', 'key']).doUpdateSet((eb) => ({
            provider: eb.ref('excluded.provider'),
            mx_hosts: eb.ref('excluded.mx_hosts'),
            rate: eb.ref('excluded.rate'),
            connections: eb.ref('excluded.connections'),
            suspended_until: eb.ref('excluded.suspended_until'),
            backoff_ms: eb.ref('excluded.backoff_ms'),
            last_deferral: eb.ref('excluded.last_deferral'),
            last_deferral_at: eb.ref('excluded.last_deferral_at'),
            deferrals: eb.ref('excluded.deferrals'),
            suspensions: eb.ref('excluded.suspensions'),
            updated_at: eb.ref('excluded.updated_at'),
          })),
        )
        .execute();
    },

    /** Records the destination a recipient domain's MX hosts roll up to. */
    async saveDomain(
      domain: string,
      destination: string,
      now: string,
      transaction?: Transaction,
    ): Promise<void> {
      await (transaction?.db ?? db)
        .insertInto('destination_domains')
        .values({ domain, destination, updated_at: now })
        .onConflict((conflict) => conflict.column('domain').doUpdateSet({ destination, updated_at: now }))
        .execute();
    },

    /** The operator's overrides set through the API, oldest first (applied in that order, after the settings'). */
    async overrides(): Promise<Array<DestinationOverride & { createdAt: string; updatedAt: string }>> {
      const rows = await db.selectFrom('destination_overrides').selectAll().orderBy('created_at').execute();
      return rows.map((row) => {
        const limits: DestinationOverride['limits'] = {};
        if (row.connections !== null) limits.connections = Number(row.connections);
        if (row.messages_per_connection !== null)
          limits.messagesPerConnection = Number(row.messages_per_connection);
        if (row.per_minute !== null) limits.perMinute = Number(row.per_minute);
        if (row.per_hour !== null) limits.perHour = Number(row.per_hour);
        return { pattern: row.pattern, limits, createdAt: row.created_at, updatedAt: row.updated_at };
      });
    },

    /** Sets an override (replacing one of the same pattern). */
    async saveOverride(override: DestinationOverride, now: string, transaction?: Transaction): Promise<void> {
      const limits = {
        connections: override.limits.connections ?? null,
        messages_per_connection: override.limits.messagesPerConnection ?? null,
        per_minute: override.limits.perMinute ?? null,
        per_hour: override.limits.perHour ?? null,
      };
      await (transaction?.db ?? db)
        .insertInto('destination_overrides')
        .values({ pattern: override.pattern, ...limits, created_at: now, updated_at: now })
        .onConflict((conflict) => conflict.column('pattern').doUpdateSet({ ...limits, updated_at: now }))
        .execute();
    },

    /** Removes an override; whether there was one. */
    async removeOverride(pattern: string, transaction?: Transaction): Promise<boolean> {
      const result = await (transaction?.db ?? db)
        .deleteFrom('destination_overrides')
        .where('pattern', '=', pattern)
        .executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },

    /** Every destination's shared state of these sources. */
    async statesOf(sources: readonly string[]): Promise<SharedState[]> {
      const rows = await db
        .selectFrom('destinations')
        .selectAll()
        .where('source', 'in', [...sources])
        .execute();
      return rows.map(toShared);
    },

    /** The projects with mail queued or waiting for a destination (at most `limit`): who hears of its changes. */
    async projectsWaitingFor(destination: string, limit: number): Promise<string[]> {
      const rows = await db
        .selectFrom('email_recipients')
        .innerJoin('destination_domains', 'destination_domains.domain', 'email_recipients.host')
        .select('email_recipients.project_id')
        .distinct()
        .where('destination_domains.destination', '=', destination)
        .where((eb) =>
          eb.or([
            eb('email_recipients.ready_seq', 'is not', null),
            eb('email_recipients.wait_until', 'is not', null),
          ]),
        )
        .limit(limit)
        .execute();
      return rows.map((row) => row.project_id);
    },

    /** Every destination with the recipients queued and waiting for it, the busiest first. */
    async list(): Promise<DestinationRow[]> {
      const rows = await db.selectFrom('destinations').selectAll().orderBy('key').execute();
      const depths = await db
        .selectFrom('email_recipients')
        .innerJoin('destination_domains', 'destination_domains.domain', 'email_recipients.host')
        .select((eb) => [
          'destination_domains.destination as destination',
          eb.fn.count<string | number>('email_recipients.ready_seq').as('queued'),
          eb.fn.count<string | number>('email_recipients.wait_until').as('waiting'),
        ])
        .where((eb) =>
          eb.or([
            eb('email_recipients.ready_seq', 'is not', null),
            eb('email_recipients.wait_until', 'is not', null),
          ]),
        )
        .groupBy('destination_domains.destination')
        .execute();
      const depth = new Map(depths.map((row) => [row.destination, row]));
      return rows
        .map((row) => ({
          ...toShared(row),
          queued: Number(depth.get(row.key)?.queued ?? 0),
          waiting: Number(depth.get(row.key)?.waiting ?? 0),
        }))
        .sort(
          (a, b) =>
            b.queued + b.waiting - (a.queued + a.waiting) ||
            a.key.localeCompare(b.key) ||
            a.source.localeCompare(b.source),
        );
    },
  };
}

export type DestinationsRepo = ReturnType<typeof createDestinationsRepo>;

/**
 * The sending queue's claim condition (sending.claims.ts): a recipient whose domain rolls up to a destination
 * suspended past `now` for every one of the worker's `sources` sending sources stays where it is (with one
 * source left, its mail may leave from that one). Parameters: the sources, then now, then (several sources)
 * their count.
 */
export const NOT_SUSPENDED = (slot: () => string, sources = 1) => {
  const suspended = `SELECT destination_domains.domain FROM destinations JOIN destination_domains
      ON destination_domains.destination = destinations.key`;
  if (sources === 1) {
    return ` AND host NOT IN (${suspended}
      WHERE destinations.source = ${slot()} AND destinations.suspended_until > ${slot()})`;
  }
  const list = Array.from({ length: sources }, slot).join(', ');
  return ` AND host NOT IN (${suspended}
      WHERE destinations.source IN (${list}) AND destinations.suspended_until > ${slot()}
      GROUP BY destination_domains.domain HAVING count(*) = ${slot()})`;
};
