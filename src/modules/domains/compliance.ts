import { createPublicKey } from 'node:crypto';
import { isIPv4 } from 'node:net';
import type { Dns } from '../../lib/dns.ts';
import type { ComplianceSettings } from './domain-settings.ts';
import { returnPathName } from './records.ts';
import { SPF_LOOKUP_LIMIT, walkSpf } from './spf-walk.ts';

// The preflight an operator reads before the first send (issue 38): what the large receivers (Gmail, Yahoo,
// Microsoft's bulk-sender rules of 2024–2025) check of a sender, looked up the way they look it up. Run by
// the domain check, outside its transaction, and stored with the records' checks (domain-check.ts).

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
}

type ComplianceDns = Pick<Dns, 'resolveTxt' | 'resolveMx' | 'resolveAddresses' | 'resolve'>;

const result = (check: ComplianceCheckId, status: ComplianceStatus, reason: string): ComplianceCheck => ({
  check,
  status,
  reason,
});

const txtAt = (dns: ComplianceDns, name: string): Promise<string[]> =>
  dns.resolveTxt(name).then(
    (records) => records.map((strings) => strings.join('')),
    () => [],
  );

/** `1.2.3.4` → `4.3.2.1.in-addr.arpa`; IPv6 by nibbles under ip6.arpa (RFC 3596 §2.5). */
export function reverseName(address: string): string {
  if (isIPv4(address)) return `${address.split('.').reverse().join('.')}.in-addr.arpa`;
  const [head = '', tail = ''] = address.split('::');
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const left = groups(head);
  const right = groups(tail);
  const full = [...left, ...Array(8 - left.length - right.length).fill('0'), ...right];
  const nibbles = full.map((group: string) => group.padStart(4, '0')).join('');
  return `${[...nibbles].reverse().join('.')}.ip6.arpa`;
}

const bare = (host: string) => host.toLowerCase().replace(/\.$/, '');

/** The modulus (or curve) size of a published DKIM key, from its `p=` tag; undefined when unreadable. */
function dkimKeyBits(record: string): { bits: number; type: string } | undefined {
  const tags = new Map(
    record.split(';').map((part) => {
      const at = part.indexOf('=');
      return [part.slice(0, at).trim().toLowerCase(), part.slice(at + 1).replace(/\s+/g, '')] as const;
    }),
  );
  const p = tags.get('p');
  if (!p) return undefined;
  if (tags.get('k')?.toLowerCase() === 'ed25519') return { bits: 256, type: 'ed25519' };
  try {
    const key = createPublicKey({ key: Buffer.from(p, 'base64'), format: 'der', type: 'spki' });
    return { bits: key.asymmetricKeyDetails?.modulusLength ?? 0, type: key.asymmetricKeyType ?? 'rsa' };
  } catch {
    return undefined;
  }
}

