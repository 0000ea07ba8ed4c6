import { AsyncLocalStorage } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { type CompiledQuery, createQueryId, type Kysely, type LogEvent } from 'kysely';
import type { StampScope } from './cached-tables.ts';
import type { Database } from './schema.ts';

// Reads kept in memory while a version stamp says they are current.
//
// The hot reads (the key behind a bearer token, a project's webhooks, a template) change rarely and are read
// on nearly every request. Each scope has a stamp in `cache_stamps` that a trigger gives a new value in the
// transaction of every cached write, whichever process writes: its tables' inserts and deletes, and updates
// of the columns the reads hold (db/cached-tables.ts, the one definition; migrations 0015 and 0018). A cached
// value is served only while its scope's stamp is still the one it was loaded under: a revoked key, a deleted
// webhook or a published template is seen by every process on its next request. What is saved is the query
// and the building of its rows: the stamp read is one row of one tiny table, and concurrent requests share it
// (below).
//
// On SQLite a stamp read costs a few microseconds (db/engine/sqlite.ts) and is made on every use. On
// PostgreSQL it is a round trip, whose socket write alone cost about as much CPU as the rest of a cached GET;
// there a read vouches for the stamps for a lease instead, and the lease is made safe by the writers: the
// answers a process gives after a commit of its own cached write wait until no other process can still serve
// what it replaced (`outlastLeases`). With the registry of listening processes (`listeners`,
// engine/stamp-registry.ts) that is once every registered process has acknowledged hearing of the write, or
// the lease, whichever comes first; a process vouches for its reads only while it is registered, and stops
// as soon as it hears of a write. A client that has its answer and asks another process then finds that
// process's older reads dropped or expired, whatever the load. Writes to these tables are rare and answer a
// round trip later (the lease, if a process does not acknowledge); reads make one round trip per lease,
// however many requests they serve.

export type { StampScope };

type StampValues = ReadonlyMap<string, string>;

export interface Stamps {
  /**
   * The scope's stamp as of a read that started after this call, so it reflects every write committed before
   * the call (or whose answer was given before it, with a lease). Through `db` when given (a transaction's,
   * which also sees the transaction's own writes): inside a transaction it must be given.
   */
  current(scope: StampScope, db?: Kysely<Database>, options?: ThroughOptions): Promise<string>;
  /**
   * This process committed a cached write (db/cached-tables.ts): what was read before is not vouched for any
   * more (its own next request must see it), and the request that wrote it, if any, notes when
   * (`RequestWindow.cachedWriteAt`), for its answer to wait out the other processes' leases.
   */
  noteOwnCommit(): void;
  /**
   * Resolves once no stamp read another process may have made before a commit at `since` (by default this
   * process's latest cached write) still vouches: every registered process has acknowledged hearing of it
   * (`StampOptions.listeners`), or the lease is over. An answer given after it is seen by every process's
   * next request. Undefined when no read can still vouch (always, without a lease).
   */
  outlastLeases(since?: number): Promise<void> | undefined;
  /**
   * A cached write was committed (heard of from the database, in any process): no read made before now
   * vouches any more.
   */
  heardWrite(): void;
  /** How long a read vouches for the stamps (0: none does, and nothing ever waits). */
  readonly leaseMs: number;
  /** Waits out the leases (`outlastLeases`): a tool's write is seen everywhere once it has closed. */
  close(): Promise<void>;
}

export interface ThroughOptions {
  /**
   * The transaction `db` has written nothing to the scope's table: what it would read is the committed stamp,
   * so a read still within its lease serves without another (a round trip inside the transaction, while it
   * holds its locks), and a read through it serves later ones.
   */
  unwritten?: boolean;
}

export interface StampOptions {
  /**
   * SQLite: reads the stamps straight from the connection, skipping Kysely, when that is safe (no
   * transaction open on it, so the read sees exactly what is committed); undefined when it is not.
   */
  readDirectly?: () => StampValues | undefined;
  /**
   * How long a stamp read vouches for the stamps, in milliseconds; 0 (the default): a read on every use.
   * Every process sharing the database must have the same lease, since each waits out the others' with its
   * own (CACHE_STAMP_LEASE).
   */
  leaseMs?: number;
  /** Monotonic time in milliseconds (tests move it). */
  now?: () => number;
  /**
   * The processes that hear of every write (PostgreSQL: engine/stamp-registry.ts). With them, a read vouches
   * only while this process is registered among them, and an answer after a write waits for their
   * acknowledgements or the lease, whichever comes first. Without them every read vouches for its lease and
   * such an answer waits the lease out.
   */
  listeners?: StampListeners;
}

export interface StampListeners {
  /**
   * Since when (the stamps' clock) this process has been registered and listening without a break;
   * undefined while it is not: then no read vouches.
   */
  vouchingSince(): number | undefined;
  /**
   * Resolves once every other registered process has acknowledged hearing of the writes this process
   * committed before the call. It may never (a process that does not answer): `signal` ends the wait.
   */
  acknowledged(signal: AbortSignal): Promise<void>;
}

