import { BlockList, isIPv4, isIPv6 } from 'node:net';
import type { Dns } from '../../lib/dns.ts';

// An SPF policy walked the way a receiver walks it (RFC 7208): every term that costs a DNS lookup counted
// across includes and the redirect, and the networks it authorizes gathered, so the compliance check can say
// "under 10 lookups" and "includes the sending host" without sending a message.

/** RFC 7208 §4.6.4: past this many lookups a receiver answers permerror, and SPF fails for every message. */
export const SPF_LOOKUP_LIMIT = 10;
/** How far the walk goes past the limit before it stops: enough to report the count, bounded on loops. */
const WALK_LOOKUP_BOUND = 30;
const WALK_DEPTH_BOUND = 12;

export interface SpfWalk {
  /** The policy at the name (the one `v=spf1` record); null when there is none. */
  record: string | null;
  /** More than one `v=spf1` record at the name: a permerror for receivers (§4.5). */
  duplicate: boolean;
  /** Terms that cost a lookup (include, a, mx, ptr, exists, redirect), counted through includes. */
  lookups: number;
  /** The walk stopped at its bound (loops or a very long chain): `lookups` is a lower bound. */
  truncated: boolean;
  /** Includes or a redirect that could not be read (missing record, DNS failure), as `name: why`. */
  problems: string[];
  /** Whether an address is authorized by an ip4/ip6/a/mx term anywhere in the tree. */
  authorizes(address: string): boolean;
}

const isSpf = (text: string) => /^v=spf1(\s|$)/i.test(text.trim());

async function policiesAt(dns: Pick<Dns, 'resolveTxt'>, name: string): Promise<string[] | string> {
  try {
    return (await dns.resolveTxt(name)).map((strings) => strings.join('')).filter(isSpf);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'EUNKNOWN';
    return code === 'ENOTFOUND' || code === 'ENODATA' ? [] : code;
  }
}

/** Adds `address/prefix` to the list; a term written wrong (a receiver's permerror) adds nothing. */
function allow(list: BlockList, address: string, prefix: string | undefined) {
  const family = isIPv4(address) ? 'ipv4' : isIPv6(address) ? 'ipv6' : undefined;
  if (!family) return;
  const bits = prefix === undefined ? (family === 'ipv4' ? 32 : 128) : Number(prefix);
  if (!Number.isInteger(bits) || bits < 0 || bits > (family === 'ipv4' ? 32 : 128)) return;
  list.addSubnet(address, bits, family);
}

/** Walks the SPF policy at `name` (macros are counted, never expanded: their targets depend on a message). */
export async function walkSpf(dns: Pick<Dns, 'resolveTxt' | 'resolveMx' | 'resolveAddresses'>, name: string) {
  const allowed = new BlockList();
  const walk: SpfWalk = {
    record: null,
    duplicate: false,
    lookups: 0,
    truncated: false,
    problems: [],
    authorizes: (address) =>
      isIPv4(address) || isIPv6(address) ? allowed.check(address, isIPv4(address) ? 'ipv4' : 'ipv6') : false,
  };

  async function visit(domain: string, depth: number): Promise<void> {
    const found = await policiesAt(dns, domain);
    if (typeof found === 'string' || found.length !== 1) {
      if (depth > 0)
        walk.problems.push(`${domain}: ${typeof found === 'string' ? found : 'no single SPF record'}`);
      if (depth === 0 && Array.isArray(found)) walk.duplicate = found.length > 1;
      return;
    }
    if (depth === 0) walk.record = found[0]!;
    let redirect: string | undefined;
    for (const term of found[0]!.trim().split(/\s+/).slice(1)) {
      const match = /^[+\-~?]?([a-z0-9]+)(?::([^/]*))?(?:\/(\d+))?(?:\/\/(\d+))?$/i.exec(term);
      const redirectMatch = /^redirect=(.+)$/i.exec(term);
      if (redirectMatch) {
        walk.lookups += 1;
        redirect = redirectMatch[1]!;
        continue;
      }
      if (!match) continue;
      const [, mechanism, value, prefix4, prefix6] = match;
      const kind = mechanism!.toLowerCase();
      if (kind === 'ip4' || kind === 'ip6') {
        allow(allowed, value ?? '', kind === 'ip4' ? prefix4 : (prefix4 ?? prefix6));
        continue;
      }
      if (!['include', 'a', 'mx', 'ptr', 'exists'].includes(kind)) continue;
      walk.lookups += 1;
      if (walk.lookups > WALK_LOOKUP_BOUND || depth >= WALK_DEPTH_BOUND) {
        walk.truncated = true;
        return;
      }
      const target = value && !value.includes('%') ? value : value ? undefined : domain;
      if (target === undefined) continue;
      if (kind === 'include') await visit(target, depth + 1);
      else if (kind === 'a' || kind === 'mx') {
        const hosts =
          kind === 'a' ? [target] : (await dns.resolveMx(target).catch(() => [])).map((mx) => mx.exchange);
        for (const host of hosts) {
          for (const address of await dns.resolveAddresses(host)) {
            allow(allowed, address, isIPv4(address) ? prefix4 : prefix6);
          }
        }
      }
    }
    if (redirect !== undefined && !redirect.includes('%')) await visit(redirect, depth + 1);
  }

  await visit(name, 0);
  return walk;
}
