import { type Kysely, sql } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import { idAt, newId } from '../../lib/ids.ts';
import type { AggregateReport } from './aggregate-xml.ts';
import type { Transaction } from '../../db/transaction.ts';

// The dmarc_records table: a report's records written once per domain, and the sums the API shows.

/** Rows per INSERT: a report of thousands of records is written in a few statements. */
const INSERT_BATCH = 500;

/** Messages of the records summed, and of those how many passed or were acted on. */
interface Sums {
  messages: number;
  dkimPass: number;
  spfPass: number;
  dmarcPass: number;
  quarantined: number;
  rejected: number;
}

export type SourceSum = Sums & { sourceIp: string; reporterOrg: string };
export type PeriodSums = Sums & { reports: number };

const SUMS = {
  messages: sql<string | number>`coalesce(sum(message_count), 0)`,
  dkimPass: sql<string | number>`coalesce(sum(case when dkim = 'pass' then message_count else 0 end), 0)`,
  spfPass: sql<string | number>`coalesce(sum(case when spf = 'pass' then message_count else 0 end), 0)`,
  dmarcPass: sql<
    string | number
  >`coalesce(sum(case when dkim = 'pass' or spf = 'pass' then message_count else 0 end), 0)`,
  quarantined: sql<
    string | number
  >`coalesce(sum(case when disposition = 'quarantine' then message_count else 0 end), 0)`,
  rejected: sql<
    string | number
  >`coalesce(sum(case when disposition = 'reject' then message_count else 0 end), 0)`,
};

const numbers = <T extends Record<string, unknown>>(row: T, keys: ReadonlyArray<keyof T>) => {
  const out: Record<string, unknown> = { ...row };
  for (const key of keys) out[key as string] = Number(row[key]);
  return out;
};
const SUM_KEYS = ['messages', 'dkimPass', 'spfPass', 'dmarcPass', 'quarantined', 'rejected'] as const;

export function createDmarcRepo(db: Kysely<Database>) {
  return {
    /** Writes a report's records for a domain; 0 when it was stored before (a second read of one mail). */
    async store(
      domain: { id: string; projectId: string },
      report: AggregateReport,
      transaction: Transaction,
    ): Promise<number> {
      let written = 0;
      for (let at = 0; at < report.rows.length; at += INSERT_BATCH) {
        const rows = report.rows.slice(at, at + INSERT_BATCH).map((row, offset) => ({
          id: newId('dmr'),
          project_id: domain.projectId,
          domain_id: domain.id,
          reporter_org: report.orgName,
          report_id: report.reportId,
          row_index: at + offset,
          begin_at: report.begin,
          end_at: report.end,
          source_ip: row.sourceIp,
          message_count: row.count,
          disposition: row.disposition,
          dkim: row.dkim,
          spf: row.spf,
          header_from: row.headerFrom,
        }));
        const result = await transaction.db
          .insertInto('dmarc_records')
          .values(rows)
          .onConflict((conflict) =>
            conflict.columns(['domain_id', 'reporter_org', 'report_id', 'row_index']).doNothing(),
          )
          .executeTakeFirst();
        written += Number(result.numInsertedOrUpdatedRows ?? 0);
      }
      return written;
    },

    /** The sums of a domain's records whose report began within [from, to). */
    async period(domainId: string, from: string, to: string): Promise<PeriodSums> {
      const row = await db
        .selectFrom('dmarc_records')
        .where('domain_id', '=', domainId)
        .where('begin_at', '>=', from)
        .where('begin_at', '<', to)
        .select([
          sql<string | number>`count(distinct reporter_org || ' ' || report_id)`.as('reports'),
          ...Object.entries(SUMS).map(([name, expression]) => expression.as(name)),
        ])
        .executeTakeFirstOrThrow();
      return numbers(row as Record<string, unknown>, ['reports', ...SUM_KEYS]) as unknown as PeriodSums;
    },

    /** The same, per source IP and reporter, most messages first. */
    async sources(domainId: string, from: string, to: string, limit: number): Promise<SourceSum[]> {
      const rows = await db
        .selectFrom('dmarc_records')
        .where('domain_id', '=', domainId)
        .where('begin_at', '>=', from)
        .where('begin_at', '<', to)
        .groupBy(['source_ip', 'reporter_org'])
        .select([
          'source_ip as sourceIp',
          'reporter_org as reporterOrg',
          ...Object.entries(SUMS).map(([name, expression]) => expression.as(name)),
        ])
        .orderBy(sql`coalesce(sum(message_count), 0)`, 'desc')
        .orderBy('source_ip')
        .orderBy('reporter_org')
        .limit(limit)
        .execute();
      return rows.map((row) => numbers(row as Record<string, unknown>, SUM_KEYS) as unknown as SourceSum);
    },

    /** RETENTION: records stored before the cutoff (their ids are made when stored). */
    pruneTargets: (cutoff: Date): PruneTarget[] => [
      pruneTarget(db, 'dmarc_records', 'id', sql<boolean>`id < ${idAt('dmr', cutoff)}`),
    ],
  };
}

export type DmarcRepo = ReturnType<typeof createDmarcRepo>;
