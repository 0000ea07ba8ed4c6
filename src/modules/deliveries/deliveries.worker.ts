import type { KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Config } from '../../config.ts';
import type { SecretBox } from '../../lib/crypto.ts';
import type { Resolver } from '../../lib/network-policy.ts';
import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createQueueWorker, withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import { type ClaimedDelivery, createDeliveryQueue, type DeliveryOutcome } from './deliveries.queue.ts';
import { createDeliveryQueueSource, type DeliveryJob } from './deliveries.queue-source.ts';
import { nextRetryDelay, parseRetryAfter } from '../../queue/retry.ts';
import { createSender, type SendResult } from './sender.ts';
import { resendPayload } from './resend-payload.ts';
import { signingKeyObject, signWithKeys } from './signing.ts';
import type { HealthWrites } from './webhook-health.ts';
import { type MetricsRecorder, noMetrics } from '../metrics/instruments.ts';

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
  /** The fallback poll when no wake-up comes (another process on SQLite, a lost LISTEN). */
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

export interface DeliveryWorkerDeps extends QueueWorkerDeps {
  /** Where the outcomes' bearing on their webhooks' health is written (the process's webhooks repository). */
  webhooks: HealthWrites;
  secretBox: SecretBox;
  /** Resolves webhook hosts at connect time; every address is checked against the private-network policy. */
  resolver: Resolver;
  allowPrivateUrls: boolean;
  settings: DeliverySettings;
  /** Counts the attempts made, by result (/metrics); nothing is counted when absent. */
  metrics?: Pick<MetricsRecorder, 'webhookAttempts'> | undefined;
}

export type DeliveryWorker = QueueWorker;

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

/** Past this many, decrypted secrets are forgotten (all at once: it is a cache of a few webhooks' keys). */
const SECRET_CACHE_SIZE = 1000;
/**
 * Bodies kept by event, per format: an event's deliveries to its webhooks are claimed and attempted at about
 * the same time, so a few events' bodies serve a fan-out (an event never changes once emitted). Forgotten
 * all at once, like the keys: a bounded memo dropping its oldest entry on every miss (one webhook's
 * deliveries, each of its own event) walked the Map's deleted entries from its start each time, 3.5 % of
 * the worker's busy time.
 */
const BODY_CACHE_SIZE = 1000;
/**
 * Outcomes are written at most this often (each write is one transaction for all of them). A write's cost is
 * mostly fixed (its statements and commit): on SQLite 8 outcomes a write cost about 65 µs each, 32 about
 * 40 µs; at 3 ms a busy webhook's batches held about 7. The wait delays only the write, never an attempt
 * (slots free up when attempts end), and maxUnrecorded still bounds what a crash sends again.
 */
const OUTCOME_WRITE_INTERVAL_MS = 10;
/**
 * A webhook's lane holds this many times its slots, topped up once half of that is free, so a busy webhook's
 * claims carry 8× its slots (32 rows with the default 4). At 8× they carried 16–20, and a claim's fixed cost
 * (its statement and, on its own, its commit) was much of the queue's share of a delivery's CPU (issue 43,
 * fifth session: a third fewer claims). A slow receiver's rows that cannot start while their lease holds are
 * given back (attempts.ts startWaiting), as before, only more of them.
 */
const LANE_HOLD_PER_SLOT = 16;

/**
 * Delivers webhook events on the queue runtime (src/queue/runtime.ts): each pending delivery is a job in its
 * webhook's lane, so a webhook that hangs occupies only its own slots while the others' deliveries flow.
 * Each webhook may hold LANE_HOLD_PER_SLOT times its slots (topped up by half of that at a time), so its
 * next attempt starts the moment one ends instead of after a claim. What is left here is the policy: signing
 * and POSTing, and what a response means for the delivery and its webhook.
 */
export function createDeliveryWorker(deps: DeliveryWorkerDeps): DeliveryWorker {
  const { clock, settings } = deps;
  const { logger, random, workerId, pollIntervalMs, heartbeats, deadAfterMs } = withQueueDefaults(
    deps,
    settings,
  );
  const userAgent = settings.userAgent ?? defaultUserAgent();
  const metrics = deps.metrics ?? noMetrics;
  const sender = createSender({
    resolver: deps.resolver,
    allowPrivateUrls: deps.allowPrivateUrls,
    timeoutMs: settings.timeoutMs,
  });
  /** HMAC keys by sealed secret: a PATCHed or rotated secret is a new sealed value, so it takes effect. */
  const keys = new Map<string, KeyObject>();
  /** Bodies by format and event id (BODY_CACHE_SIZE). */
  const bodies = { postwire: new Map<string, string>(), resend: new Map<string, string>() };
  function bodyOf(delivery: ClaimedDelivery): string {
    const resend = delivery.webhookFormat === 'resend';
    const cached = resend ? bodies.resend : bodies.postwire;
    let body = cached.get(delivery.eventId);
    if (body === undefined) {
      body = resend
        ? resendPayload({
            type: delivery.eventType,
            createdAt: delivery.eventCreatedAt,
            data: delivery.eventData,
          })
        : webhookPayload(delivery);
      if (cached.size >= BODY_CACHE_SIZE) cached.clear();
      cached.set(delivery.eventId, body);
    }
    return body;
  }

  const source = createDeliveryQueueSource({
    queue: createDeliveryQueue(deps.database.db, deps.database.engine, deps.webhooks),
    logger,
    metrics,
  });

  return createQueueWorker({
    name: 'webhook worker',
    workerId,
    source,
    attempt,
    close: () => sender.close(),
    settings: {
      concurrency: settings.concurrency,
      laneConcurrency: settings.concurrencyPerEndpoint,
      laneCapacity: LANE_HOLD_PER_SLOT * settings.concurrencyPerEndpoint,
      capacity: 4 * settings.concurrency,
      claimBatch: 1,
      attemptTimeoutMs: settings.timeoutMs,
      leaseMs: settings.leaseMs ?? 2 * settings.timeoutMs + 5000,
      pollIntervalMs,
      stopGraceMs: settings.stopGraceMs ?? settings.timeoutMs + 2000,
      outcomeWriteIntervalMs: OUTCOME_WRITE_INTERVAL_MS,
      maxUnrecorded: 2 * settings.concurrency,
    },
    clock,
    logger,
    notifier: deps.notifier,
    database: deps.database,
    channel: QUEUE_CHANNELS.deliveries,
    heartbeats,
    deadAfterMs,
  });

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
  async function attempt(delivery: DeliveryJob, signal: AbortSignal): Promise<DeliveryOutcome | undefined> {
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
      const body = bodyOf(delivery);
      const timestamp = Math.floor(attemptedAt.getTime() / 1000);
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'user-agent': userAgent,
        'webhook-id': delivery.eventId,
        'webhook-timestamp': String(timestamp),
      };
      if (signing.length > 0)
        headers['webhook-signature'] = signWithKeys(signing, delivery.eventId, timestamp, body);
      result = await sender.send({ url: delivery.url, headers, body, signal });
      // Stopping cut it short: no verdict on the receiver; stop() gives the lease back for a retry.
      if (signal.aborted) return undefined;
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
}
