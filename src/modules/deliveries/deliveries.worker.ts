import type { KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { Config } from '../../config.ts';
import type { DatabaseHandle } from '../../db/connection.ts';
import type { Clock } from '../../lib/clock.ts';
import { randomToken, type SecretBox } from '../../lib/crypto.ts';
import type { Resolver } from '../../lib/network-policy.ts';
import { createBatcher } from '../../lib/batcher.ts';
import type { Notifier } from '../../lib/notifier.ts';
import { silentWorkerLogger, type WorkerLogger } from '../../lib/worker-logger.ts';
import { createWorkLoop } from '../../lib/work-loop.ts';
import {
  createDeliveryRepo,
  type ClaimedDelivery,
  type DeliveryOutcome,
  type OutcomeResult,
} from './deliveries.repo.ts';
import { DELIVERY_CHANNEL } from './notifier.ts';
import { nextRetryDelay, parseRetryAfter } from './retry.ts';
import { createSender, type SendResult } from './sender.ts';
import { signingKeyObject, signWithKeys } from './signing.ts';

export interface DeliverySettings {
  /** An attempt must answer 2xx within this (connect and response). */
  timeoutMs: number;
  /** Delay before each attempt; `schedule[i]` comes before attempt i+1. Its length is the attempt count. */
  schedule: readonly number[];
  /** Retry delays move by up to ± this fraction of themselves. */
  jitter: number;
  /** Attempts in flight at once in this worker. */
  concurrency: number;
  /** Attempts in flight at once to one webhook in this worker. */
  concurrencyPerEndpoint: number;
  /** A webhook whose attempts have all failed for this long is disabled. */
  disableAfterMs: number;
  /** How long a claim holds; past it, another worker takes the delivery. Default 2 × timeout + 5 s. */
  leaseMs?: number;
  /** The fallback poll when no wake-up comes (another process on SQLite, a lost LISTEN). Default 1 s. */
  pollIntervalMs?: number;
  /** How long stop() waits for attempts in flight before aborting them. Default timeout + 2 s. */
  stopGraceMs?: number;
  userAgent?: string;
}

export function deliverySettingsFromConfig(config: Config): DeliverySettings {
  return {
    timeoutMs: config.webhookTimeoutMs,
    schedule: config.webhookRetrySchedule,
    jitter: config.webhookRetryJitter,
    concurrency: config.webhookConcurrency,
    concurrencyPerEndpoint: config.webhookConcurrencyPerEndpoint,
    disableAfterMs: config.webhookDisableAfterMs,
  };
}

export interface DeliveryWorkerDeps {
  database: DatabaseHandle;
  clock: Clock;
  secretBox: SecretBox;
  /** Resolves webhook hosts at connect time; every address is checked against the private-network policy. */
  resolver: Resolver;
  allowPrivateUrls: boolean;
  settings: DeliverySettings;
  /** In-process wake-ups from the event service. */
  notifier?: Notifier | undefined;
  logger?: WorkerLogger | undefined;
  /** Randomness for jitter (tests pin it). */
  random?: () => number;
  /** Names this worker in `locked_by`; unique per worker. */
  workerId?: string;
}

export interface DeliveryWorker {
  readonly id: string;
  start(): Promise<void>;
  /** Stops claiming, waits for attempts in flight (bounded), then gives back whatever it still holds. */
  stop(): Promise<void>;
}

/** `Postwire-Webhooks/<version>`, the version read from package.json. */
export function defaultUserAgent(): string {
  const manifest = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return `Postwire-Webhooks/${manifest.version}`;
}

/** The body a receiver gets: the stored data JSON is spliced in as is, not parsed and serialized again. */
export function webhookPayload(
  delivery: Pick<ClaimedDelivery, 'eventId' | 'eventType' | 'eventCreatedAt' | 'eventData'>,
): string {
  const head = JSON.stringify({
    id: delivery.eventId,
    type: delivery.eventType,
    created_at: delivery.eventCreatedAt,
  });
  return `${head.slice(0, -1)},"data":${delivery.eventData}}`;
}

/**
 * Waits for `promise` at most `ms`; true when it settled in time. The timer is cleared either way, so a
 * stopped worker leaves nothing behind that keeps the process alive.
 */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A delivery this worker holds, with when its lease runs out. */
interface HeldDelivery extends ClaimedDelivery {
  leaseEndsAt: number;
}

/** This worker's deliveries of one webhook: attempts in flight, and claimed ones waiting for a slot. */
interface Lane {
  inFlight: number;
  waiting: HeldDelivery[];
  /** The webhook may have more due deliveries than this worker holds: top it up when it has room. */
  backlogged: boolean;
}

/** Past this many, decrypted secrets are forgotten (all at once: it is a cache of a few webhooks' keys). */
const SECRET_CACHE_SIZE = 1000;
/** Outcomes are written at most this often (each write is one transaction for all of them). */
const OUTCOME_WRITE_INTERVAL_MS = 3;
/** An attempt starts only with at least the timeout plus this much of its lease left. */
const LEASE_MARGIN_MS = 1000;

/**
 * Claims due deliveries and POSTs them. Concurrency is bounded overall and per webhook: a webhook that
 * hangs occupies only its own slots (until the timeout), so the other webhooks' deliveries keep flowing.
 * Many workers (in many processes) can run against one database; leases keep them from sending the same
 * delivery at once, and bring back the claims of a worker that died.
 *
 * Three things keep it fast. A slot is free as soon as the response is in: outcomes are written in batches
 * (one transaction for all the attempts that finished within a few milliseconds), bounded by
 * `maxUnrecorded`; until its outcome is written, a delivery stays leased to this worker, so a crash means a
 * retry, never a loss. Each webhook holds several times its slots, so the next attempt starts the moment one
 * ends instead of after a claim. And webhooks known to have work are topped up by claims on their own rows (an index finds them);
 * only new work (a wake-up, a retry falling due, the poll) makes the worker look at every webhook.
 */
export function createDeliveryWorker(deps: DeliveryWorkerDeps): DeliveryWorker {
  const { clock, settings } = deps;
  const logger = deps.logger ?? silentWorkerLogger;
  const random = deps.random ?? Math.random;
  const workerId = deps.workerId ?? `${hostname()}/${process.pid}/${randomToken(6)}`;
  const leaseMs = settings.leaseMs ?? 2 * settings.timeoutMs + 5000;
  const pollIntervalMs = settings.pollIntervalMs ?? 1000;
  const stopGraceMs = settings.stopGraceMs ?? settings.timeoutMs + 2000;
  const userAgent = settings.userAgent ?? defaultUserAgent();
  if (leaseMs <= settings.timeoutMs) throw new Error('The lease must be longer than the webhook timeout.');
  const perEndpoint = settings.concurrencyPerEndpoint;
  /**
   * Deliveries one webhook may hold, in flight and waiting: enough that its slots never wait for a claim
   * (each claim is a commit), topped up by half of it at a time. One that waits too long for a slot is
   * not started but given back (see LEASE_MARGIN_MS), so a hung webhook's surplus returns to the queue.
   */
  const laneCapacity = 8 * perEndpoint;
  const topUpAt = laneCapacity / 2;
  const heldCapacity = 4 * settings.concurrency;
  /** Attempts made whose outcome is not written yet; past it, claiming waits for the writes. */
  const maxUnrecorded = 2 * settings.concurrency;

  const repo = createDeliveryRepo(deps.database.db, deps.database.engine);
  const newSender = () =>
    createSender({
      resolver: deps.resolver,
      allowPrivateUrls: deps.allowPrivateUrls,
      timeoutMs: settings.timeoutMs,
    });
  let sender = newSender();
  let abort = new AbortController();

  const lanes = new Map<string, Lane>();
  const inFlight = new Map<string, Promise<void>>();
  let waitingCount = 0;
  /** Attempted deliveries whose outcome is queued or being written: still leased to this worker. */
  const unrecorded = new Set<string>();
  /** Deliveries whose lease ran too short to start an attempt; given back at the next round. */
  let expiring: string[] = [];
  let running = false;
  let unsubscribe: (() => void) | undefined;
  /** When to look for due deliveries of every webhook next; a wake-up from new work makes it now. */
  let nextDiscoveryAt = -Infinity;
  let lastDiscoveryAt = -Infinity;
  /** The most deliveries one look over every webhook asks for; shrinks while it returns more than fits. */
  let discoveryLimit = heldCapacity;
  /** HMAC keys by sealed secret: a PATCHed or rotated secret is a new sealed value, so it takes effect. */
  const keys = new Map<string, KeyObject>();

  const outcomes = createBatcher<DeliveryOutcome>({
    maxBatch: 256,
    minIntervalMs: OUTCOME_WRITE_INTERVAL_MS,
    write: writeOutcomes,
    onWritten: () => loop.wake(),
  });

  const loop = createWorkLoop({
    round,
    errorPauseMs: pollIntervalMs,
    onRoundError(error) {
      logger.error({ err: error, worker: workerId }, 'webhook worker: claiming deliveries failed');
    },
    listen: deps.database.listen && ((onLost) => deps.database.listen!(DELIVERY_CHANNEL, newWork, onLost)),
    onListenProblem(error, lost) {
      logger.warn(
        { err: error },
        lost
          ? 'webhook worker: LISTEN connection lost; polling until it is back'
          : 'webhook worker: could not LISTEN; polling until it can',
      );
    },
  });

  /** New deliveries may be due for any webhook: look over all of them at the next round. */
  function newWork(): void {
    nextDiscoveryAt = -Infinity;
    loop.wake();
  }

  const held = (lane: Lane) => lane.inFlight + lane.waiting.length;

  async function round(): Promise<number> {
    if (expiring.length > 0) {
      const ids = expiring;
      expiring = [];
      await repo.release(workerId, ids);
    }
    await fill();
    const now = clock.now().getTime();
    if (inFlight.size === 0 && waitingCount === 0 && unrecorded.size === 0) {
      // Idle: sleep until the next pending delivery is due (one this worker's last look has already passed
      // is not claimable yet: its webhook is busy elsewhere or another worker holds it; the poll finds it).
      const next = await repo.nextDueAt();
      const dueAt = next === undefined ? Infinity : Date.parse(next);
      if (dueAt > lastDiscoveryAt) nextDiscoveryAt = Math.min(nextDiscoveryAt, dueAt);
    }
    return Math.max(0, Math.min(pollIntervalMs, nextDiscoveryAt - now));
  }

  /** Claims until every webhook with work holds what it may, or nothing more is due. */
  async function fill(): Promise<void> {
    while (running) {
      if (unrecorded.size >= maxUnrecorded) return;
      let room = heldCapacity - inFlight.size - waitingCount;
      if (room <= 0) return;
      const now = clock.now();
      const lease = {
        workerId,
        now: now.toISOString(),
        lockedUntil: new Date(now.getTime() + leaseMs).toISOString(),
      };

      const topUps: Array<{ webhookId: string; limit: number }> = [];
      for (const [webhookId, lane] of lanes) {
        const limit = Math.min(laneCapacity - held(lane), room);
        if (!lane.backlogged || limit < Math.min(topUpAt, room) || limit <= 0) continue;
        topUps.push({ webhookId, limit });
        room -= limit;
      }
      if (topUps.length > 0) {
        const claimed = await repo.claimForWebhooks({ ...lease, webhooks: topUps });
        const got = new Map<string, number>();
        for (const { webhookId } of claimed) got.set(webhookId, (got.get(webhookId) ?? 0) + 1);
        for (const { webhookId, limit } of topUps) {
          const lane = lanes.get(webhookId);
          if (lane && (got.get(webhookId) ?? 0) < limit) lane.backlogged = false;
        }
        accept(claimed, now.getTime() + leaseMs);
        continue;
      }

      if (now.getTime() < nextDiscoveryAt) return;
      lastDiscoveryAt = now.getTime();
      nextDiscoveryAt = lastDiscoveryAt + pollIntervalMs;
      // Webhooks without room, or topped up on their own, are left out: the look finds the others' work.
      const excluded: string[] = [];
      for (const [webhookId, lane] of lanes) {
        if (held(lane) >= laneCapacity) lane.backlogged = true;
        if (lane.backlogged) excluded.push(webhookId);
      }
      const limit = Math.min(room, discoveryLimit);
      const claimed = await repo.claim({ ...lease, limit, excludeWebhookIds: excluded });
      // One look can return more deliveries for a webhook than it may hold; holding the rest would keep them
      // from other workers, so they go back and the webhook is topped up as it makes room.
      const keep: ClaimedDelivery[] = [];
      const excess: ClaimedDelivery[] = [];
      const counts = new Map<string, number>();
      for (const delivery of claimed) {
        const lane = lanes.get(delivery.webhookId);
        const count = counts.get(delivery.webhookId) ?? (lane ? held(lane) : 0);
        if (count >= laneCapacity) {
          excess.push(delivery);
        } else {
          counts.set(delivery.webhookId, count + 1);
          keep.push(delivery);
        }
      }
      accept(keep, now.getTime() + leaseMs);
      for (const { webhookId } of excess) lanes.get(webhookId)!.backlogged = true;
      // Ask next time for about as many as this look could use: releasing surplus rows costs two row writes each.
      discoveryLimit = excess.length > 0 ? Math.max(laneCapacity, keep.length) : heldCapacity;
      if (excess.length > 0)
        await repo.release(
          workerId,
          excess.map((delivery) => delivery.id),
        );
      // A full look may have left more: look again at once.
      if (claimed.length >= limit) nextDiscoveryAt = -Infinity;
      else if (excess.length === 0) return;
    }
  }

  /** Takes claimed deliveries into their webhooks' lanes and starts what the slots allow. */
  function accept(claimed: readonly ClaimedDelivery[], leaseEndsAt: number): void {
    for (const delivery of claimed) {
      // Our own attempt outlived its lease (or its outcome is not written yet), and we claimed it again.
      if (inFlight.has(delivery.id) || unrecorded.has(delivery.id)) continue;
      let lane = lanes.get(delivery.webhookId);
      if (!lane) {
        lane = { inFlight: 0, waiting: [], backlogged: false };
        lanes.set(delivery.webhookId, lane);
      }
      if (lane.waiting.some((waiting) => waiting.id === delivery.id)) continue;
      lane.waiting.push({ ...delivery, leaseEndsAt });
      waitingCount += 1;
    }
    startWaiting();
  }

  /** Starts waiting deliveries while their webhook's slots and the overall limit allow. */
  function startWaiting(): void {
    for (const [webhookId, lane] of lanes) {
      while (lane.waiting.length > 0 && lane.inFlight < perEndpoint && inFlight.size < settings.concurrency) {
        const delivery = lane.waiting.shift()!;
        waitingCount -= 1;
        // An attempt must be able to end, and its outcome be written, while the lease still holds.
        if (delivery.leaseEndsAt - clock.now().getTime() < settings.timeoutMs + LEASE_MARGIN_MS) {
          expiring.push(delivery.id);
          loop.wake();
          continue;
        }
        dispatch(lane, delivery);
      }
      if (held(lane) === 0 && !lane.backlogged) lanes.delete(webhookId);
    }
  }

  function dispatch(lane: Lane, delivery: ClaimedDelivery): void {
    lane.inFlight += 1;
    const done = attempt(delivery)
      .then((outcome) => {
        if (!outcome) return;
        unrecorded.add(delivery.id);
        outcomes.add(outcome);
      })
      .catch((error: unknown) => {
        // The lease runs out and another claim retries it: at least once, never lost.
        logger.error(
          { err: error, delivery: delivery.id, webhook: delivery.webhookId },
          'webhook worker: a delivery attempt failed',
        );
      })
      .finally(() => {
        inFlight.delete(delivery.id);
        lane.inFlight -= 1;
        startWaiting();
        loop.wake();
      });
    inFlight.set(delivery.id, done);
  }

  /** Writes a batch of outcomes; if the batch fails, each on its own, so one bad outcome sinks no other. */
  async function writeOutcomes(batch: DeliveryOutcome[]): Promise<void> {
    let results: Array<OutcomeResult | undefined>;
    try {
      results = await repo.recordOutcomes(batch);
    } catch (error) {
      const report = (failure: unknown, outcome: DeliveryOutcome) =>
        // The lease runs out and another claim retries it: at least once, never lost.
        logger.error(
          { err: failure, delivery: outcome.delivery.id, webhook: outcome.delivery.webhookId },
          'webhook worker: recording a delivery attempt failed',
        );
      results = [];
      for (const outcome of batch) {
        if (batch.length === 1) {
          report(error, outcome);
          results.push(undefined);
          continue;
        }
        results.push(
          await repo.recordOutcome(outcome).catch((failure: unknown) => {
            report(failure, outcome);
            return undefined;
          }),
        );
      }
    }
    for (const [index, outcome] of batch.entries()) {
      const { delivery } = outcome;
      unrecorded.delete(delivery.id);
      const recorded = results[index];
      if (!recorded) continue;
      if (!recorded.held) {
        logger.warn(
          { delivery: delivery.id, webhook: delivery.webhookId, worker: workerId },
          'webhook worker: lease lost before the attempt was recorded; another worker owns the delivery',
        );
      }
      if (recorded.disabledReason) {
        logger.warn({ webhook: delivery.webhookId, reason: recorded.disabledReason }, 'webhook disabled');
      }
      // A retry is due then: look for it (its webhook may have no other work this worker knows of).
      if (recorded.held && outcome.nextAttemptAt !== undefined) {
        nextDiscoveryAt = Math.min(nextDiscoveryAt, Date.parse(outcome.nextAttemptAt));
      }
    }
  }

  /** The HMAC keys that sign for the webhook now: its secret, and the replaced one during a rotation. */
  function signingKeys(delivery: ClaimedDelivery, at: number): KeyObject[] {
    const keyOf = (sealed: string) => {
      let key = keys.get(sealed);
      if (!key) {
        if (keys.size >= SECRET_CACHE_SIZE) keys.clear();
        key = signingKeyObject(deps.secretBox.open(sealed));
        keys.set(sealed, key);
      }
      return key;
    };
    if (delivery.secretSealed === null) return [];
    const signing = [keyOf(delivery.secretSealed)];
    if (
      delivery.previousSecretSealed !== null &&
      delivery.previousSecretExpiresAt !== null &&
      Date.parse(delivery.previousSecretExpiresAt) > at
    ) {
      signing.push(keyOf(delivery.previousSecretSealed));
    }
    return signing;
  }

  /** Makes the attempt; returns its outcome to record, or nothing when stopping cut it short. */
  async function attempt(delivery: ClaimedDelivery): Promise<DeliveryOutcome | undefined> {
    const base = { delivery, workerId };
    if (!delivery.webhookEnabled) {
      // Disabled since the event: nothing is sent. The delivery fails and says why, so it can be recovered.
      return {
        ...base,
        now: clock.now().toISOString(),
        status: 'failed',
        lastError: `not sent: the webhook is disabled${delivery.disabledReason ? ` (${delivery.disabledReason})` : ''}`,
      };
    }

    const attemptedAt = clock.now();
    let result: SendResult;
    let signing: KeyObject[] | undefined;
    try {
      signing = signingKeys(delivery, attemptedAt.getTime());
    } catch {
      const error = 'the signing secret could not be decrypted (was the encryption key changed?)';
      result = { statusCode: null, headers: {}, responseExcerpt: null, durationMs: 0, error };
    }
    if (signing) {
      const body = webhookPayload(delivery);
      const timestamp = Math.floor(attemptedAt.getTime() / 1000);
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'user-agent': userAgent,
        'webhook-id': delivery.eventId,
        'webhook-timestamp': String(timestamp),
      };
      if (signing.length > 0)
        headers['webhook-signature'] = signWithKeys(signing, delivery.eventId, timestamp, body);
      result = await sender.send({ url: delivery.url, headers, body, signal: abort.signal });
      // Stopping cut it short: no verdict on the receiver; stop() gives the lease back for a retry.
      if (abort.signal.aborted) return undefined;
    }

    const finished = clock.now();
    const outcome = judge(delivery, result!, finished);
    return {
      ...base,
      ...outcome,
      now: finished.toISOString(),
      attempt: {
        attemptedAt: attemptedAt.toISOString(),
        statusCode: result!.statusCode,
        durationMs: result!.durationMs,
        error: outcome.lastError,
        responseExcerpt: result!.responseExcerpt,
      },
    };
  }

  /** What an attempt's result means for the delivery and the webhook. */
  function judge(
    delivery: ClaimedDelivery,
    result: SendResult,
    now: Date,
  ): Pick<DeliveryOutcome, 'status' | 'nextAttemptAt' | 'lastError' | 'health'> {
    const code = result.statusCode;
    if (code !== null && code >= 200 && code < 300) {
      return { status: 'succeeded', lastError: null, health: { ok: true } };
    }
    let error: string;
    let retryAfterMs: number | undefined;
    if (code === null) {
      error = result.error ?? 'no response';
    } else if (code >= 300 && code < 400) {
      const location = result.headers.location;
      error = `redirect not followed (${code}${location ? ` to ${String(location).slice(0, 500)}` : ''})`;
    } else if (code === 410) {
      const reason = `The endpoint answered 410 Gone at ${now.toISOString()}.`;
      return {
        status: 'failed',
        lastError: 'the receiver answered 410 Gone; the webhook was disabled',
        health: { ok: false, disableNow: reason, disableAfterMs: settings.disableAfterMs },
      };
    } else {
      error = `the receiver answered ${code}`;
      if (code === 429 || code === 503) {
        const header = result.headers['retry-after'];
        retryAfterMs = parseRetryAfter(Array.isArray(header) ? header[0] : header, now);
      }
    }
    const health = { ok: false as const, disableAfterMs: settings.disableAfterMs };
    const delay = nextRetryDelay({
      attemptsMade: delivery.attempts + 1,
      schedule: settings.schedule,
      jitter: settings.jitter,
      random,
      retryAfterMs,
    });
    if (delay === undefined) return { status: 'failed', lastError: error, health };
    return {
      status: 'pending',
      nextAttemptAt: new Date(now.getTime() + delay).toISOString(),
      lastError: error,
      health,
    };
  }

  return {
    id: workerId,

    async start() {
      if (running) return;
      running = true;
      if (abort.signal.aborted) {
        abort = new AbortController();
        sender = newSender();
      }
      nextDiscoveryAt = -Infinity;
      discoveryLimit = heldCapacity;
      unsubscribe = deps.notifier?.subscribe(newWork);
      await loop.start();
    },

    async stop() {
      if (!running) return;
      running = false;
      unsubscribe?.();
      await loop.stop();
      // Deliveries waiting for a slot are not started; the release below gives them back.
      for (const lane of lanes.values()) lane.waiting = [];
      waitingCount = 0;

      const settled = Promise.allSettled([...inFlight.values()]);
      if (!(await settlesWithin(settled, stopGraceMs))) {
        abort.abort();
        // Aborted sends return at once; only a database that does not answer keeps one longer.
        await settlesWithin(settled, 1000);
      }
      // The outcomes go in before the leases go back: released first, a sent delivery would be sent again.
      await settlesWithin(outcomes.drain(), stopGraceMs);
      lanes.clear();
      expiring = [];
      await repo.release(workerId).catch((error: unknown) => {
        logger.error({ err: error }, 'webhook worker: could not give back its leases; they expire');
      });
      sender.close();
      abort.abort();
    },
  };
}
