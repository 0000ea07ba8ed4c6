// Destinations per sending source (issue 38: "per sending IP/source"). Providers count connections and throttle
// per connecting IP, so with DIRECT_SOURCE_IPS each address has its own state of each destination (its own
// shaping.ts: adaptive rate, suspension and back-off, connections, last deferral; a row of `destinations` per
// (source, destination)): a 421 answered to one address slows and suspends only that address's pair, and the
// destination's mail keeps leaving from the others at their own pace. Without source IPs there is one source,
// DEFAULT_SOURCE, and this is exactly one shaping.
//
// The address an attempt leaves from is chosen as it starts, from the pairs' states, which every worker shares
// through the database (suspensions, adaptive rates and connections): among the addresses whose pair may start
// now (not suspended, under its connections, within its hour and its per-minute pace), the preferred ones
// first in the order given (a warming address's allowance to a large provider: source-ips.ts), else the one
// with the most room in its pace (an unpaced pair has all the room), the next in turn among equals.
import { SHAPED_GIVE_BACK_MS } from '../../queue/attempts.ts';
import type { DestinationOverride } from './providers.ts';
import {
  createDestinationShaping,
  DEFAULT_SOURCE,
  type DestinationShaping,
  type SharedState,
} from './shaping.ts';

export interface SourcedShaping {
  /** The sources, in the order listed (DIRECT_SOURCE_IPS), or DEFAULT_SOURCE alone. */
  readonly sources: readonly string[];
  /** One source's shaping (its states of the destinations). */
  of(source: string): DestinationShaping;
  laneOf(domain: string): string;
  providerOf(lane: string): string | null | undefined;
  hostsOf(lane: string): string[];
  /** The domain's MX hosts: its destination, for every source. */
  learn(domain: string, mxHosts: readonly string[], now: number): { destination: string; isNew: boolean };
  /**
   * A domain this worker has not learned, which the database maps to `destination` (another worker, or this
   * one before a restart, learned it): learned with the MX hosts of that destination's row, so its first
   * message is already the destination's, under its limits and shared state. Nothing when no row was read.
   */
  adopt(domain: string, destination: string, now: number): void;
  /**
   * When the lane may start one more attempt from any source (epoch ms; Infinity: when one in flight ends),
   * with `open(source)` of this worker's attempts in flight to it from each, and at most `cap` from each.
   */
  startAt(lane: string, now: number, open: (source: string) => number, cap: number): number;
  /** The same for one source, with `open` of this worker's attempts in flight to the lane from it. */
  startAtFrom(source: string, lane: string, now: number, open: number, cap: number): number;
  /**
   * The source an attempt that starts now leaves from (its start counted against it), chosen as the header
   * says; undefined when no source may start now.
   */
  start(
    lane: string,
    now: number,
    open: (source: string) => number,
    cap: number,
    preferred?: readonly string[],
  ): string | undefined;
  /**
   * When a domain's mail deferred by a throttle of one source may go again: the throttle's end, or sooner when
   * another source's pair with its destination is not suspended (its mail leaves from that one meanwhile).
   */
  resumesAt(domain: string, throttled: { source: string; suspendedUntil: number }, now: number): number;
  /** The lanes every source paces, with how many starts they may make in all within `withinMs`. */
  startable(now: number, withinMs: number): Array<[lane: string, count: number]>;
  takeWrites(now: number): SharedState[];
  merge(rows: readonly SharedState[]): void;
  setOverrides(overrides: readonly DestinationOverride[]): void;
  known(): SharedState[];
  /** The live sending workers, this one included: each pair's limits are shared among them (shaping.ts). */
  shareAmong(workers: number): void;
}

