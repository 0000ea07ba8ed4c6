import { isIPv4 } from 'node:net';
import { type ComplianceCheck, type ComplianceDns, result } from './compliance-check.ts';
import type { ComplianceSettings } from './domain-settings.ts';

// The compliance checks of how mail leaves rather than of the domain: the sending host's reverse DNS and
// HELO (direct mode, where MAIL_HOSTNAME names the host), TLS, and one-click List-Unsubscribe.

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

/** FCrDNS of the sending host (each address's PTR resolves back to it) and HELO = that PTR; direct mode only. */
export async function hostChecks(
  dns: ComplianceDns,
  settings: ComplianceSettings,
): Promise<ComplianceCheck[]> {
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

export function transportChecks(settings: ComplianceSettings): ComplianceCheck[] {
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
