import { type ByteChunks, streamOf } from '../../lib/byte-chunks.ts';
import { aligned } from '../domains/domains.service.ts';
import { loadMailauth } from './mailauth.ts';

// Who may speak for a recipient. A report that did not come back to the recipient's own return path (its
// VERP token, which only that recipient's copy carries) names the recipient by a Message-ID and an address,
// both of which every other recipient of the message knows: a cc, a bcc or anyone it was forwarded to could
// bounce or complain about a co-recipient. Such a report is believed only when the recipient's mail provider
// signed it: a DKIM signature that passes, aligned with the report's From domain, and that domain is a
// feedback loop the operator named as reporting for the recipient's domain (REPORT_FEEDBACK_LOOPS), or the
// recipient's own domain sending from one of its role addresses (postmaster@, mailer-daemon@, abuse@, …).
// Not any address of the recipient's domain: a large provider signs every user's mail, so a co-recipient at
// the same provider could otherwise sign a report about another of its users.

/** Reporting domain → the recipient domains it reports for (besides its own). */
export type FeedbackLoops = ReadonlyMap<string, readonly string[]>;

/** The reporters a provider answers its senders from (RFC 2142 role addresses and the usual FBL names). */
const ROLE_LOCAL_PARTS = new Set([
  'postmaster',
  'mailer-daemon',
  'abuse',
  'fbl',
  'feedback',
  'feedbackloop',
  'complaints',
  'arf',
  'noreply',
  'no-reply',
  'staff',
]);

/** Who signed a received message, as far as DKIM proves it. */
export interface Signer {
  /** The message's From address (lower case), when it has one. */
  from: string | null;
  /**
   * The domains that vouch for it: each DKIM signature that passes and whose `d=` is aligned (relaxed) with
   * the From domain. Empty for an unsigned, altered or unaligned message.
   */
  domains: string[];
}

export interface ReportAuthenticator {
  /** The message in its chunks (lib/byte-chunks.ts): read as a stream, never joined. */
  signerOf(raw: ByteChunks): Promise<Signer>;
}

/** DKIM keys are looked up with this (DNS_SERVERS). */
export type TxtLookup = (name: string) => Promise<string[][]>;

export function createReportAuthenticator(deps: { resolveTxt: TxtLookup }): ReportAuthenticator {
  const resolver = async (name: string, type: string) => {
    if (type !== 'TXT') throw Object.assign(new Error(`no ${type} lookups here`), { code: 'ENOTFOUND' });
    return deps.resolveTxt(name);
  };
  return {
    async signerOf(raw) {
      // mailauth's result, as far as it is read here (its types leave these loose).
      // mailauth reads a stream a chunk at a time, hashing as it goes; the chunks come a turn of the event loop
      // apart (streamOf), so a large message holds the loop no longer than one chunk's hash.
      const { dkimVerify } = await loadMailauth();
      const result = (await dkimVerify(streamOf(raw), { resolver } as never)) as unknown as {
        headerFrom?: string[];
        results: Array<{ signingDomain?: string; status?: { result?: string } }>;
      };
      const from = result.headerFrom?.[0]?.toLowerCase() ?? '';
      const fromDomain = domainOf(from);
      if (!fromDomain) return { from: null, domains: [] };
      const domains = result.results
        .filter((signature) => signature.status?.result === 'pass')
        .map((signature) => String(signature.signingDomain).toLowerCase())
        .filter((domain) => aligned(domain, fromDomain));
      return { from, domains };
    },
  };
}

const domainOf = (address: string) =>
  address.includes('@') ? address.slice(address.lastIndexOf('@') + 1) : '';

/** Whether a signed message speaks for a recipient address, and if not, why (see above). */
export function speaksFor(
  signer: Signer,
  address: string,
  feedbackLoops: FeedbackLoops,
): { ok: true; by: string } | { ok: false; why: string } {
  if (signer.domains.length === 0) {
    return { ok: false, why: 'it carries no valid DKIM signature aligned with its From domain' };
  }
  const domain = domainOf(address.toLowerCase());
  for (const voucher of signer.domains) {
    if ((feedbackLoops.get(voucher) ?? []).some((covered) => aligned(covered, domain))) {
      return { ok: true, by: `the feedback loop ${voucher}` };
    }
    const local = signer.from?.slice(0, signer.from.lastIndexOf('@')) ?? '';
    if (aligned(voucher, domain) && ROLE_LOCAL_PARTS.has(local)) {
      return { ok: true, by: `${signer.from}, signed by the recipient's domain` };
    }
  }
  return {
    ok: false,
    why: `it is signed by ${signer.domains.join(', ')} (from ${signer.from}), which does not report for ${domain}`,
  };
}