export function createSourcedShaping(
  options: { sources?: readonly string[]; overrides?: readonly DestinationOverride[] } = {},
): SourcedShaping {
  const sources = options.sources && options.sources.length > 0 ? [...options.sources] : [DEFAULT_SOURCE];
  const shapings = new Map(
    sources.map((source) => [source, createDestinationShaping({ source, overrides: options.overrides })]),
  );
  const first = shapings.get(sources[0]!)!;
  const all = [...shapings.values()];
  /**
   * The index of the source last chosen in turn: one turn over all destinations (a destination's lane is its
   * recipient domain until its MX hosts are known, so a turn per lane would start again at the first source).
   */
  let turn = -1;

  function learn(domain: string, mxHosts: readonly string[], now: number) {
    const learned = first.learn(domain, mxHosts, now);
    for (const shaping of all) if (shaping !== first) shaping.learn(domain, mxHosts, now);
    return learned;
  }

  const startAtFrom = (source: string, lane: string, now: number, open: number, cap: number) =>
    open >= cap ? Infinity : (shapings.get(source) ?? first).startAt(lane, now, open);

  return {
    sources,
    of: (source) => shapings.get(source) ?? first,
    laneOf: (domain) => first.laneOf(domain),
    providerOf: (lane) => first.providerOf(lane),
    hostsOf: (lane) => first.hostsOf(lane),
    learn,
    adopt(domain, destination, now) {
      if (first.providerOf(first.laneOf(domain)) !== undefined) return;
      const hosts = all.map((shaping) => shaping.mxHostsOf(destination)).find((found) => found !== undefined);
      // A destination without MX hosts is its one domain's own.
      if (hosts === undefined || (hosts === '' && destination !== domain)) return;
      learn(domain, hosts.split(',').filter(Boolean), now);
    },
    startAtFrom,
    startAt(lane, now, open, cap) {
      let at = Infinity;
      let busy = false;
      for (const source of sources) {
        const from = startAtFrom(source, lane, now, open(source), cap);
        at = Math.min(at, from);
        busy ||= from === Infinity;
      }
      // A source busy with all the connections it may have: the end of one of them starts the next attempt
      // (the runtime keeps the lane's jobs), unless another source may start one within moments. Without it, a
      // suspended source's end would have the lane's jobs given back while another address had room soon.
      return busy && at - now >= SHAPED_GIVE_BACK_MS ? Infinity : at;
    },
    start(lane, now, open, cap, preferred = []) {
      const ready = sources.filter((source) => startAtFrom(source, lane, now, open(source), cap) <= now);
      if (ready.length === 0) return undefined;
      let chosen = preferred.find((source) => ready.includes(source));
      if (chosen === undefined) {
        const room = new Map(ready.map((source) => [source, shapings.get(source)!.headroom(lane, now)]));
        const most = Math.max(...room.values());
        const roomiest = ready.filter((source) => room.get(source) === most);
        const indexes = roomiest.map((source) => sources.indexOf(source));
        turn = indexes.find((index) => index > turn) ?? indexes[0]!;
        chosen = sources[turn]!;
      }
      shapings.get(chosen)!.started(lane, now);
      return chosen;
    },
    resumesAt(domain, throttled, now) {
      let at = throttled.suspendedUntil;
      for (const source of sources) {
        if (source !== throttled.source)
          at = Math.min(at, shapings.get(source)!.suspendedUntil(domain, now) ?? now);
      }
      return Math.max(at, now);
    },
    startable(now, withinMs) {
      if (all.length === 1) return first.startable(now, withinMs);
      // A lane is paced only when every source paces it: the starts of all of them, in all.
      const paced = new Map<string, { count: number; sources: number }>();
      for (const shaping of all) {
        for (const [lane, count] of shaping.startable(now, withinMs)) {
          const found = paced.get(lane) ?? { count: 0, sources: 0 };
          found.count += count;
          found.sources += 1;
          paced.set(lane, found);
        }
      }
      return [...paced]
        .filter(([, found]) => found.sources === all.length)
        .map(([lane, found]) => [lane, found.count]);
    },
    takeWrites: (now) => all.flatMap((shaping) => shaping.takeWrites(now)),
    merge(rows) {
      for (const shaping of all) shaping.merge(rows);
    },
    setOverrides(overrides) {
      for (const shaping of all) shaping.setOverrides(overrides);
    },
    known: () => all.flatMap((shaping) => shaping.known()),
    shareAmong(workers) {
      for (const shaping of all) shaping.shareAmong(workers);
    },
  };
}
