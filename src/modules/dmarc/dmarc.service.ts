import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { type Clock, instantOf } from '../../lib/clock.ts';
import { invalidParam } from '../../lib/errors.ts';
import type { DomainService } from '../domains/domains.service.ts';
import type { AggregateReport } from './aggregate-xml.ts';
import type { DmarcRepo } from './dmarc.repo.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { DmarcSummaryQuery, DmarcSummaryView } from './dmarc.schemas.ts';

// DMARC aggregate reports: stored for the domain of the project that holds the reported name, and summed
// over a period for GET /v1/domains/{id}/dmarc.

const DAY = 86_400_000;
/** The period when none is given, and the longest one asked. */
const DEFAULT_DAYS = 30;
const MAX_DAYS = 366;
/** Sources listed at most (the busiest). */
const SOURCES = 100;

export interface StoredReport {
  status: 'applied' | 'no_change' | 'unmatched';
  projectId: string | null;
  detail: string;
}

export function createDmarcService(deps: {
  db: Kysely<Database>;
  repo: DmarcRepo;
  clock: Clock;
  domains: Pick<DomainService, 'holderOf' | 'get'>;
}) {
  const { repo } = deps;

  return {
    /**
     * Stores a report for the verified domain holding its name (each record once, however often read);
     * with `onlyFor` (a report mailed to a domain's own address), only if that project holds it.
     */
    async store(report: AggregateReport, onlyFor?: string): Promise<StoredReport> {
      const about = `a DMARC aggregate report from ${report.orgName} (${report.reportId}) about ${report.domain}`;
      const holder = await deps.domains.holderOf(report.domain);
      // Mailed to a domain's own address, it is its project's to read: whether another project holds the
      // name is not said (tenants are isolated).
      if (onlyFor !== undefined && holder?.projectId !== onlyFor) {
        return {
          status: 'unmatched',
          projectId: onlyFor,
          detail: `${about}: this project holds no verified domain of that name`,
        };
      }
      if (!holder) {
        return {
          status: 'unmatched',
          projectId: null,
          detail: `${about}: no project holds that domain verified`,
        };
      }
      // One report's records all or none: a read that fails halfway leaves nothing for the retry to skip.
      const written = await inTransaction(deps.db, (transaction) => repo.store(holder, report, transaction));
      return {
        status: written > 0 ? 'applied' : 'no_change',
        projectId: holder.projectId,
        detail:
          written > 0
            ? `${about}: ${written} records stored for ${holder.name} (${holder.id})`
            : `${about}: stored before, for ${holder.name} (${holder.id})`,
      };
    },

    async summary(projectId: string, idOrName: string, query: DmarcSummaryQuery): Promise<DmarcSummaryView> {
      const domain = await deps.domains.get(projectId, idOrName);
      const to = query.until ? instantOf(query.until) : deps.clock.now();
      const from = query.since ? instantOf(query.since) : new Date(to.getTime() - DEFAULT_DAYS * DAY);
      if (from.getTime() >= to.getTime()) throw invalidParam('since', '`since` must be before `until`.');
      if (to.getTime() - from.getTime() > MAX_DAYS * DAY) {
        throw invalidParam('since', `The period may be at most ${MAX_DAYS} days.`);
      }
      const [start, end] = [from.toISOString(), to.toISOString()];
      const [totals, sources] = await Promise.all([
        repo.period(domain.id, start, end),
        repo.sources(domain.id, start, end, SOURCES),
      ]);
      const counts = (sum: { messages: number; dkimPass: number; spfPass: number; dmarcPass: number }) => ({
        messages: sum.messages,
        dkim: { pass: sum.dkimPass, fail: sum.messages - sum.dkimPass },
        spf: { pass: sum.spfPass, fail: sum.messages - sum.spfPass },
        dmarc: { pass: sum.dmarcPass, fail: sum.messages - sum.dmarcPass },
      });
      const disposition = (sum: { messages: number; quarantined: number; rejected: number }) => ({
        none: sum.messages - sum.quarantined - sum.rejected,
        quarantine: sum.quarantined,
        reject: sum.rejected,
      });
      return {
        object: 'dmarc_summary',
        domain_id: domain.id,
        since: start,
        until: end,
        reports: totals.reports,
        ...counts(totals),
        disposition: disposition(totals),
        sources: sources.map((source) => ({
          source_ip: source.sourceIp,
          reporter: source.reporterOrg,
          ...counts(source),
          disposition: disposition(source),
        })),
      };
    },
  };
}

export type DmarcService = ReturnType<typeof createDmarcService>;