/**
 * An API request's span: a stamp read issued after the request began reflects every write committed before
 * it arrived, so that one read serves the request's later lookups too (the key, then the webhook list) instead
 * of one read each. Closed when the response is sent, so nothing the request left behind (a timer) reuses
 * it later.
 */
export interface RequestWindow {
  readonly startedAt: number;
  open: boolean;
  /**
   * When this request committed a cached write (noteOwnCommit, in its async context), if it did: its answer
   * waits out the leases from then (`outlastLeases(cachedWriteAt)`); other requests' answers do not wait.
   */
  cachedWriteAt: number | undefined;
}

const requestWindows = new AsyncLocalStorage<RequestWindow>();

/** Runs `next` (the rest of a request) in a new request window, which it returns for closing. */
export function openRequestWindow(next: () => void): RequestWindow {
  const window: RequestWindow = { startedAt: performance.now(), open: true, cachedWriteAt: undefined };
  requestWindows.run(window, next);
  return window;
}

/**
 * Called for every statement but a SELECT: a request that writes must see its own writes, so from then on
 * its lookups read the stamps afresh (its window closes).
 */
export function noteStatement(kind: string): void {
  if (kind === 'SelectQueryNode') return;
  const window = requestWindows.getStore();
  if (window) window.open = false;
}

/** Every statement run (Kysely's `log`), for the request windows: noteStatement by the query's kind. */
export const noteStatements = (event: LogEvent) => noteStatement(event.query.query.kind);

/**
 * Outside a transaction, concurrent callers share reads: a read in flight serves only callers that came
 * before it started, so a caller arriving during one waits for the next, which starts as soon as the
 * current one ends and serves everyone who arrived meanwhile. Under load that is one stamp read per
 * database round trip, however many requests are in flight; each request waits at most two round trips.
 * With a lease, a read past half its lease is renewed in the background, so under steady load requests do
 * not wait for one at all.
 */
