// A sending worker's view of its destinations (issue 38): which destination a recipient domain's mail goes
// to, and whether that destination may take one more message now. The adaptive part is AIMD: a reply that
// says "slow down" (responses.ts) halves the destination's rate (from what it actually took in the last
// minute) and suspends it for a back-off that doubles while the deferrals go on; each minute of deliveries
// without one adds a twentieth of its ceiling back, and a connection. What is shared with the other workers
// (rate, connections, suspension, last deferral) is in the database (destinations.repo.ts), written on a
// change and at most once a second per destination; the rest (connections in use, the pacing) is this
// worker's own. Its limits are the destination's divided among the live sending workers (`shareAmong`), so
// that N workers together keep to the destination's pace and connections, not N times them. One shaping is
// one sending source's view: with DIRECT_SOURCE_IPS, each address has its own (source-shaping.ts), since
// providers count and throttle per connecting IP.
import { classifyResponse, type ResponseRule } from './responses.ts';
import {
  type Destination,
  type DestinationLimits,
  type DestinationOverride,
  destinationOf,
} from './providers.ts';

/** The sending source of a worker that names none: every worker of one machine sends from the same addresses. */
export const DEFAULT_SOURCE = 'default';

const MINUTE = 60_000;
const HOUR = 3_600_000;
/** A suspension's back-off doubles with each deferral in a row, up to this. */
const MAX_BACKOFF_MS = HOUR;
/** State shared through the database is written at most this often per destination. */
export const WRITE_EVERY_MS = 1000;
/** Domains named per lane when a lane is left out of a claim (the rest are found, and given back, by it). */
const HOSTS_PER_LANE = 200;
/**
 * A worker's share of a destination's pace never falls below this many messages a minute, however many
 * workers share it: each one's mail still leaves (more workers than the rate: they together go faster, and
 * the destination's deferrals slow them).
 */
export const MIN_RATE_SHARE = 1;

/** What the workers share of a destination (a row of `destinations`). */
export interface SharedState {
  key: string;
  /** The sending source whose state it is: a DIRECT_SOURCE_IPS address, or DEFAULT_SOURCE (source-shaping.ts). */
  source: string;
  provider: string | null;
  mxHosts: string;
  /** Messages a minute it takes now; 0: no limit yet (none was ever needed). */
  rate: number;
  connections: number;
  suspendedUntil: number | null;
  backoffMs: number;
  lastDeferral: string | null;
  lastDeferralAt: number | null;
  deferrals: number;
  suspensions: number;
  updatedAt: number;
}

interface LocalState extends SharedState {
  limits: DestinationLimits;
  /** Token bucket of the per-minute pace: tokens now, and when they were counted. */
  tokens: number;
  tokensAt: number;
  /** Starts in the last minute (for the rate a deferral halves) and in this hour's window. */
  recentStarts: number[];
  hourStart: number;
  hourCount: number;
  /** The last change (a decrease or an increase), and deliveries since. */
  changedAt: number;
  acceptedSinceChange: number;
  /** The highest rate that went without a deferral: where an unlimited destination's increases start. */
  peak: number;
  /** When a destination last refused a connection for too many: connections do not grow back for an hour. */
  connectionsCappedAt: number;
  dirty: boolean;
  writtenAt: number;
}

/** What a deferral or suspension was, for the metrics and the operator's event. */
export interface Throttled {
  destination: string;
  /** The sending source the reply was given to: only its state of the destination changed. */
  source: string;
  provider: string | null;
  rule: ResponseRule;
  reply: string;
  rate: number;
  connections: number;
  suspendedUntil: number;
  /** This reply began a suspension (the destination was not suspended before it): the operator's event. */
  began: boolean;
}

