import type { Dns } from '../../lib/dns.ts';

// What a compliance check is (compliance.ts runs them; sending-host-checks.ts holds the host's and the
// transport's).

export type ComplianceStatus = 'pass' | 'warn' | 'fail';
export type ComplianceCheckId =
  | 'spf'
  | 'spf_lookups'
  | 'spf_sending_host'
  | 'dkim_key'
  | 'dmarc'
  | 'dmarc_reports'
  | 'reverse_dns'
  | 'helo'
  | 'tls'
  | 'list_unsubscribe';

export interface ComplianceCheck {
  check: ComplianceCheckId;
  status: ComplianceStatus;
  /** One sentence: why this status. */
  reason: string;
}

export interface ComplianceSubject {
  name: string;
  dkimSelector: string;
  /** Its project reads the DMARC reports mailed to `dmarc@<name>` (PATCH /v1/domains/{id}). */
  dmarcReports?: boolean;
}

export type ComplianceDns = Pick<Dns, 'resolveTxt' | 'resolveMx' | 'resolveAddresses' | 'resolve'>;

export const result = (
  check: ComplianceCheckId,
  status: ComplianceStatus,
  reason: string,
): ComplianceCheck => ({
  check,
  status,
  reason,
});