export function createStamps(db: Kysely<Database>, options: StampOptions = {}): Stamps {
  const { readDirectly, leaseMs = 0, now = () => performance.now(), listeners } = options;
  const query: CompiledQuery = db.selectFrom('cache_stamps').select(['scope', 'version']).compile();
  const readThrough = async (via: Kysely<Database>): Promise<StampValues> => {
    const { rows } = await via.executeQuery<{ scope: string; version: number | string }>({
      ...query,
      queryId: createQueryId(),
    });
    return new Map(rows.map((row) => [row.scope, String(row.version)]));
  };

  /** Each scope's latest stamp read outside a transaction, and when that read was issued. */
  const latest = new Map<string, { issuedAt: number; value: string }>();
  const remember = (scope: string, value: string, issuedAt: number) => {
    const seen = latest.get(scope);
    if (!seen || seen.issuedAt <= issuedAt) latest.set(scope, { issuedAt, value });
  };

  let inFlight: Promise<StampValues> | undefined;
  /** When the read in flight was issued. */
  let inFlightIssuedAt = -Infinity;
  let next: Promise<StampValues> | undefined;
  const start = (): Promise<StampValues> => {
    const issuedAt = now();
    const read = readThrough(db);
    inFlight = read;
    inFlightIssuedAt = issuedAt;
    const settle = () => {
      if (inFlight === read) inFlight = undefined;
    };
    read.then((values) => {
      for (const [scope, value] of values) remember(scope, value, issuedAt);
      settle();
    }, settle);
    return read;
  };
  const shared = (): Promise<StampValues> => {
    if (!inFlight) return start();
    next ??= inFlight
      .then(
        () => undefined,
        () => undefined,
      )
      .then(() => {
        next = undefined;
        return start();
      });
    return next;
  };

  const valueOf = (values: StampValues, scope: StampScope) => {
    const value = values.get(scope);
    if (value === undefined) throw new Error(`No cache stamp for '${scope}'.`);
    return value;
  };

  /** When this process last committed a write to a stamped table (as it learnt of the commit). */
  let ownCommitAt = -Infinity;
  /** When this process last heard of a write committed anywhere (`heardWrite`). */
  let heardAt = -Infinity;
  /**
   * A read issued after this process's latest commit and the latest write it heard of, while it has been
   * registered (with `listeners`), and within its lease still stands: a write another process committed
   * after the read is not answered before this process has heard of it or the lease has run out
   * (`outlastLeases`).
   */
  const vouchedFor = (seen: { issuedAt: number } | undefined): boolean => {
    if (seen === undefined || seen.issuedAt <= ownCommitAt || seen.issuedAt <= heardAt) return false;
    if (now() - seen.issuedAt >= leaseMs) return false;
    if (!listeners) return true;
    const since = listeners.vouchingSince();
    return since !== undefined && seen.issuedAt >= since;
  };
  /**
   * With a lease, the read in flight (a renewal, or another caller's), when it was issued after this process's
   * latest commit: once it answers, its value for `scope` if it is still within its lease, as `vouchedFor`
   * holds a finished read (a write another process committed after it was issued is answered only once that
   * lease has run out); undefined otherwise. One read instead of waiting for it and then making another.
   */
  const inFlightWithinLease = async (scope: StampScope): Promise<string | undefined> => {
    const read = inFlight;
    if (leaseMs === 0 || read === undefined || inFlightIssuedAt <= Math.max(ownCommitAt, heardAt))
      return undefined;
    try {
      await read;
    } catch {
      return undefined;
    }
    const seen = latest.get(scope);
    return vouchedFor(seen) ? seen!.value : undefined;
  };
  const outlastLeases = (since = ownCommitAt): Promise<void> | undefined => {
    const until = since + leaseMs;
    if (leaseMs === 0 || now() >= until) return undefined;
    return (async () => {
      const done = new AbortController();
      const leaseOver = (async () => {
        // Timers may fire a little early against the monotonic clock: wait again for what is left.
        for (let left = until - now(); left > 0 && !done.signal.aborted; left = until - now())
          await sleep(Math.ceil(left), undefined, { signal: done.signal }).catch(() => undefined);
      })();
      // A failed announcement (the database or the listener gone) leaves the lease to wait out.
      const acknowledged = listeners?.acknowledged(done.signal).catch(() => leaseOver) ?? leaseOver;
      try {
        await Promise.race([leaseOver, acknowledged]);
      } finally {
        done.abort();
      }
    })();
  };

  return {
    async current(scope, via, options) {
      if (via !== undefined && options?.unwritten) {
        const seen = latest.get(scope);
        if (vouchedFor(seen)) return seen!.value;
        const issuedAt = now();
        const value = valueOf(await readThrough(via), scope);
        // Only this scope: the transaction may have written the others' tables.
        remember(scope, value, issuedAt);
        return value;
      }
      if (via !== undefined) return valueOf(await readThrough(via), scope);
      const seen = latest.get(scope);
      if (vouchedFor(seen)) {
        if (!inFlight && now() - seen!.issuedAt >= leaseMs / 2) void start();
        return seen!.value;
      }
      const window = requestWindows.getStore();
      if (window?.open && seen && seen.issuedAt >= window.startedAt) return seen.value;
      const issuedAt = now();
      const direct = readDirectly?.();
      if (!direct) return (await inFlightWithinLease(scope)) ?? valueOf(await shared(), scope);
      for (const [each, value] of direct) remember(each, value, issuedAt);
      return valueOf(direct, scope);
    },
    noteOwnCommit() {
      ownCommitAt = now();
      // The request whose transaction this was (the commit resumes in its async context): its answer, and only
      // its, may tell a client of the write.
      const window = requestWindows.getStore();
      if (window) window.cachedWriteAt = ownCommitAt;
    },
    outlastLeases,
    heardWrite() {
      heardAt = now();
    },
    leaseMs,
    async close() {
      await outlastLeases();
    },
  };
}

export interface ValidatedCache<V> {
  /**
   * The value under `key`: the cached one when the scope's stamp is unchanged since it was loaded, else
   * `load()`'s (kept when `keep` allows). `db`: a transaction to read the stamp through (then `load` must
   * read through it too), as `options` allow.
   */
  get(key: string, load: () => Promise<V>, db?: Kysely<Database>, options?: ThroughOptions): Promise<V>;
}

export interface ValidatedCacheOptions<V> {
  scope: StampScope;
  /** Past this many keys the oldest entry goes. */
  maxEntries: number;
  /** Whether a loaded value is worth keeping (for example, not a lookup that found nothing). */
  keep?: (value: V) => boolean;
}

/**
 * Values are shared between callers: they are frozen (deeply) so that a caller changing one fails loudly
 * instead of changing what the next request reads.
 */
export function createValidatedCache<V>(
  stamps: Stamps,
  options: ValidatedCacheOptions<V>,
): ValidatedCache<V> {
  const entries = new Map<string, { stamp: string; value: V }>();
  return {
    async get(key, load, db, through) {
      // The stamp first: data loaded after it is at least as new, so an entry never claims a newer stamp
      // than its data (at worst it is loaded again once more).
      const stamp = await stamps.current(options.scope, db, through);
      const entry = entries.get(key);
      if (entry && entry.stamp === stamp) return entry.value;
      const value = deepFreeze(await load());
      if (options.keep && !options.keep(value)) {
        entries.delete(key);
        return value;
      }
      entries.delete(key);
      if (entries.size >= options.maxEntries) entries.delete(entries.keys().next().value!);
      entries.set(key, { stamp, value });
      return value;
    },
  };
}

function deepFreeze<V>(value: V): V {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const field of Object.values(value)) deepFreeze(field);
  }
  return value;
}
