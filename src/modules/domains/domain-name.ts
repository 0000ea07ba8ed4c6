import { domainToASCII } from 'node:url';

/** The longest domain name DNS can carry, in its text form without the trailing dot (RFC 1035 §2.3.4). */
export const MAX_DOMAIN_LENGTH = 253;
const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

export type NameCheck = { ok: true; name: string } | { ok: false; reason: string };

/**
 * A sending domain's name as stored: lowercase ASCII. An internationalized name is taken in Unicode or
 * punycode and stored as punycode (what DNS and DKIM `d=` carry). One trailing dot (the fully qualified
 * form, `acme.example.`) names the same domain and is dropped. Refused: anything that is not a host name of
 * at least two labels (IP addresses, `localhost`, underscores, spaces, empty labels), and names longer than
 * DNS allows.
 */
export function normalizeDomainName(input: string): NameCheck {
  const given = input.endsWith('.') && !input.endsWith('..') ? input.slice(0, -1) : input;
  if (given.length === 0) return { ok: false, reason: 'is empty' };
  // Checked before conversion: a long Unicode input would only get longer.
  if (given.length > MAX_DOMAIN_LENGTH) {
    return {
      ok: false,
      reason: `is ${given.length} characters long; a domain name has at most ${MAX_DOMAIN_LENGTH}`,
    };
  }
  // eslint-disable-next-line no-control-regex
  if (/[\s\u0000-\u001f/\\@:?#[\]]/.test(given)) {
    return { ok: false, reason: 'is not a domain name (it holds spaces or URL or address characters)' };
  }
  const ascii = domainToASCII(given.toLowerCase());
  if (ascii === '') return { ok: false, reason: 'is not a valid domain name' };
  if (ascii.length > MAX_DOMAIN_LENGTH) {
    return {
      ok: false,
      reason: `is ${ascii.length} characters long in its ASCII (punycode) form; a domain name has at most ${MAX_DOMAIN_LENGTH}`,
    };
  }
  const labels = ascii.split('.');
  if (labels.length < 2) return { ok: false, reason: 'needs at least two labels, such as acme.example' };
  const bad = labels.find((label) => !LABEL.test(label));
  if (bad !== undefined) {
    return {
      ok: false,
      reason:
        bad.length === 0
          ? 'has an empty label'
          : bad.length > 63
            ? `has a label of ${bad.length} characters; at most 63`
            : `has the label '${bad}': labels hold letters, digits and inner hyphens`,
    };
  }
  // An all-numeric last label is an IPv4 address (or no name at all): not a domain one can publish DKIM for.
  if (/^\d+$/.test(labels.at(-1)!)) return { ok: false, reason: 'is an IP address, not a domain name' };
  return { ok: true, name: ascii };
}

/** `mail.acme.example` → `mail.acme.example`, `acme.example`, `example`: the name and each parent. */
export function selfAndParents(name: string): string[] {
  const labels = name.split('.');
  return labels.map((_, index) => labels.slice(index).join('.'));
}

/** Top-level names reserved for testing and examples (RFC 2606, RFC 6761): no one can register a name below. */
const RESERVED_TEST_NAMES = new Set(['test', 'example', 'localhost']);

/** `acme.test`, `mail.acme.example`: a name under a reserved test name, which no public DNS answers for. */
export const isReservedTestName = (name: string): boolean =>
  RESERVED_TEST_NAMES.has(name.slice(name.lastIndexOf('.') + 1));
