import type { LaneShaping } from '../../queue/contract.ts';
import { UNKNOWN_LIMITS } from '../destinations/providers.ts';
import type { SourceChooser, SourceReadiness } from '../destinations/source-ips.ts';
import type { SourcedShaping } from '../destinations/source-shaping.ts';

// The sending worker's attempts in flight per (destination, sending source) (issue 38, source-shaping.ts): the
// queue runtime's pacing of a destination's lane (it may start when any source may), the source each attempt
// leaves from (chosen as it starts), and the connections each source has open to each destination, which
// SEND_CONCURRENCY_PER_HOST and the destination's adaptive connections bound per source address.

/** An attempt in flight: its recipient domain, the destination it was counted against, the source it leaves from. */
export interface OpenAttempt {
  host: string;
  destination: string;
  source: string;
}

export interface AttemptSources {
  /** The runtime's pacing of the lanes (destinations, or a domain before its MX hosts are known). */
  lanes: LaneShaping;
  /**
   * An attempt of `host` starts: called synchronously by the attempt the runtime dispatched right after
   * lanes.started (which chose its source). Counted open until `close`.
   */
  open(host: string): OpenAttempt;
  close(attempt: OpenAttempt): void;
  /** Of this worker's attempts in flight to the attempt's destination from its source, the others. */
  others(attempt: OpenAttempt): number;
  /** What the warm-up's choice of address needs to know of the shaping's (source-ips.ts). */
  readiness(attempt: OpenAttempt): SourceReadiness;
  /** The warm-up sent it from another address than the shaping chose: the start is that address's. */
  moveTo(attempt: OpenAttempt, address: string, now: number): void;
  /** The connections a transport keeps open between messages to a domain from the attempt's source. */
  connectionLimitsOf(attempt: OpenAttempt): { connections: number; messagesPerConnection: number };
}

export function createAttemptSources(deps: {
  shaping: SourcedShaping;
  chooser?: Pick<SourceChooser, 'preferred'> | undefined;
  /** SEND_CONCURRENCY_PER_HOST: connections to one destination from each source address. */
  concurrencyPerHost: number;
  now: () => number;
}): AttemptSources {
  const { shaping, concurrencyPerHost: cap } = deps;
  const inFlight = new Set<OpenAttempt>();
  const openTo = (lane: string, source: string) => {
    let count = 0;
    for (const entry of inFlight)
      if (entry.source === source && shaping.laneOf(entry.host) === lane) count += 1;
    return count;
  };
  /** The source lanes.started chose for the attempt the runtime dispatches next (synchronously after it). */
  let starting: { destination: string; source: string } | undefined;

  return {
    lanes: {
      // A lane named after a domain before its MX hosts were known is its destination's now: one count.
      startAt(lane, now) {
        const destination = shaping.laneOf(lane);
        return shaping.startAt(destination, now, (source) => openTo(destination, source), cap);
      },
      started(lane, now) {
        const destination = shaping.laneOf(lane);
        const provider = shaping.providerOf(destination) ?? null;
        const preferred = deps.chooser?.preferred({ key: destination, provider }, now);
        const source = shaping.start(destination, now, (from) => openTo(destination, from), cap, preferred);
        starting = { destination, source: source ?? shaping.sources[0]! };
      },
      startable: (now, withinMs) => shaping.startable(now, withinMs),
    },
    open(host) {
      const attempt = {
        host,
        ...(starting ?? { destination: shaping.laneOf(host), source: shaping.sources[0]! }),
      };
      starting = undefined;
      inFlight.add(attempt);
      return attempt;
    },
    close: (attempt) => inFlight.delete(attempt),
    others: (attempt) => openTo(shaping.laneOf(attempt.host), attempt.source),
    readiness: (attempt) => ({
      picked: attempt.source,
      readyAt: (address) =>
        shaping.startAtFrom(
          address,
          attempt.destination,
          deps.now(),
          openTo(attempt.destination, address),
          cap,
        ),
    }),
    moveTo(attempt, address, now) {
      if (address === attempt.source) return;
      shaping.of(attempt.source).unstarted(attempt.destination);
      shaping.of(address).started(attempt.destination, now);
      attempt.source = address;
    },
    connectionLimitsOf(attempt) {
      const limits = shaping.of(attempt.source).connectionLimitsOf(attempt.host);
      return {
        connections: Math.min(cap, limits?.connections ?? Infinity),
        messagesPerConnection: limits?.messagesPerConnection ?? UNKNOWN_LIMITS.messagesPerConnection,
      };
    },
  };
}