async function spfChecks(dns: ComplianceDns, domain: ComplianceSubject, settings: ComplianceSettings) {
  // SPF is checked at the envelope sender's domain: the return path when there is one, else the domain.
  const envelope = settings.returnPath ? returnPathName(domain.name) : domain.name;
  const walk = await walkSpf(dns, envelope);
  const checks: ComplianceCheck[] = [];
  if (walk.record === null) {
    const why = walk.duplicate
      ? `${envelope} publishes more than one v=spf1 record, which receivers treat as a permanent error.`
      : `${envelope} publishes no SPF record, so receivers cannot tell which hosts may send as it.`;
    return [result('spf', 'fail', why)];
  }
  checks.push(result('spf', 'pass', `${envelope} publishes one SPF record: ${walk.record}`));
  const count = `${walk.lookups}${walk.truncated ? '+' : ''}`;
  checks.push(
    walk.lookups > SPF_LOOKUP_LIMIT
      ? result(
          'spf_lookups',
          'fail',
          `The policy takes ${count} DNS lookups; past ${SPF_LOOKUP_LIMIT} receivers answer permerror and SPF fails.`,
        )
      : walk.problems.length > 0
        ? result(
            'spf_lookups',
            'warn',
            `${walk.lookups} DNS lookups, but part of the policy cannot be read (${walk.problems.join('; ')}).`,
          )
        : result(
            'spf_lookups',
            'pass',
            `The policy takes ${walk.lookups} of the ${SPF_LOOKUP_LIMIT} DNS lookups receivers allow.`,
          ),
  );
  const addresses = settings.sendingHost ? await dns.resolveAddresses(settings.sendingHost) : [];
  if (settings.transport !== 'direct') {
    checks.push(
      result(
        'spf_sending_host',
        'warn',
        settings.transport === 'relay'
          ? "Mail leaves through the relay (SMTP_URL), whose addresses this server cannot see: check that the policy includes the relay provider's SPF."
          : 'Nothing leaves this server (capture mode), so there is no sending host to look for.',
      ),
    );
  } else if (addresses.length === 0) {
    checks.push(
      result(
        'spf_sending_host',
        'warn',
        `The sending host's name (${settings.sendingHost ?? 'MAIL_HOSTNAME unset'}) has no address to look for in the policy; set MAIL_HOSTNAME to the name of this server's public IP.`,
      ),
    );
  } else {
    const missing = addresses.filter((address) => !walk.authorizes(address));
    checks.push(
      missing.length === 0
        ? result(
            'spf_sending_host',
            'pass',
            `The policy authorizes ${addresses.join(', ')}, the addresses of ${settings.sendingHost}.`,
          )
        : result(
            'spf_sending_host',
            'fail',
            `The policy does not authorize ${missing.join(', ')} (${settings.sendingHost}): add ip4:/ip6: or a:${settings.sendingHost}.`,
          ),
    );
  }
  return checks;
}

async function dkimCheck(dns: ComplianceDns, domain: ComplianceSubject): Promise<ComplianceCheck> {
  const name = `${domain.dkimSelector}._domainkey.${domain.name}`;
  const key = (await txtAt(dns, name)).map(dkimKeyBits).find((found) => found !== undefined);
  if (!key) return result('dkim_key', 'fail', `No readable DKIM key is published at ${name}.`);
  if (key.type === 'ed25519') {
    return result(
      'dkim_key',
      'warn',
      'An Ed25519 key: strong, but many receivers cannot verify it yet; pair it with RSA 2048.',
    );
  }
  if (key.bits >= 2048)
    return result('dkim_key', 'pass', `The published key is RSA ${key.bits} bits (2048 or more).`);
  return result(
    'dkim_key',
    key.bits >= 1024 ? 'warn' : 'fail',
    `The published key is RSA ${key.bits} bits; receivers expect 2048 (RFC 8301 refuses less than 1024).`,
  );
}

async function dmarcChecks(dns: ComplianceDns, domain: ComplianceSubject, settings: ComplianceSettings) {
  const policies = (await txtAt(dns, `_dmarc.${domain.name}`)).filter((text) =>
    /^v=DMARC1\s*(;|$)/i.test(text.trim()),
  );
  if (policies.length !== 1) {
    const why =
      policies.length === 0 ? 'No DMARC policy is published' : 'More than one DMARC policy is published';
    return [
      result(
        'dmarc',
        'fail',
        `${why} at _dmarc.${domain.name}; Gmail and Yahoo require one of bulk senders.`,
      ),
    ];
  }
  const tags = new Map(
    policies[0]!
      .split(';')
      .map(
        (part) =>
          [part.split('=')[0]!.trim().toLowerCase(), part.split('=').slice(1).join('=').trim()] as const,
      ),
  );
  const policy = tags.get('p')?.toLowerCase();
  const checks = [
    policy === 'quarantine' || policy === 'reject'
      ? result('dmarc', 'pass', `DMARC is published with p=${policy}.`)
      : result(
          'dmarc',
          'warn',
          `DMARC is published with p=${policy ?? '(missing)'}: it only monitors, and BIMI logos need p=quarantine or p=reject.`,
        ),
  ];
  if (settings.bounceDomain) {
    const address = `dmarc@${settings.bounceDomain}`;
    const rua = (tags.get('rua') ?? '')
      .toLowerCase()
      .split(',')
      .map((uri) => uri.trim().replace(/!.*$/, ''));
    checks.push(
      rua.includes(`mailto:${address}`)
        ? result(
            'dmarc_reports',
            'pass',
            `Aggregate reports go to ${address}, where this server reads them (GET /v1/domains/{id}/dmarc).`,
          )
        : result(
            'dmarc_reports',
            'warn',
            `Add rua=mailto:${address} to the policy so this server reads the aggregate reports.`,
          ),
    );
  }
  return checks;
}

