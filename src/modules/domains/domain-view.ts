import type { DomainStatus } from '../../db/schema.ts';
import { isReservedTestName } from './domain-name.ts';
import type { DomainSettings } from './domain-settings.ts';
import type { DomainState } from './domain-state.ts';
import type { DomainRecordViewType, DomainView } from './domains.schemas.ts';
import { expectedRecords, type RecordSettings, returnPathName } from './records.ts';

// A domain as the API shows it (its records, each with what its last check found) and as its events carry it.

/** What a domain's view says when its records are taken as published without looking DNS up. */
const WITHOUT_DNS_REASON =
  'capture mode and a reserved test name: its records count as published, without DNS (TEST_DOMAINS_WITHOUT_DNS)';

export function createDomainViews(settings: DomainSettings) {
  const recordSettings: RecordSettings = {
    returnPath: settings.returnPath,
    receivingMxHost: settings.receivingMxHost,
  };

  /**
   * Whether a domain's records count as published without a lookup: on a server in capture mode (nothing
   * leaves it), for a name no one can register. Everywhere else, test names are looked up like any other.
   */
  const verifiesWithoutDns = (name: string): boolean =>
    settings.testNamesWithoutDns === true && isReservedTestName(name);

  function toView(domain: DomainState): DomainView {
    const records = expectedRecords(domain, recordSettings, domain.challengeRequired).map(
      (record): DomainRecordViewType => {
        const check = domain.checks?.[record.key];
        const status = !check ? 'pending' : check.matches ? 'verified' : check.found ? 'failed' : 'pending';
        return {
          purpose: record.purpose,
          type: record.type,
          name: record.name,
          value: record.value,
          ...(record.priority !== undefined ? { priority: record.priority } : {}),
          required: record.required,
          status,
          ...(check ? { found: check.found, matches: check.matches } : {}),
          ...(check?.error !== undefined ? { error: check.error } : {}),
          ...(record.rotation ? { rotation: record.rotation } : {}),
        };
      },
    );
    return {
      object: 'domain',
      id: domain.id,
      name: domain.name,
      status: domain.status,
      dkim_selector: domain.dkimSelector,
      return_path_domain: settings.returnPath ? returnPathName(domain.name) : null,
      return_path_verified: domain.returnPathVerified,
      challenge_required: domain.challengeRequired,
      receiving: domain.receiving,
      receiving_verified: domain.receivingVerified,
      dmarc_reports: domain.dmarcReports,
      verified_without_dns: verifiesWithoutDns(domain.name) ? WITHOUT_DNS_REASON : null,
      records,
      compliance: domain.compliance,
      last_checked_at: domain.lastCheckedAt,
      verified_at: domain.verifiedAt,
      created_at: domain.createdAt,
      updated_at: domain.updatedAt,
    };
  }

  return { recordSettings, verifiesWithoutDns, toView };
}

export type DomainViews = ReturnType<typeof createDomainViews>;

/** The data of `domain.verified` and `domain.failed`: the domain as the API shows it, and what it was. */
export function domainEventData(view: DomainView, previous: DomainStatus): Record<string, unknown> {
  return {
    domain_id: view.id,
    name: view.name,
    status: view.status,
    previous_status: previous,
    challenge_required: view.challenge_required,
    receiving: view.receiving,
    receiving_verified: view.receiving_verified,
    records: view.records.map((record) => ({
      purpose: record.purpose,
      type: record.type,
      name: record.name,
      value: record.value,
      status: record.status,
      found: record.found ?? null,
    })),
  };
}
