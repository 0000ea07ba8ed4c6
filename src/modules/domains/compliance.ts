import { createPublicKey } from 'node:crypto';
import {
  type ComplianceCheck,
  type ComplianceDns,
  type ComplianceSubject,
  result,
} from './compliance-check.ts';
import type { ComplianceSettings } from './domain-settings.ts';
import { returnPathName } from './records.ts';
import { hostChecks, transportChecks } from './sending-host-checks.ts';
import { SPF_LOOKUP_LIMIT, walkSpf } from './spf-walk.ts';

export type { ComplianceCheck } from './compliance-check.ts';
export { reverseName } from './sending-host-checks.ts';

// The preflight an operator reads before the first send (issue 38): what the large receivers (Gmail, Yahoo,
// Microsoft's bulk-sender rules of 2024–2025) check of a sender, looked up the way they look it up. Run by
// the domain check, outside its transaction, and stored with the records' checks (domain-check.ts).

const txtAt = (dns: ComplianceDns, name: string): Promise<string[]> =>
  dns.resolveTxt(name).then(
    (records) => records.map((strings) => strings.join('')),
    () => [],
  );

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
  // Where this server reads reports: dmarc@<BOUNCE_DOMAIN>, and the domain's own address when it asked.
  const addresses = [
    ...(settings.bounceDomain ? [`dmarc@${settings.bounceDomain}`] : []),
    ...(domain.dmarcReports ? [`dmarc@${domain.name}`] : []),
  ];
  if (addresses.length > 0) {
    const rua = (tags.get('rua') ?? '')
      .toLowerCase()
      .split(',')
      .map((uri) => uri.trim().replace(/!.*$/, ''));
    const named = addresses.find((address) => rua.includes(`mailto:${address}`));
    checks.push(
      named
        ? result(
            'dmarc_reports',
            'pass',
            `Aggregate reports go to ${named}, where this server reads them (GET /v1/domains/{id}/dmarc).`,
          )
        : result(
            'dmarc_reports',
            'warn',
            `Add rua=mailto:${addresses[0]} to the policy so this server reads the aggregate reports.`,
          ),
    );
  }
  return checks;
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
