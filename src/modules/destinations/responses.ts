// What a destination's reply says about how fast we send (issue 38): the replies that mean "slow down", each
// with the provider text it stands for. A match lowers the destination's rate and suspends it for a while
// (shaping.ts); anything else is the message's own business (a bounce, a greylisting, a full mailbox).

/** `rate`: too many messages; `connections`: too many connections at once; `reputation`: throttled for who we are. */
export type ThrottleKind = 'rate' | 'connections' | 'reputation';

export interface ResponseRule {
  kind: ThrottleKind;
  /** Matched against the whole reply (code, enhanced code and text). */
  pattern: RegExp;
  /** How long the destination is suspended for, in ms, before the back-off grows. */
  backoffMs: number;
  /** An example of the reply, as the provider sends it; the tests classify each. */
  example: string;
  source: string;
}

const MINUTE = 60_000;

/** The table of classified replies, first match wins. */
export const RESPONSE_RULES: readonly ResponseRule[] = [
  {
    kind: 'rate',
    pattern: /\b4\.7\.28\b/,
    backoffMs: MINUTE,
    example:
      '421 4.7.28 [192.0.2.1] Our system has detected an unusual rate of unsolicited mail originating from your IP address. To protect our users from spam, mail sent from your IP address has been temporarily rate limited.',
    source: 'Gmail',
  },
  {
    kind: 'rate',
    pattern: /\bTS0[0-9]\b|\bTSS0[0-9]\b/,
    backoffMs: 5 * MINUTE,
    example:
      '421 4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected volume or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes',
    source: 'Yahoo/AOL',
  },
  {
    kind: 'rate',
    pattern: /\b4\.7\.650\b|\bS3150\b|\bS3140\b|\bS3114\b|\bS3115\b/,
    backoffMs: 5 * MINUTE,
    example:
      '451 4.7.650 The mail server [192.0.2.1] has been temporarily rate limited due to IP reputation. For e-mail delivery information, see https://aka.ms/postmaster (S775)',
    source: 'Microsoft',
  },
  {
    kind: 'connections',
    pattern: /too many (?:[a-z]+ ){0,2}connections|connection limit|too many sessions/i,
    backoffMs: 10_000,
    example: '421 4.7.0 Too many concurrent SMTP connections from this IP address; please try again later',
    source: 'Postfix, Exim, Microsoft (4.3.2), Comcast and others',
  },
  {
    kind: 'rate',
    pattern: /rate.?limit|too many (?:messages|mails|emails|recipients)|sending rate|throttl/i,
    backoffMs: MINUTE,
    example: '452 4.3.1 Too many messages from this sender in the last minute',
    source: 'any provider',
  },
  {
    kind: 'reputation',
    pattern: /^4\d\d[ -]4\.7\.\d+/,
    backoffMs: MINUTE,
    example: '450 4.7.1 Service unavailable, try a little later',
    source: 'RFC 3463: 4.7.x, a temporary security or policy status',
  },
];

/** A 421 closes the connection (RFC 5321 §3.8): the server is shedding load whatever its text says. */
const SERVICE_CLOSING = /^421[ -]/;

/** Greylisting (a first-time sender asked to come back) is about the message, not our pace. */
const GREYLISTING = /greylist|graylist/i;

/** The throttle a reply is, or undefined when it says nothing about our pace. */
export function classifyResponse(reply: string | null | undefined): ResponseRule | undefined {
  if (!reply || !/^4\d\d[ -]/.test(reply) || GREYLISTING.test(reply)) return undefined;
  const rule = RESPONSE_RULES.find((candidate) => candidate.pattern.test(reply));
  if (rule) return rule;
  if (SERVICE_CLOSING.test(reply)) return RESPONSE_RULES.at(-1);
  return undefined;
}
