import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

// Addresses a webhook must never reach unless private targets are allowed: loopback, private networks,
// link-local (which holds the cloud metadata endpoint 169.254.169.254), carrier-grade NAT, and the
// unspecified, multicast and reserved ranges. In IPv6 also the deprecated site-local range (fec0::/10, still
// routed inside some networks) and the local-use NAT64 prefix (64:ff9b:1::/48, RFC 8215), which a network's
// own translator maps to any IPv4 address it chooses, private ones included.
const blocked = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  blocked.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['64:ff9b:1::', 48],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const) {
  blocked.addSubnet(network, prefix, 'ipv6');
}

/** True for an IP literal that a webhook delivery must not connect to. */
export function isBlockedAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, '');
  const family = isIP(bare);
  if (family === 4) return blocked.check(bare, 'ipv4');
  if (family !== 6) return false;
  // Forms that carry an IPv4 address, which is what really gets reached: IPv4-mapped (::ffff:a.b.c.d),
  // IPv4-compatible (::a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:aabb:ccdd::), written dotted or in hex.
  const groups = ipv6Groups(bare);
  if (groups) {
    const v4 = (high: number, low: number) => `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
    const zeros = (from: number, to: number) => groups.slice(from, to).every((group) => group === 0);
    if (zeros(0, 5) && (groups[5] === 0xffff || groups[5] === 0) && !zeros(6, 7)) {
      return blocked.check(v4(groups[6]!, groups[7]!), 'ipv4');
    }
    // IPv4-translated (::ffff:0:a.b.c.d, RFC 2765).
    if (zeros(0, 4) && groups[4] === 0xffff && groups[5] === 0) {
      return blocked.check(v4(groups[6]!, groups[7]!), 'ipv4');
    }
    if (groups[0] === 0x64 && groups[1] === 0xff9b && zeros(2, 6)) {
      return blocked.check(v4(groups[6]!, groups[7]!), 'ipv4');
    }
    if (groups[0] === 0x2002) return blocked.check(v4(groups[1]!, groups[2]!), 'ipv4');
  }
  return blocked.check(bare, 'ipv6');
}

/** The eight 16-bit groups of an IPv6 address (a trailing dotted IPv4 part counts as two). */
function ipv6Groups(address: string): number[] | undefined {
  let text = address.toLowerCase().replace(/%.*$/, '');
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::');
  const parse = (part: string | undefined) =>
    part ? part.split(':').map((group) => parseInt(group, 16)) : [];
  const left = parse(head);
  const right = parse(tail);
  const groups =
    tail === undefined ? left : [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right];
  return groups.length === 8 && groups.every((group) => group >= 0 && group <= 0xffff) ? groups : undefined;
}

export type Resolver = (hostname: string) => Promise<string[]>;

const RESOLVE_TIMEOUT_MS = 2000;

/** Resolves a host name to its addresses; an empty list when it does not resolve (yet) or takes too long. */
export const systemResolver: Resolver = async (hostname) => {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<string[]>((resolve) => {
    timer = setTimeout(() => resolve([]), RESOLVE_TIMEOUT_MS);
  });
  try {
    const found = lookup(hostname, { all: true, verbatim: true }).then(
      (addresses) => addresses.map((entry) => entry.address),
      () => [],
    );
    return await Promise.race([found, timeout]);
  } finally {
    clearTimeout(timer);
  }
};

/**
 * Why `hostname` is not a safe target, or undefined when it is. `localhost` names and IP literals are
 * judged as written (the WHATWG URL parser has already turned `0x7f000001` into `127.0.0.1`); other names
 * by every address they resolve to. A name that does not resolve passes: delivery checks again at connect.
 */
export async function privateTargetReason(hostname: string, resolve: Resolver): Promise<string | undefined> {
  const host = hostname
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return `'${host}' is a loopback host`;
  if (isIP(host))
    return isBlockedAddress(host) ? `${host} is a loopback, private or link-local address` : undefined;
  const addresses = await resolve(host);
  const bad = addresses.find(isBlockedAddress);
  return bad ? `'${host}' resolves to ${bad}, a loopback, private or link-local address` : undefined;
}
