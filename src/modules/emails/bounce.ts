// What a refusal means for the address: the `bounce` of an `email.bounced` event, and whether the address
// goes on the suppression list. From the enhanced status code (RFC 3463) of the server's reply.

export type BounceType = 'hard' | 'soft' | 'policy' | 'undetermined';

export interface BounceClass {
  /** `hard`: the address does not exist (suppressed); `soft`: a passing state of the mailbox; `policy`: the
   * sender was refused (authentication, reputation, content); `undetermined`: the reply did not say. */
  type: BounceType;
  /** The enhanced status code (`5.1.1`), or null when the reply had none. */
  status: string | null;
  /** The server's words. */
  diagnostic: string | null;
  /** The server that refused, when known. */
  reporting_mta: string | null;
}

const ENHANCED_STATUS = /^[245]\d\d[ -]([245]\.\d{1,3}\.\d{1,3})\b/;

/**
 * Classifies a permanent refusal from the reply the server gave (or the transport's own error), or from a
 * delivery report: its `Status` field (`status`) and `Diagnostic-Code` (`reply`).
 */
export function classifyBounce(
  reply: string | null,
  options: { reportingMta?: string | null; noSuchDomain?: boolean; status?: string | null } = {},
): BounceClass {
  const status = options.status ?? (reply ? (ENHANCED_STATUS.exec(reply)?.[1] ?? null) : null);
  const base = { status, diagnostic: reply, reporting_mta: options.reportingMta ?? null };
  if (options.noSuchDomain) return { ...base, type: 'hard' };
  if (status === null) return { ...base, type: 'undetermined' };
  const [klass, subject, detail] = status.split('.').map(Number) as [number, number, number];
  if (klass === 4) return { ...base, type: 'soft' };
  // X.1.x: bad destination address or mailbox; X.2.1: mailbox disabled; X.4.4: the domain has no route.
  if (subject === 1 || (subject === 2 && detail === 1) || (subject === 4 && detail === 4))
    return { ...base, type: 'hard' };
  // X.2.x: the mailbox cannot take it now (full, too big); X.3.x: the receiving system.
  if (subject === 2 || subject === 3) return { ...base, type: 'soft' };
  // X.7.x: security or policy (authentication, DMARC, spam block): the sender's problem, not the address's.
  if (subject === 7) return { ...base, type: 'policy' };
  return { ...base, type: 'undetermined' };
}
