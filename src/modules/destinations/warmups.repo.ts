import { type Kysely, sql } from 'kysely';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';

// The warmups and warmup_counts tables (warmup.ts): each sending domain's warm-up, and what each destination
// took of a day's allowance, per source, taken a block at a time by the sending workers.

export interface WarmupRecord {
  domainId: string;
  projectId: string;
  domainName: string;
  enabled: boolean;
  /** Null: WARMUP_SCHEDULE's. */
  schedule: number[] | null;
  startedAt: number;
  createdAt: string;
  updatedAt: string;
}

const toRecord = (row: Row<'warmups'>): WarmupRecord => ({
  domainId: row.domain_id,
  projectId: row.project_id,
  domainName: row.domain_name,
  enabled: Boolean(row.enabled),
  schedule: row.schedule === null ? null : (JSON.parse(row.schedule) as number[]),
  startedAt: Date.parse(row.started_at),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export interface WarmupCountKey {
  source: string;
  domainId: string;
  destination: string;
  /** YYYY-MM-DD (UTC). */
  day: string;
}

/**
 * A take's update of a count row that exists: the grant is what is left of the allowance, at most `block`
 * (`last_grant`), added to `used`; both read from the row as the write locked it.
 */
function grantFrom(table: 'warmup_counts' | 'source_warmup_counts', block: number, allowance: number) {
  const used = sql.ref<number>(`${table}.used`);
  const grant = sql<number>`case when ${allowance} - ${used} < ${block} then ${allowance} - ${used} else ${block} end`;
  return { last_grant: grant, used: sql<number>`${used} + ${grant}` };
}

export function createWarmupsRepo(db: Kysely<Database>) {
  return {
    /** Every enabled warm-up (a worker's read, at most once a second). */
    async enabled(): Promise<WarmupRecord[]> {
      const rows = await db.selectFrom('warmups').selectAll().where('enabled', '=', true).execute();
      return rows.map(toRecord);
    },

    async get(domainId: string): Promise<WarmupRecord | undefined> {
      const row = await db
        .selectFrom('warmups')
        .selectAll()
        .where('domain_id', '=', domainId)
        .executeTakeFirst();
      return row && toRecord(row);
    },

    /** Writes a domain's warm-up as it is now. */
    async save(record: WarmupRecord, transaction?: Transaction): Promise<void> {
      const values = {
        domain_id: record.domainId,
        project_id: record.projectId,
        domain_name: record.domainName,
        enabled: record.enabled,
        schedule: record.schedule === null ? null : JSON.stringify(record.schedule),
        started_at: new Date(record.startedAt).toISOString(),
        created_at: record.createdAt,
        updated_at: record.updatedAt,
      };
      await (transaction?.db ?? db)
        .insertInto('warmups')
        .values(values)
        .onConflict((conflict) =>
          conflict.column('domain_id').doUpdateSet({
            enabled: values.enabled,
            schedule: values.schedule,
            started_at: values.started_at,
            updated_at: values.updated_at,
          }),
        )
        .execute();
    },

    /**
     * Takes up to `block` of a domain's day's `allowance` (one statement, atomic on both engines: the row is
     * locked by the write, and the amounts are read from the row as it is then). Answers how many it got: 0
     * when the day's allowance is used.
     */
    async take(key: WarmupCountKey, block: number, allowance: number): Promise<number> {
      const first = Math.min(block, allowance);
      const row = await db
        .insertInto('warmup_counts')
        .values({
          source: key.source,
          domain_id: key.domainId,
          destination: key.destination,
          day: key.day,
          used: first,
          last_grant: first,
        })
        .onConflict((conflict) =>
          conflict
            .columns(['source', 'domain_id', 'destination', 'day'])
            .doUpdateSet(grantFrom('warmup_counts', block, allowance))
            .where('warmup_counts.used', '<', allowance),
        )
        .returning('last_grant')
        .executeTakeFirst();
      return row ? Number(row.last_grant) : 0;
    },

    /** The same take from a warming source IP's day's allowance to a destination (DIRECT_SOURCE_IPS). */
    async takeForSource(key: Omit<WarmupCountKey, 'domainId'>, block: number, allowance: number) {
      const first = Math.min(block, allowance);
      const row = await db
        .insertInto('source_warmup_counts')
        .values({ ...key, used: first, last_grant: first })
        .onConflict((conflict) =>
          conflict
            .columns(['source', 'destination', 'day'])
            .doUpdateSet(grantFrom('source_warmup_counts', block, allowance))
            .where('source_warmup_counts.used', '<', allowance),
        )
        .returning('last_grant')
        .executeTakeFirst();
      return row ? Number(row.last_grant) : 0;
    },

    /** What each destination took of a domain's day (every source), the most first. */
    async usedOn(domainId: string, day: string): Promise<Array<{ destination: string; used: number }>> {
      const rows = await db
        .selectFrom('warmup_counts')
        .select((eb) => ['destination', eb.fn.sum<string | number>('used').as('used')])
        .where('domain_id', '=', domainId)
        .where('day', '=', day)
        .groupBy('destination')
        .execute();
      return rows
        .map((row) => ({ destination: row.destination, used: Number(row.used) }))
        .sort((a, b) => b.used - a.used || a.destination.localeCompare(b.destination));
    },

    /** Forgets the counts of days before `beforeDay` (YYYY-MM-DD). */
    async pruneCounts(beforeDay: string): Promise<void> {
      await db.deleteFrom('warmup_counts').where('day', '<', beforeDay).execute();
      await db.deleteFrom('source_warmup_counts').where('day', '<', beforeDay).execute();
    },
  };
}

export type WarmupsRepo = ReturnType<typeof createWarmupsRepo>;
