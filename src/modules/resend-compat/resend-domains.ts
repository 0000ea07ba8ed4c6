import type { DomainState } from '../domains/domain-state.ts';
import type { DomainRecordViewType, DomainView } from '../domains/domains.schemas.ts';
import { CHALLENGE_PREFIX, challengeName } from '../domains/records.ts';
import { unsupportedField } from './resend-errors.ts';

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

// What Resend sets per domain and Postwire does not: refused when given, with what Postwire does instead.
const UNSUPPORTED: Record<string, string> = {
  custom_return_path:
    'Postwire does not take a custom return path: with per-recipient return paths on, it is `bounces.<domain>` (RETURN_PATH_DOMAIN settings).',
  open_tracking:
    'Postwire sets open tracking per send (`tracking.opens`) or for the server (TRACK_OPENS), not per domain.',
  click_tracking:
    'Postwire sets click tracking per send (`tracking.clicks`) or for the server (TRACK_CLICKS), not per domain.',
  tls: 'Postwire does not set TLS per domain: the transport decides (SMTP_URL, direct delivery).',
  tracking_subdomain: 'Postwire tracks on PUBLIC_URL, not on a subdomain per domain.',
};

/**
 * A domain create or update as Resend's SDK writes it, as Postwire's takes it: `capabilities.receiving` is
 * `receiving`; `region` is accepted and ignored (a Postwire server is where it runs).
 */
export function toPostwireDomain(body: unknown): unknown {
  if (!isObject(body)) return body;
  const { region: _region, capabilities, ...rest } = body;
  for (const [param, message] of Object.entries(UNSUPPORTED)) {
    if (rest[param] !== undefined && rest[param] !== null) throw unsupportedField(param, message);
    delete rest[param];
  }
  if (capabilities === undefined || capabilities === null) return rest;
  if (!isObject(capabilities)) return { ...rest, receiving: capabilities };
  if (capabilities.sending !== undefined && capabilities.sending !== 'enabled') {
    throw unsupportedField(
      'capabilities.sending',
      'A Postwire domain always sends: capabilities.sending must be "enabled".',
    );
  }
  const receiving = capabilities.receiving;
  return {
    ...rest,
    ...(receiving === undefined
      ? {}
      : { receiving: receiving === 'enabled' ? true : receiving === 'disabled' ? false : receiving }),
  };
}

// Resend's record kinds; Postwire's DMARC suggestion and its takeover challenge have names of their own.
const RECORD_NAMES: Record<DomainRecordViewType['purpose'], string> = {
  dkim: 'DKIM',
  return_path: 'SPF',
  receiving: 'Receiving',
  dmarc: 'DMARC',
  challenge: 'Verification',
};

function toResendRecord(record: DomainRecordViewType) {
  return {
    record: RECORD_NAMES[record.purpose],
    name: record.name,
    type: record.type,
    ttl: 'Auto',
    status: record.status,
    value: record.value,
    ...(record.priority !== undefined ? { priority: record.priority } : {}),
  };
}

// Resend answers a region; Postwire has none, so the one Resend defaults to.
const REGION = 'us-east-1';

/** A domain in a Resend list. */
export function toResendDomainListItem(domain: DomainView) {
  return {
    id: domain.id,
    name: domain.name,
    status: domain.status,
    created_at: domain.created_at,
    region: REGION,
    capabilities: {
      sending: 'enabled' as const,
      receiving: domain.receiving ? ('enabled' as const) : ('disabled' as const),
    },
  };
}

/** A domain as Resend's `domains.create` and `domains.get` answer it, records as Resend lists them. */
export function toResendDomain(domain: DomainView) {
  return {
    object: 'domain' as const,
    ...toResendDomainListItem(domain),
    records: domain.records.map(toResendRecord),
  };
}

const CLAIM_STATUSES = { pending: 'pending', verified: 'completed', failed: 'failed' } as const;

/**
 * Resend's `DomainClaim` over a domain: its id is the domain's, its record the domain's challenge (needed only
 * while another project holds the name; publishing it otherwise does no harm). A verified domain's claim is
 * `completed`; a failed one `failed`, with why. Postwire's challenge does not expire: `expires_at` is null.
 */
export function toResendClaim(domain: DomainState) {
  const status = CLAIM_STATUSES[domain.status as keyof typeof CLAIM_STATUSES] ?? 'pending';
  return {
    object: 'domain_claim' as const,
    id: domain.id,
    name: domain.name,
    status,
    domain_id: domain.id,
    region: 'us-east-1' as const,
    record: {
      type: 'TXT' as const,
      name: challengeName(domain.name),
      value: `${CHALLENGE_PREFIX}${domain.challengeToken}`,
      ttl: 'Auto' as const,
    },
    blocked_reason: null,
    failure_reason:
      status === 'failed'
        ? domain.challengeRequired
          ? 'Another project holds this name: publish the challenge record, then verify.'
          : "The domain's records do not match what it asks for (GET /v1/domains/{id} shows each check)."
        : null,
    created_at: domain.createdAt,
    expires_at: null,
  };
}