export interface DestinationShaping {
  /** The lane (destination key, or the domain itself before its MX hosts are known) of a recipient domain. */
  laneOf(domain: string): string;
  /** The built-in provider a lane's destination is (null: none), or undefined while the lane is not a known destination. */
  providerOf(lane: string): string | null | undefined;
  /** Recipient domains of a lane, for a claim that leaves the lane out. */
  hostsOf(lane: string): string[];
  /**
   * When the lane may start one more attempt (epoch ms) with `open` of its attempts in flight: now or earlier
   * means at once; Infinity, when one of them ends (it has all the connections it may).
   */
  startAt(lane: string, now: number, open: number): number;
  started(lane: string, now: number): void;
  /** A start taken back (the attempt left from another source after all): its token and counts returned. */
  unstarted(lane: string): void;
  /** How many starts the lane's pace allows now (its tokens); Infinity when it has no per-minute limit. */
  headroom(lane: string, now: number): number;
  /**
   * The destinations whose pace (suspension, hour's count, rate) lets them start fewer attempts within
   * `withinMs` than a lane can hold, and how many they may start: the claims take no more of theirs.
   */
  startable(now: number, withinMs: number): Array<[lane: string, count: number]>;
  /**
   * The domain's MX hosts, as the transport found them or as the destination's row records them: its
   * destination from now on, whose shared state is the row's when the database has one (`merge`).
   */
  learn(domain: string, mxHosts: readonly string[], now: number): { destination: string; isNew: boolean };
  /** A destination's MX hosts as this worker knows them or last read them (undefined: neither). */
  mxHostsOf(destination: string): string | undefined;
  /**
   * An attempt's reply to a domain: a throttle lowers its destination's limits and suspends it (returned, for
   * the caller to say so); an acceptance counts towards the next increase.
   */
  observe(
    domain: string,
    reply: string | null,
    accepted: boolean,
    now: number,
    /** This destination's other attempts still in flight when the reply came. */
    inFlight: number,
  ): Throttled | undefined;
  /** When the destination of a domain is suspended until (epoch ms), if it is. */
  suspendedUntil(domain: string, now: number): number | undefined;
  /**
   * The connections at once a domain's destination takes now and its messages per connection: what bounds the
   * connections the transport keeps open between messages. Undefined while the domain's destination is unknown.
   */
  connectionLimitsOf(domain: string): { connections: number; messagesPerConnection: number } | undefined;
  /** The states changed since their last write, due for one now (at most once a second each); marks them written. */
  takeWrites(now: number): SharedState[];
  /**
   * Takes what other workers wrote (newer than what this worker knows), and keeps the rows of destinations it
   * has not learned yet: a domain it learns is one of them from its first message.
   */
  merge(rows: readonly SharedState[]): void;
  /**
   * The overrides now (DESTINATION_LIMITS's, then the API's): every known destination's limits again, its
   * rate and connections brought under new ceilings at once (a higher ceiling is reached by the increases).
   */
  setOverrides(overrides: readonly DestinationOverride[]): void;
  /** A destination's state as this worker knows it (its own changes and what it merged). */
  stateOf(lane: string): SharedState | undefined;
  /** Every destination this worker knows, for the metrics. */
  known(): SharedState[];
  /**
   * How many sending workers are alive now, this one included: each takes this share of every destination's
   * pace (its per-minute rate, at least MIN_RATE_SHARE, and its hour), and of its connections (at least one).
   */
  shareAmong(workers: number): void;
}

