// Destinations (issue 38): a recipient domain's mail goes to the destination its MX hosts roll up to. The
// large providers' MX hosts are one destination each, whatever domain they host ("MX rollup": every
// Google-hosted domain is `google`); any other MX set is a destination of its own, keyed by its sorted hosts.
// Each destination has limits: the provider's defaults below, or the operator's overrides (DESTINATION_LIMITS).
import type { DestinationLimits, DestinationOverride } from '../../lib/destination-limits.ts';

export { parseDestinationOverrides } from '../../lib/destination-limits.ts';
export type { DestinationLimits, DestinationOverride } from '../../lib/destination-limits.ts';

export interface Provider {
  /** The destination's key: the provider's name. */
  name: string;
  /** MX host names it serves, as suffixes (`.google.com` matches `aspmx.l.google.com`). */
  mx: readonly string[];
  limits: DestinationLimits;
}

/**
 * The built-in table. No provider publishes its connection or rate limits: these are conservative starting
 * points (where each comes from: docs/api/destinations.md#the-built-in-table), and the adaptive part
 * (shaping.ts) lowers them on the first deferral and raises them back on success.
 */
export const PROVIDERS: readonly Provider[] = [
  {
    name: 'google',
    mx: ['.google.com', '.googlemail.com'],
    limits: { connections: 5, messagesPerConnection: 50, perMinute: 600, perHour: 20_000 },
  },
  {
    name: 'microsoft',
    mx: ['.outlook.com', '.protection.outlook.com', '.hotmail.com'],
    limits: { connections: 5, messagesPerConnection: 100, perMinute: 300, perHour: 10_000 },
  },
  {
    name: 'yahoo',
    mx: ['.yahoodns.net', '.yahoo.com', '.aol.com'],
    limits: { connections: 5, messagesPerConnection: 20, perMinute: 120, perHour: 3_600 },
  },
  {
    name: 'apple',
    mx: ['.mail.icloud.com', '.icloud.com', '.me.com'],
    limits: { connections: 3, messagesPerConnection: 10, perMinute: 60, perHour: 2_000 },
  },
  {
    name: 'gmx',
    mx: ['.gmx.net', '.gmx.com', '.web.de', '.mail.com'],
    limits: { connections: 3, messagesPerConnection: 20, perMinute: 60, perHour: 2_000 },
  },
  {
    name: 'mailru',
    mx: ['.mail.ru'],
    limits: { connections: 3, messagesPerConnection: 20, perMinute: 60, perHour: 2_000 },
  },
  {
    name: 'yandex',
    mx: ['.yandex.ru', '.yandex.net', '.yandex.com'],
    limits: { connections: 3, messagesPerConnection: 20, perMinute: 60, perHour: 2_000 },
  },
  {
    name: 'comcast',
    mx: ['.comcast.net'],
    limits: { connections: 2, messagesPerConnection: 10, perMinute: 60, perHour: 1_500 },
  },
];

/** Any other destination: a domain's own mail servers, which tell us their limits by deferring. */
export const UNKNOWN_LIMITS: DestinationLimits = {
  connections: 10,
  messagesPerConnection: 100,
  perMinute: 0,
  perHour: 0,
};

const canonical = (host: string) => host.toLowerCase().replace(/\.$/, '');

const underSuffix = (host: string, suffix: string) => host.endsWith(suffix) || host === suffix.slice(1);

/** Whether `pattern` names this host (`*.x` for x and anything under it; else exactly). */
function patternMatches(pattern: string, host: string): boolean {
  const wanted = canonical(pattern);
  return wanted.startsWith('*.') ? underSuffix(host, wanted.slice(1)) : host === wanted;
}

export interface Destination {
  /** The provider's name, or the MX hosts sorted and joined with commas. */
  key: string;
  /** The built-in provider it rolls up to, if any. */
  provider: string | null;
  limits: DestinationLimits;
}

/** The destination of a domain whose MX hosts are `mxHosts` (the domain itself when it has no MX). */
export function destinationOf(
  domain: string,
  mxHosts: readonly string[],
  overrides: readonly DestinationOverride[] = [],
): Destination {
  const hosts = [...new Set(mxHosts.map(canonical))].sort();
  const provider = PROVIDERS.find((entry) =>
    hosts.some((host) => entry.mx.some((suffix) => underSuffix(host, suffix))),
  );
  const key = provider?.name ?? (hosts.join(',') || canonical(domain));
  let limits = { ...(provider?.limits ?? UNKNOWN_LIMITS) };
  for (const override of overrides) {
    const named = canonical(override.pattern) === key;
    const byHost = [canonical(domain), ...hosts].some((host) => patternMatches(override.pattern, host));
    if (named || byHost) limits = { ...limits, ...override.limits };
  }
  return { key, provider: provider?.name ?? null, limits };
}
