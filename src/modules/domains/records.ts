import type { DomainStatus } from '../../db/schema.ts';
import type { Dns } from '../../lib/dns.ts';
import { dkimRecordMatches, dkimRecordValue } from './dkim-key.ts';

/** The label of a domain's return-path subdomain: envelope senders are `bounce+…@bounces.<domain>`. */
export const RETURN_PATH_LABEL = 'bounces';

export const returnPathName = (domain: string): string => `${RETURN_PATH_LABEL}.${domain}`;

/** Where a project publishes its challenge to take over a name another project holds. */
export const CHALLENGE_LABEL = '_postwire-challenge';
/** What a challenge record holds before the token: `postwire-verification=<token>`. */
export const CHALLENGE_PREFIX = 'postwire-verification=';

export const challengeName = (domain: string): string => `${CHALLENGE_LABEL}.${domain}`;

/** What the records of a domain depend on besides the domain: the return path, when VERP is on. */
export interface RecordSettings {
  /** Present when per-recipient return paths are on (BOUNCE_DOMAIN) and INBOUND_MX_HOST names our listener. */
  returnPath?: { mxHost: string; spf?: string | undefined } | undefined;
  /** INBOUND_MX_HOST: where a domain that receives mail points its own MX. Absent: no domain can receive. */
  receivingMxHost?: string | undefined;
}

/** The part of a domain its records are made from. */
export interface DomainKeys {
  name: string;
  dkimSelector: string;
  dkimPublicKey: string;
  nextDkimSelector: string | null;
  nextDkimPublicKey: string | null;
  challengeToken: string;
  /** Its owner asked to receive mail for it: its MX is then one of its records. */
  receiving?: boolean;
}

export type RecordPurpose = 'challenge' | 'dkim' | 'return_path' | 'receiving' | 'dmarc';

export interface ExpectedRecord {
  /** `<TYPE> <name>`: how a check is stored. */
  key: string;
  purpose: RecordPurpose;
  type: 'TXT' | 'MX';
  name: string;
  value: string;
  priority?: number;
  /** Needed for the domain to be verified (DKIM, the return path); DMARC is a suggestion. */
  required: boolean;
  /** DKIM during a rotation: the key that still signs (`retiring`), or the new one (`next`). */
  rotation?: 'retiring' | 'next';
  matches(found: readonly string[]): boolean;
}

/** What one lookup found: the values (null: no such record, or the lookup failed) and whether one matches. */
export interface RecordCheck {
  found: string[] | null;
  matches: boolean;
  /** The DNS error code when the lookup failed for another reason than "no such record" (ETIMEOUT, …). */
  error?: string;
}

const normalizeSpf = (text: string) => text.trim().replace(/\s+/g, ' ').toLowerCase();
const isSpf = (text: string) => /^v=spf1(\s|$)/i.test(text.trim());
const isDmarc = (text: string) => /^v=DMARC1\s*(;|$)/i.test(text.trim());
const bareHost = (host: string) => host.toLowerCase().replace(/\.$/, '');

const isChallenge = (text: string) => text.trim().startsWith(CHALLENGE_PREFIX);

/**
 * The records a domain asks its owner to publish, in the order they are shown. `challenge`: with the
 * challenge record first, required (another project holds the name or a parent of it).
 */