export function createDestinationShaping(
  options: { overrides?: readonly DestinationOverride[]; source?: string } = {},
): DestinationShaping {
  let overrides = options.overrides ?? [];
  const source = options.source ?? DEFAULT_SOURCE;
  const domainLane = new Map<string, string>();
  const lanesHosts = new Map<string, Set<string>>();
  const states = new Map<string, LocalState>();
  /** The rows last read of this source's destinations this worker has not learned (merge). */
  const unlearned = new Map<string, SharedState>();
  let workers = 1;

  function fresh(destination: Destination, mxHosts: string): LocalState {
    const { limits } = destination;
    return {
      key: destination.key,
      source,
      provider: destination.provider,
      mxHosts,
      limits,
      rate: limits.perMinute,
      connections: limits.connections,
      suspendedUntil: null,
      backoffMs: 0,
      lastDeferral: null,
      lastDeferralAt: null,
      deferrals: 0,
      suspensions: 0,
      updatedAt: 0,
      tokens: Math.max(1, shareOfRate(limits.perMinute) / 60),
      tokensAt: 0,
      recentStarts: [],
      hourStart: 0,
      hourCount: 0,
      changedAt: 0,
      acceptedSinceChange: 0,
      peak: limits.perMinute,
      connectionsCappedAt: -Infinity,
      dirty: false,
      writtenAt: -Infinity,
    };
  }

  const stateOfLane = (lane: string) => states.get(lane);
  const stateOfDomain = (domain: string) => states.get(domainLane.get(domain) ?? '');
  /** This worker's share of the live workers' (0: no limit). */
  const shareOfRate = (rate: number) => (rate > 0 ? Math.max(MIN_RATE_SHARE, rate / workers) : 0);
  const pace = (state: LocalState) => shareOfRate(state.rate);
  const connectionsOf = (state: LocalState) => Math.max(1, Math.floor(state.connections / workers));
  const hourFull = (state: LocalState, now: number) =>
    state.limits.perHour > 0 &&
    now - state.hourStart < HOUR &&
    state.hourCount >= Math.max(1, Math.floor(state.limits.perHour / workers));
  const bucketSize = (state: LocalState) => Math.max(1, pace(state) / 60);

  function refill(state: LocalState, now: number): void {
    if (state.rate <= 0) return;
    const elapsed = Math.max(0, now - state.tokensAt);
    state.tokens = Math.min(bucketSize(state), state.tokens + (elapsed * pace(state)) / MINUTE);
    state.tokensAt = now;
  }

  function changed(state: LocalState, now: number): void {
    state.dirty = true;
    state.updatedAt = now;
  }

  /** The shared part of a destination's row (another worker's write), its pace brought under a new rate. */
  function take(state: LocalState, row: SharedState): void {
    const rateChanged = row.rate !== state.rate;
    Object.assign(state, {
      rate: row.rate,
      connections: row.connections,
      suspendedUntil: row.suspendedUntil,
      backoffMs: row.backoffMs,
      lastDeferral: row.lastDeferral,
      lastDeferralAt: row.lastDeferralAt,
      deferrals: row.deferrals,
      suspensions: row.suspensions,
      updatedAt: row.updatedAt,
    });
    if (rateChanged) state.tokens = Math.min(state.tokens, bucketSize(state));
  }

  /** Additive increase: after a minute of deliveries without a deferral, a step towards (and past) the ceiling. */
  function increase(state: LocalState, now: number): void {
    if (now - state.changedAt < MINUTE || state.acceptedSinceChange === 0) return;
    const ceiling = state.limits.perMinute;
    const step = Math.max(1, Math.round((ceiling || state.peak) / 20));
    const before = { rate: state.rate, connections: state.connections };
    if (state.rate > 0) state.rate = ceiling > 0 ? Math.min(ceiling, state.rate + step) : state.rate + step;
    if (now - state.connectionsCappedAt >= HOUR) {
      state.connections = Math.min(state.limits.connections, state.connections + 1);
    }
    state.peak = Math.max(state.peak, state.rate);
    state.backoffMs = 0;
    state.changedAt = now;
    state.acceptedSinceChange = 0;
    if (before.rate !== state.rate || before.connections !== state.connections) changed(state, now);
  }

  return {
    laneOf: (domain) => domainLane.get(domain) ?? domain,
    providerOf: (lane) => states.get(lane)?.provider,
    hostsOf(lane) {
      const hosts = lanesHosts.get(lane);
      return hosts ? [...hosts].slice(-HOSTS_PER_LANE) : [lane];
    },
    startAt(lane, now, open) {
      const state = stateOfLane(lane);
      if (!state) return now;
      if (state.suspendedUntil !== null && state.suspendedUntil > now) return state.suspendedUntil;
      if (open >= connectionsOf(state)) return Infinity;
      if (hourFull(state, now)) return state.hourStart + HOUR;
      if (state.rate <= 0) return now;
      refill(state, now);
      if (state.tokens >= 1) return now;
      return now + Math.ceil(((1 - state.tokens) * MINUTE) / pace(state));
    },
    startable(now, withinMs) {
      const paced: Array<[string, number]> = [];
      for (const state of states.values()) {
        if ((state.suspendedUntil !== null && state.suspendedUntil > now) || hourFull(state, now)) {
          paced.push([state.key, 0]);
        } else if (state.rate > 0) {
          // The k-th start is at (k - tokens) minutes / rate from now: those before `withinMs` are held in
          // memory, later ones would be given back (queue/attempts.ts holdLane).
          refill(state, now);
          paced.push([state.key, Math.ceil(state.tokens + (withinMs * pace(state)) / MINUTE) - 1]);
        }
      }
      return paced;
    },
    started(lane, now) {
      const state = stateOfLane(lane);
      if (!state) return;
      if (state.rate > 0) {
        refill(state, now);
        state.tokens -= 1;
      }
      if (now - state.hourStart >= HOUR) {
        state.hourStart = now;
        state.hourCount = 0;
      }
      state.hourCount += 1;
      state.recentStarts.push(now);
      while (state.recentStarts.length > 0 && state.recentStarts[0]! <= now - MINUTE)
        state.recentStarts.shift();
    },
    unstarted(lane) {
      const state = stateOfLane(lane);
      if (!state) return;
      if (state.rate > 0) state.tokens = Math.min(bucketSize(state), state.tokens + 1);
      state.hourCount = Math.max(0, state.hourCount - 1);
      state.recentStarts.pop();
    },
    headroom(lane, now) {
      const state = stateOfLane(lane);
      if (!state || state.rate <= 0) return Infinity;
      refill(state, now);
      return state.tokens;
    },
    learn(domain, mxHosts, now) {
      const destination = destinationOf(domain, mxHosts, overrides);
      const isNew = domainLane.get(domain) !== destination.key;
      domainLane.set(domain, destination.key);
      const hosts = lanesHosts.get(destination.key) ?? new Set<string>();
      hosts.delete(domain);
      hosts.add(domain);
      lanesHosts.set(destination.key, hosts);
      if (!states.has(destination.key)) {
        const state = fresh(
          destination,
          [...new Set(mxHosts.map((host) => host.toLowerCase()))].sort().join(','),
        );
        const row = unlearned.get(destination.key);
        unlearned.delete(destination.key);
        // The workers' shared state when the database has it; else written once at least, so the operator
        // sees every destination.
        if (row) take(state, row);
        else changed(state, now);
        states.set(destination.key, state);
      }
      return { destination: destination.key, isNew };
    },
    observe(domain, reply, accepted, now, inFlight) {
      const state = stateOfDomain(domain);
      if (!state) return undefined;
      if (accepted) {
        state.acceptedSinceChange += 1;
        increase(state, now);
        return undefined;
      }
      const rule = classifyResponse(reply);
      if (!rule) return undefined;
      // Already suspended for an earlier reply of the same burst (attempts that were in flight): no new cut.
      const already = state.suspendedUntil !== null && state.suspendedUntil > now;
      state.lastDeferral = reply;
      state.lastDeferralAt = now;
      state.deferrals += 1;
      if (rule.kind === 'connections') {
        // It says how many it takes: the others still open when it refused this one. Each refusal of a
        // burst counts (each sees fewer open); no suspension (the open ones are being served), no increase
        // of connections for an hour. The other workers had as many open as this one, as far as it knows.
        state.connections = Math.max(1, Math.min(state.connections, inFlight * workers));
        state.connectionsCappedAt = now;
        changed(state, now);
        return throttledOf(
          state,
          rule,
          reply!,
          Math.max(now + rule.backoffMs, state.suspendedUntil ?? 0),
          false,
        );
      }
      if (!already) {
        // Multiplicative decrease, from what it actually took in the last minute when that was less (from
        // every worker: this one's starts, as many times as there are workers sharing it).
        const took = state.recentStarts.filter((at) => at > now - MINUTE).length * workers;
        const base = state.rate > 0 ? Math.min(state.rate, took) : took;
        state.peak = Math.max(1, state.rate > 0 ? state.rate : took);
        state.rate = Math.max(1, Math.floor(base / 2));
        state.tokens = Math.min(state.tokens, 0);
        state.tokensAt = now;
        state.backoffMs = Math.min(
          MAX_BACKOFF_MS,
          state.backoffMs > 0 ? state.backoffMs * 2 : rule.backoffMs,
        );
        state.suspendedUntil = now + state.backoffMs;
        state.suspensions += 1;
        state.changedAt = now;
        state.acceptedSinceChange = 0;
      }
      changed(state, now);
      return throttledOf(state, rule, reply!, state.suspendedUntil!, !already);
    },
    suspendedUntil(domain, now) {
      const until = stateOfDomain(domain)?.suspendedUntil;
      return until !== null && until !== undefined && until > now ? until : undefined;
    },
    connectionLimitsOf(domain) {
      const state = stateOfDomain(domain);
      return (
        state && {
          connections: connectionsOf(state),
          messagesPerConnection: state.limits.messagesPerConnection,
        }
      );
    },
    takeWrites(now) {
      const due: SharedState[] = [];
      for (const state of states.values()) {
        if (!state.dirty || now - state.writtenAt < WRITE_EVERY_MS) continue;
        state.dirty = false;
        state.writtenAt = now;
        due.push(shared(state));
      }
      return due;
    },
    merge(rows) {
      for (const row of rows) {
        if (row.source !== source) continue;
        const state = states.get(row.key);
        if (!state) unlearned.set(row.key, row);
        else if (!state.dirty && row.updatedAt > state.updatedAt) take(state, row);
      }
    },
    mxHostsOf: (destination) => (states.get(destination) ?? unlearned.get(destination))?.mxHosts,
    setOverrides(next) {
      overrides = next;
      for (const state of states.values()) {
        const hosts = state.mxHosts.split(',').filter(Boolean);
        const domain = [...(lanesHosts.get(state.key) ?? [])][0] ?? hosts[0] ?? state.key;
        const { limits } = destinationOf(domain, hosts, overrides);
        if (JSON.stringify(limits) === JSON.stringify(state.limits)) continue;
        state.limits = limits;
        if (limits.perMinute > 0 && (state.rate === 0 || state.rate > limits.perMinute)) {
          state.rate = limits.perMinute;
          state.tokens = Math.min(state.tokens, bucketSize(state));
        }
        state.connections = Math.max(1, Math.min(state.connections, limits.connections));
      }
    },
    stateOf(lane) {
      const state = states.get(lane);
      return state && shared(state);
    },
    known: () => [...states.values()].map(shared),
    shareAmong(count) {
      workers = Math.max(1, count);
      for (const state of states.values()) state.tokens = Math.min(state.tokens, bucketSize(state));
    },
  };
}

/** What a throttle did to a destination; its recipients wait until `until`. */
const throttledOf = (
  state: LocalState,
  rule: ResponseRule,
  reply: string,
  until: number,
  began: boolean,
): Throttled => ({
  destination: state.key,
  source: state.source,
  provider: state.provider,
  rule,
  reply,
  rate: state.rate,
  connections: state.connections,
  suspendedUntil: until,
  began,
});

function shared(state: LocalState): SharedState {
  return {
    key: state.key,
    source: state.source,
    provider: state.provider,
    mxHosts: state.mxHosts,
    rate: state.rate,
    connections: state.connections,
    suspendedUntil: state.suspendedUntil,
    backoffMs: state.backoffMs,
    lastDeferral: state.lastDeferral,
    lastDeferralAt: state.lastDeferralAt,
    deferrals: state.deferrals,
    suspensions: state.suspensions,
    updatedAt: state.updatedAt,
  };
}
