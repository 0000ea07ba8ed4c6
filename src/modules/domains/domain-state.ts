import { selfAndParents } from './domain-name.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { DomainCoverage, DomainRecord, DomainRepo } from './domains.repo.ts';

// Who holds a name: a domain's verified holders in other projects, and whether it needs its challenge.

/** A domain with what its view needs besides its own row. */
export interface DomainState extends DomainRecord {
  /**
   * Another project holds the name, or a parent of it, verified, and this domain is not verified: it needs
   * its challenge record (besides its other records) to verify.
   */
  challengeRequired: boolean;
}

/** Other projects' verified domains among the domain's name and its parents: what stands in its way. */
export function holdersOf(
  domain: Pick<DomainRecord, 'projectId' | 'name'>,
  verified: readonly DomainCoverage[],
): DomainCoverage[] {
  const names = new Set(selfAndParents(domain.name));
  return verified.filter((holder) => holder.projectId !== domain.projectId && names.has(holder.name));
}

/**
 * A verified domain stays verified while its own records match: a parent another project verifies later
 * does not take it away (most specific wins when signing). Only one that is not verified needs its challenge.
 */
export const withClaims = (domain: DomainRecord, verified: readonly DomainCoverage[]): DomainState => ({
  ...domain,
  challengeRequired: domain.status !== 'verified' && holdersOf(domain, verified).length > 0,
});

/**
 * The domains with whether each needs its challenge: one query for them all (none when all are verified),
 * in `transaction` when given (to see its own writes).
 */
export async function withStates(
  domains: readonly DomainRecord[],
  repo: Pick<DomainRepo, 'verifiedAmong'>,
  transaction?: Transaction,
): Promise<DomainState[]> {
  const open = domains.filter((domain) => domain.status !== 'verified');
  const names = [...new Set(open.flatMap((domain) => selfAndParents(domain.name)))];
  const verified = await repo.verifiedAmong(names, transaction);
  return domains.map((domain) => withClaims(domain, verified));
}