export function expectedRecords(
  domain: DomainKeys,
  settings: RecordSettings,
  challenge = false,
): ExpectedRecord[] {
  const records: ExpectedRecord[] = [];
  if (challenge) {
    const name = challengeName(domain.name);
    const value = `${CHALLENGE_PREFIX}${domain.challengeToken}`;
    records.push({
      key: `TXT ${name}`,
      purpose: 'challenge',
      type: 'TXT',
      name,
      value,
      required: true,
      // Exactly one, and ours: with two projects' tokens published, neither may take the name from the other.
      matches: (found) => {
        const tokens = found.filter(isChallenge);
        return tokens.length === 1 && tokens[0]!.trim() === value;
      },
    });
  }
  const dkim = (selector: string, publicKey: string, rotation?: 'retiring' | 'next'): ExpectedRecord => {
    const name = `${selector}._domainkey.${domain.name}`;
    return {
      key: `TXT ${name}`,
      purpose: 'dkim',
      type: 'TXT',
      name,
      value: dkimRecordValue(publicKey),
      required: rotation !== 'next',
      ...(rotation ? { rotation } : {}),
      matches: (found) => found.some((text) => dkimRecordMatches(text, publicKey)),
    };
  };
  const rotating = domain.nextDkimSelector !== null && domain.nextDkimPublicKey !== null;
  records.push(dkim(domain.dkimSelector, domain.dkimPublicKey, rotating ? 'retiring' : undefined));
  if (rotating) records.push(dkim(domain.nextDkimSelector!, domain.nextDkimPublicKey!, 'next'));

  const returnPath = settings.returnPath;
  if (returnPath) {
    const name = returnPathName(domain.name);
    records.push({
      key: `MX ${name}`,
      purpose: 'return_path',
      type: 'MX',
      name,
      value: returnPath.mxHost,
      priority: 10,
      required: true,
      matches: (found) => found.some((entry) => bareHost(entry.split(' ').at(-1)!) === returnPath.mxHost),
    });
    const spf = returnPath.spf;
    if (spf !== undefined) {
      records.push({
        key: `TXT ${name}`,
        purpose: 'return_path',
        type: 'TXT',
        name,
        value: spf,
        required: true,
        // Two SPF records are a permanent error for receivers (RFC 7208 §4.5): exactly one, and ours.
        matches: (found) => {
          const policies = found.filter(isSpf);
          return policies.length === 1 && normalizeSpf(policies[0]!) === normalizeSpf(spf);
        },
      });
    }
  }

  if (domain.receiving && settings.receivingMxHost !== undefined) {
    const mxHost = settings.receivingMxHost;
    records.push({
      key: `MX ${domain.name}`,
      purpose: 'receiving',
      type: 'MX',
      name: domain.name,
      value: mxHost,
      priority: 10,
      // Its own verdict (receiving_verified) rather than the domain's status: turning receiving on never
      // stops a verified domain from sending while its MX is being published.
      required: false,
      // Every MX at the name must be ours: mail sent to another host would never reach the routes.
      matches: (found) =>
        found.length > 0 && found.every((entry) => bareHost(entry.split(' ').at(-1)!) === mxHost),
    });
  }

  const dmarcName = `_dmarc.${domain.name}`;
  records.push({
    key: `TXT ${dmarcName}`,
    purpose: 'dmarc',
    type: 'TXT',
    name: dmarcName,
    // A starting point that reports without rejecting; the owner tightens it once reports look right.
    value: 'v=DMARC1; p=none; adkim=r; aspf=r',
    required: false,
    matches: (found) => found.filter(isDmarc).length === 1,
  });
  return records;
}

/** Looks one record up. "No such name" and "no such record" are `found: null`; other failures say why. */
export async function lookUp(dns: Pick<Dns, 'resolveTxt' | 'resolveMx'>, record: ExpectedRecord) {
  let values: string[];
  try {
    values =
      record.type === 'MX'
        ? (await dns.resolveMx(record.name)).map((mx) => `${mx.priority} ${mx.exchange}`)
        : (await dns.resolveTxt(record.name)).map((strings) => strings.join(''));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'EUNKNOWN';
    if (code === 'ENOTFOUND' || code === 'ENODATA') return { found: null, matches: false } as RecordCheck;
    return { found: null, matches: false, error: code } as RecordCheck;
  }
  // Only what concerns the record: the SPF and DMARC policies and challenge tokens among other TXT records at
  // the same name.
  const relevant =
    record.purpose === 'dmarc'
      ? values.filter(isDmarc)
      : record.purpose === 'challenge'
        ? values.filter(isChallenge)
        : record.purpose === 'return_path' && record.type === 'TXT'
          ? values.filter(isSpf)
          : values;
  return {
    found: relevant.length > 0 ? relevant : null,
    matches: relevant.length > 0 && record.matches(relevant),
  } as RecordCheck;
}

export interface Evaluation {
  status: DomainStatus;
  returnPathVerified: boolean;
  /** The receiving MX is published (false when the domain does not receive). */
  receivingVerified: boolean;
  /** The rotation's new key is published: it signs from now on. */
  switchKey: boolean;
  /** A lookup failed (timeout, server failure): the status stays as it was. */
  inconclusive: boolean;
}

/**
 * The domain's status from its records' checks: `verified` when every required record matches; `failed`
 * when one is published with another value, or when a domain that was verified (or had failed) is not any
 * more; else `pending` (nothing published yet). A lookup that failed decides nothing.
 */
export function evaluate(
  previous: DomainStatus,
  checked: ReadonlyArray<{ record: ExpectedRecord; check: RecordCheck }>,
): Evaluation {
  const switchKey = checked.some(({ record, check }) => record.rotation === 'next' && check.matches);
  const required = checked.filter(
    ({ record }) => record.required || (switchKey && record.rotation === 'next'),
  );
  // Once the new key is published, the retiring one no longer has to be.
  const deciding = switchKey ? required.filter(({ record }) => record.rotation !== 'retiring') : required;
  const returnPath = checked.filter(({ record }) => record.purpose === 'return_path');
  const returnPathVerified = returnPath.length > 0 && returnPath.every(({ check }) => check.matches);
  const receiving = checked.filter(({ record }) => record.purpose === 'receiving');
  const receivingVerified = receiving.length > 0 && receiving.every(({ check }) => check.matches);
  const inconclusive = deciding.some(({ check }) => check.error !== undefined);
  let status: DomainStatus;
  if (deciding.every(({ check }) => check.matches)) status = 'verified';
  else if (previous !== 'pending' || deciding.some(({ check }) => check.found !== null && !check.matches)) {
    status = 'failed';
  } else status = 'pending';
  return {
    status: inconclusive ? previous : status,
    returnPathVerified,
    receivingVerified,
    switchKey,
    inconclusive,
  };
}