/** FCrDNS of the sending host (each address's PTR resolves back to it) and HELO = that PTR; direct mode only. */
async function hostChecks(dns: ComplianceDns, settings: ComplianceSettings): Promise<ComplianceCheck[]> {
  const host = settings.sendingHost;
  if (!host)
    return [
      result(
        'reverse_dns',
        'warn',
        'MAIL_HOSTNAME is not set: receivers see the machine name in HELO, which rarely has reverse DNS.',
      ),
    ];
  const addresses = await dns.resolveAddresses(host);
  if (addresses.length === 0)
    return [result('reverse_dns', 'fail', `${host} (MAIL_HOSTNAME, the HELO name) has no A or AAAA record.`)];
  const names = await Promise.all(
    addresses.map((address) =>
      dns.resolve(reverseName(address), 'PTR').then(
        (found) => (found as string[]).map(bare),
        () => [] as string[],
      ),
    ),
  );
  const confirmed = await Promise.all(
    names.map(async (ptrs, index) => {
      for (const ptr of ptrs) if ((await dns.resolveAddresses(ptr)).includes(addresses[index]!)) return ptr;
      return undefined;
    }),
  );
  const broken = addresses.filter((_, index) => confirmed[index] === undefined);
  const checks = [
    broken.length === 0
      ? result('reverse_dns', 'pass', `Each address of ${host} has a PTR that resolves back to it.`)
      : result(
          'reverse_dns',
          'fail',
          `${broken.join(', ')} has no PTR that resolves back to it; Gmail and Microsoft refuse such senders.`,
        ),
  ];
  const others = confirmed.filter((ptr) => ptr !== undefined && ptr !== bare(host));
  checks.push(
    broken.length === 0 && others.length === 0
      ? result('helo', 'pass', `HELO ${host} is the PTR name of each sending address.`)
      : result(
          'helo',
          'warn',
          `HELO ${host} is not the PTR name of every sending address${others.length ? ` (PTR: ${[...new Set(others)].join(', ')})` : ''}.`,
        ),
  );
  return checks;
}

function transportChecks(settings: ComplianceSettings): ComplianceCheck[] {
  const tls =
    settings.transport === 'direct'
      ? result('tls', 'pass', 'Direct mode uses STARTTLS with every receiver that offers it.')
      : settings.transport === 'relay'
        ? settings.relayTls
          ? result('tls', 'pass', 'The relay is reached over TLS (smtps://).')
          : result(
              'tls',
              'warn',
              'The relay is reached over smtp:// and upgrades only when it offers STARTTLS.',
            )
        : result('tls', 'warn', 'Nothing leaves this server (capture mode).');
  const unsubscribe = !settings.publicUrl
    ? result(
        'list_unsubscribe',
        'fail',
        'PUBLIC_URL is not set, so no send can carry one-click List-Unsubscribe, which Gmail and Yahoo require of bulk mail.',
      )
    : settings.listUnsubscribe
      ? result(
          'list_unsubscribe',
          'pass',
          'Every send carries one-click List-Unsubscribe unless it asks otherwise (LIST_UNSUBSCRIBE).',
        )
      : result(
          'list_unsubscribe',
          'warn',
          'Sends carry List-Unsubscribe only when they ask (unsubscribe: true); bulk mail must.',
        );
  return [tls, unsubscribe];
}

/** Every check of a domain, in a fixed order. Lookups go through `dns` (DNS_SERVERS); never in a transaction. */
export async function checkCompliance(
  dns: ComplianceDns,
  domain: ComplianceSubject,
  settings: ComplianceSettings,
): Promise<ComplianceCheck[]> {
  const [spf, dkim, dmarc, host] = await Promise.all([
    spfChecks(dns, domain, settings),
    dkimCheck(dns, domain),
    dmarcChecks(dns, domain, settings),
    settings.transport === 'direct' ? hostChecks(dns, settings) : Promise.resolve([]),
  ]);
  return [...spf, dkim, ...dmarc, ...host, ...transportChecks(settings)];
}
