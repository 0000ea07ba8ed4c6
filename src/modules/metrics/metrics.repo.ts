import { type Kysely, type SelectQueryBuilder, sql } from 'kysely';
import type { Database } from '../../db/schema.ts';
import type { QueueName } from '../../queue/running-workers.ts';

/** One queue as a scrape sees it. */
export interface QueueSnapshot {
  /** Jobs due now (being attempted or waiting for a worker), at most the scrape's bound. */
  depth: number;
  /** When the job due longest became due (ISO 8601); undefined when none is due. */
  oldestDueAt: string | undefined;
}

// Every statement here reads one of the queues' own indexes (the ones their workers claim through), and each
// count stops at `limit` rows: a scrape costs about the same with an empty queue or a backlog of millions.
// A job being attempted is still due (its row is still in the queue), so it counts too.

export function createMetricsRepo(db: Kysely<Database>) {
  /** Rows of `query`, counted up to `limit`. */
  async function countUpTo(
    query: SelectQueryBuilder<Database, keyof Database, object>,
    limit: number,
  ): Promise<number> {
    const row = await db
      .selectFrom(
        query
          .select(sql<number>`1`.as('one'))
          .limit(limit)
          .as('due'),
      )
      .select((eb) => eb.fn.countAll<number | string>().as('count'))
      .executeTakeFirst();
    return Number(row?.count ?? 0);
  }

  /** Recipients to send: those queued (ready_seq, in fair-queue order) and waiting ones whose time has come. */
  async function sending(now: string, limit: number): Promise<QueueSnapshot> {
    const ready = db.selectFrom('email_recipients').where('ready_seq', 'is not', null);
    const waitingDue = db
      .selectFrom('email_recipients')
      .where('wait_until', 'is not', null)
      .where('wait_until', '<=', now);
    // The queue's head (the lowest position) rather than the oldest of every queued row: the head is one
    // index step, and in a fair queue it is the row that has waited longest or nearly.
    const head = await ready
      .select(sql<string>`COALESCE(next_attempt_at, created_at)`.as('due_at'))
      .orderBy('ready_seq')
      .limit(1)
      .executeTakeFirst();
    const waiting = await waitingDue
      .select((eb) => eb.fn.min<string | null>('wait_until').as('due_at'))
      .executeTakeFirst();
    const depth = (await countUpTo(ready, limit)) + (await countUpTo(waitingDue, limit));
    return { depth: Math.min(depth, limit), oldestDueAt: earliest(head?.due_at, waiting?.due_at) };
  }

  /** Webhook deliveries pending and due (the partial index of pending rows, migration 0019). */
  async function deliveries(now: string, limit: number): Promise<QueueSnapshot> {
    const due = db
      .selectFrom('deliveries')
      .where('status', '=', sql.lit('pending'))
      .where('next_attempt_at', '<=', now);
    const oldest = await due
      .select((eb) => eb.fn.min<string | null>('next_attempt_at').as('due_at'))
      .executeTakeFirst();
    return { depth: await countUpTo(due, limit), oldestDueAt: oldest?.due_at ?? undefined };
  }

  /** Received reports not read yet: every stored one is due at once. */
  async function inbound(limit: number): Promise<QueueSnapshot> {
    const pending = db.selectFrom('inbound_messages').where('status', '=', 'pending');
    const oldest = await pending.select('received_at').orderBy('id').limit(1).executeTakeFirst();
    return { depth: await countUpTo(pending, limit), oldestDueAt: oldest?.received_at };
  }

  /** Sending domains whose next DNS check has come. */
  async function domainChecks(now: string, limit: number): Promise<QueueSnapshot> {
    const due = db.selectFrom('domains').where('next_check_at', '<=', now);
    const oldest = await due
      .select((eb) => eb.fn.min<string | null>('next_check_at').as('due_at'))
      .executeTakeFirst();
    return { depth: await countUpTo(due, limit), oldestDueAt: oldest?.due_at ?? undefined };
  }

  /**
   * Broadcasts to fan out: those sending (due since they were sent: a fan-out's age is how long it has run)
   * and scheduled ones whose time has come (the partial index broadcasts_due, migration 0037).
   */
  async function broadcasts(now: string, limit: number): Promise<QueueSnapshot> {
    const due = db
      .selectFrom('broadcasts')
      .where((eb) =>
        eb.or([
          eb('status', '=', 'sending'),
          eb.and([eb('status', '=', 'scheduled'), eb('scheduled_at', '<=', now)]),
        ]),
      );
    const oldest = await due
      .select((eb) =>
        eb.fn.min<string | null>(eb.fn.coalesce('scheduled_at', 'started_at', 'updated_at')).as('due_at'),
      )
      .executeTakeFirst();
    return { depth: await countUpTo(due, limit), oldestDueAt: oldest?.due_at ?? undefined };
  }

  /** Contact imports queued or under way: each is due from when it was uploaded. */
  async function contactImports(limit: number): Promise<QueueSnapshot> {
    const due = db.selectFrom('contact_imports').where('status', 'in', ['queued', 'in_progress']);
    const oldest = await due
      .select((eb) => eb.fn.min<string | null>('created_at').as('due_at'))
      .executeTakeFirst();
    return { depth: await countUpTo(due, limit), oldestDueAt: oldest?.due_at ?? undefined };
  }

  return {
    /**
     * Direct delivery's destinations by label (a provider's name, or `other`): their rate summed, how many are
     * suspended at `now`, and the recipients queued or waiting for them, up to `limit` recipients in all (the
     * bound of the queues' counts): a scrape reads the destinations table (a row per destination and source)
     * and at most `limit` recipients. And per sending source, how many destinations are suspended for it.
     */
    async destinations(
      now: Date,
      limit: number,
    ): Promise<{
      labels: Map<string, { rate: number; suspended: number; depth: number }>;
      suspendedBySource: Map<string, number>;
    }> {
      const rows = await db
        .selectFrom('destinations')
        .select(['key', 'source', 'provider', 'rate', 'suspended_until'])
        .execute();
      const suspendedBySource = new Map<string, number>();
      const labels = new Map<string, { rate: number; suspended: number; depth: number }>();
      const entry = (label: string) => {
        const found = labels.get(label) ?? { rate: 0, suspended: 0, depth: 0 };
        labels.set(label, found);
        return found;
      };
      const providers = new Set<string>();
      const at = now.toISOString();
      for (const row of rows) {
        if (row.provider !== null) providers.add(row.key);
        const found = entry(row.provider ?? 'other');
        if (row.provider !== null) found.rate += Number(row.rate);
        const suspended = row.suspended_until !== null && row.suspended_until > at;
        if (suspended) found.suspended += 1;
        suspendedBySource.set(row.source, (suspendedBySource.get(row.source) ?? 0) + (suspended ? 1 : 0));
      }
      const waiting = db
        .selectFrom('email_recipients')
        .select('host')
        .where((eb) => eb.or([eb('ready_seq', 'is not', null), eb('wait_until', 'is not', null)]))
        .limit(limit)
        .as('waiting');
      const depths = await db
        .selectFrom(waiting)
        .innerJoin('destination_domains', 'destination_domains.domain', 'waiting.host')
        .select((eb) => ['destination_domains.destination', eb.fn.countAll<number | string>().as('count')])
        .groupBy('destination_domains.destination')
        .execute();
      for (const row of depths)
        entry(providers.has(row.destination) ? row.destination : 'other').depth += Number(row.count);
      return { labels, suspendedBySource };
    },

    /** Every queue at `now`, each count bounded by `limit`. */
    async queues(now: Date, limit: number): Promise<Record<QueueName, QueueSnapshot>> {
      const at = now.toISOString();
      return {
        sending: await sending(at, limit),
        deliveries: await deliveries(at, limit),
        inbound: await inbound(limit),
        domain_checks: await domainChecks(at, limit),
        broadcasts: await broadcasts(at, limit),
        contact_imports: await contactImports(limit),
      };
    },
  };
}

export type MetricsRepo = ReturnType<typeof createMetricsRepo>;

function earliest(...times: Array<string | null | undefined>): string | undefined {
  const known = times.filter((time): time is string => typeof time === 'string');
  return known.length === 0 ? undefined : known.reduce((a, b) => (a < b ? a : b));
}
