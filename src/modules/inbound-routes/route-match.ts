import { normalizeDomainName } from '../domains/domain-name.ts';

// What a route's `match` means, and whether a recipient is one of its addresses. One place for the rule: the
// API checks a match with it, the listener matches recipients with it at RCPT.

/** A local part's characters (RFC 5322 atext and dots), and `*` for "any characters". `+` is left out: see below. */
const LOCAL_PATTERN = /^[a-z0-9!#$%&'*/=?^_`{|}~.-]{1,64}$/;

export interface RoutePattern {
  /** Lowercase, `*` for any run of characters. */
  localPart: string;
  /** Lowercase ASCII. */
  domain: string;
}

export type PatternCheck = { ok: true; pattern: RoutePattern } | { ok: false; reason: string };

/**
 * Reads a route's match: `local@domain`, the local part an address's or a pattern with `*`. A `+` is refused:
 * sub-addresses are matched by their base address (`support+1234@` by `support@`) and their tag kept as the
 * mailbox hash, so a pattern naming one could never match.
 */
export function parseRoutePattern(match: string): PatternCheck {
  const text = match.trim().toLowerCase();
  const at = text.lastIndexOf('@');
  if (at <= 0) return { ok: false, reason: 'is not an address or pattern such as support@acme.example' };
  const localPart = text.slice(0, at);
  if (localPart.includes('+')) {
    return {
      ok: false,
      reason: 'names a sub-address: match the base address (support@…) and read the tag from mailbox_hash',
    };
  }
  if (!LOCAL_PATTERN.test(localPart)) {
    return { ok: false, reason: `has a local part '${localPart}' with characters an address cannot hold` };
  }
  const domain = normalizeDomainName(text.slice(at + 1));
  if (!domain.ok) return { ok: false, reason: `has a domain that ${domain.reason}` };
  return { ok: true, pattern: { localPart, domain: domain.name } };
}

export const formatRoutePattern = (pattern: RoutePattern): string => `${pattern.localPart}@${pattern.domain}`;

export interface Recipient {
  /** The address's local part, lowercase, without its `+tag`. */
  base: string;
  /** The `+tag`, as written (null: none). */
  mailboxHash: string | null;
  domain: string;
}

/** Splits an envelope recipient for matching; undefined when it is no address routes could take. */
export function splitRecipient(address: string): Recipient | undefined {
  const at = address.lastIndexOf('@');
  if (at <= 0) return undefined;
  const local = address.slice(0, at);
  const domain = normalizeDomainName(address.slice(at + 1));
  if (!domain.ok) return undefined;
  const plus = local.indexOf('+');
  return {
    base: (plus >= 0 ? local.slice(0, plus) : local).toLowerCase(),
    mailboxHash: plus >= 0 && plus < local.length - 1 ? local.slice(plus + 1) : null,
    domain: domain.name,
  };
}

/** Whether a recipient's base local part matches a pattern's (`*`: any run of characters, none included). */
export function localPartMatches(pattern: string, base: string): boolean {
  if (!pattern.includes('*')) return pattern === base;
  const pieces = pattern.split('*');
  // Linear, no backtracking: the first piece anchors the start, the last the end, the others in order between.
  const first = pieces[0]!;
  const last = pieces.at(-1)!;
  if (!base.startsWith(first) || base.length < first.length + last.length || !base.endsWith(last)) {
    return false;
  }
  let position = first.length;
  const end = base.length - last.length;
  for (const piece of pieces.slice(1, -1)) {
    const found = base.indexOf(piece, position);
    if (found < 0 || found + piece.length > end) return false;
    position = found + piece.length;
  }
  return true;
}
