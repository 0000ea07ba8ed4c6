// A destination's limits (src/modules/destinations) as the operator writes them in DESTINATION_LIMITS.

/** What a destination allows: at once, per connection, per minute and per hour (0: no such limit). */
export interface DestinationLimits {
  connections: number;
  messagesPerConnection: number;
  perMinute: number;
  perHour: number;
}

/** An operator's override: the limits it sets, for destinations whose MX hosts or domain match. */
export interface DestinationOverride {
  /** `*.example.net` (an MX host or recipient domain under it), `mx.example.net` (exactly), or a provider's name. */
  pattern: string;
  limits: Partial<DestinationLimits>;
}

/**
 * DESTINATION_LIMITS's value: `pattern=connections/per-connection/per-minute/per-hour` entries separated by
 * `;` or spaces, each number optional (`*.example.net=2//30/`, `google=3`); 0 is no limit.
 */
export function parseDestinationOverrides(value: string): DestinationOverride[] | string {
  const overrides: DestinationOverride[] = [];
  for (const entry of value.split(/[;\s]+/).filter(Boolean)) {
    const match = /^([*a-z0-9.,_-]+)=([0-9/]*)$/i.exec(entry);
    if (!match) return `"${entry}" is not pattern=connections/per-connection/per-minute/per-hour`;
    const numbers = match[2]!.split('/');
    if (numbers.length > 4) return `"${entry}" has more than four limits`;
    const names: Array<keyof DestinationLimits> = [
      'connections',
      'messagesPerConnection',
      'perMinute',
      'perHour',
    ];
    const limits: Partial<DestinationLimits> = {};
    numbers.forEach((number, index) => {
      if (number !== '') limits[names[index]!] = Number(number);
    });
    if (limits.connections === 0) return `"${entry}": a destination needs at least one connection`;
    overrides.push({ pattern: match[1]!, limits });
  }
  return overrides;
}
