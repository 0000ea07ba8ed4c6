import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { Config } from '../../config.ts';
import type { DatabaseHandle, Listener } from '../../db/connection.ts';
import type { Clock } from '../../lib/clock.ts';
import { randomToken, type SecretBox } from '../../lib/crypto.ts';
import type { Resolver } from '../../lib/network-policy.ts';
import { createDeliveryRepo, type ClaimedDelivery, type DeliveryOutcome } from './deliveries.repo.ts';
import { DELIVERY_CHANNEL, type DeliveryNotifier } from './notifier.ts';
import { nextRetryDelay, parseRetryAfter } from './retry.ts';
import { createSender, type SendResult } from './sender.ts';
import { signWebhook } from './signing.ts';

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

/** The pino subset the worker logs through (Fastify's logger fits). */
export interface WorkerLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}

const silentLogger: WorkerLogger = { info() {}, warn() {}, error() {} };

export interface DeliveryWorkerDeps {
  database: DatabaseHandle;
  clock: Clock;
  secretBox: SecretBox;
  /** Resolves webhook hosts at connect time; every address is checked against the private-network policy. */
  resolver: Resolver;
  allowPrivateUrls: boolean;
  settings: DeliverySettings;
  /** In-process wake-ups from the event service. */
  notifier?: DeliveryNotifier | undefined;
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
 * Claims due deliveries and POSTs them. Concurrency is bounded overall and per webhook: a webhook that
 * hangs occupies only its own slots (until the timeout), so the other webhooks' deliveries keep flowing.
 * Many workers (in many processes) can run against one database; leases keep them from sending the same
 * delivery at once, and bring back the claims of a worker that died.
 */
export function createDeliveryWorker(deps: DeliveryWorkerDeps): DeliveryWorker {
  const { clock, settings } = deps;
  const logger = deps.logger ?? silentLogger;
  const random = deps.random ?? Math.random;
  const workerId = deps.workerId ?? `${hostname()}/${process.pid}/${randomToken(6)}`;
  const leaseMs = settings.leaseMs ?? 2 * settings.timeoutMs + 5000;
  const pollIntervalMs = settings.pollIntervalMs ?? 1000;
  const stopGraceMs = settings.stopGraceMs ?? settings.timeoutMs + 2000;
  const userAgent = settings.userAgent ?? defaultUserAgent();
  if (leaseMs <= settings.timeoutMs) throw new Error('The lease must be longer than the webhook timeout.');

  const repo = createDeliveryRepo(deps.database.db, deps.database.engine);
  const newSender = () =>
    createSender({
      resolver: deps.resolver,
      allowPrivateUrls: deps.allowPrivateUrls,
      timeoutMs: settings.timeoutMs,
    });
  let sender = newSender();
  let abort = new AbortController();

  const inFlight = new Map<string, Promise<void>>();
  const perWebhook = new Map<string, number>();
  let running = false;
  let loop: Promise<void> | undefined;
  let wakePending = false;
  /** The most deliveries one claim asks for; shrinks while claims return more than the webhooks can take. */
  let claimLimit = settings.concurrency;
  let sleeping: { timer: NodeJS.Timeout; resolve: () => void } | undefined;
  let unsubscribe: (() => void) | undefined;
  let listener: Listener | undefined;
  let relisten: NodeJS.Timeout | undefined;

  function wake(): void {
    wakePending = true;
    if (sleeping) {
      clearTimeout(sleeping.timer);
      sleeping.resolve();
      sleeping = undefined;
    }
  }

  function sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      sleeping = { timer: setTimeout(resolve, ms), resolve };
    });
  }

  async function run(): Promise<void> {
    while (running) {
      wakePending = false;
      let pause = pollIntervalMs;
      let failed = false;
      try {
        await fill();
        pause = await untilNextDue();
      } catch (error) {
        // The database is unreachable or refused the claim: sleep instead of retrying at once (only a wake-up
        // that comes during the sleep, such as stop(), ends it early).
        failed = true;
        logger.error({ err: error, worker: workerId }, 'webhook worker: claiming deliveries failed');
      }
      if (!running) break;
      if (wakePending && !failed) continue;
      await sleep(pause);
      sleeping = undefined;
    }
  }

  /** Claims until the free slots are used or nothing more is due. */
  async function fill(): Promise<void> {
    while (running) {
      const free = settings.concurrency - inFlight.size;
      if (free <= 0) return;
      const saturated = [...perWebhook]
        .filter(([, count]) => count >= settings.concurrencyPerEndpoint)
        .map(([id]) => id);
      const limit = Math.min(free, claimLimit);
      const now = clock.now();
      const claimed = await repo.claim({
        workerId,
        now: now.toISOString(),
        lockedUntil: new Date(now.getTime() + leaseMs).toISOString(),
        limit,
        excludeWebhookIds: saturated,
      });
      if (claimed.length === 0) return;

      // One claim can return more deliveries for a webhook than it has free slots; holding the rest here
      // would burn their lease while they wait, so they go back for the next claim.
      const keep: string[] = [];
      const excess: string[] = [];
      const counts = new Map(perWebhook);
      for (const { id, webhookId } of claimed) {
        if (inFlight.has(id)) continue; // our own attempt outlived its lease; it is still going
        const count = counts.get(webhookId) ?? 0;
        if (count >= settings.concurrencyPerEndpoint) {
          excess.push(id);
        } else {
          counts.set(webhookId, count + 1);
          keep.push(id);
        }
      }
      // Claim next time about as many as this claim could use: with one busy webhook, claiming every free slot
      // and releasing all but one cost two row writes per surplus row (60 per delivery with the defaults).
      claimLimit =
        excess.length > 0 ? Math.max(settings.concurrencyPerEndpoint, keep.length) : settings.concurrency;
      if (excess.length > 0) await repo.release(workerId, excess);
      for (const delivery of await repo.loadClaimed(workerId, keep)) dispatch(delivery);
      if (claimed.length < limit || keep.length === 0) return;
    }
  }

  /** How long to sleep: until the next pending delivery is due, at most one poll interval. */
  async function untilNextDue(): Promise<number> {
    const next = await repo.nextDueAt();
    if (next === undefined) return pollIntervalMs;
    const wait = Date.parse(next) - clock.now().getTime();
    // Due but not claimable (its webhook is at its limit, or another worker holds it): a finished attempt
    // or the poll wakes us.
    if (wait <= 0) return pollIntervalMs;
    return Math.min(wait, pollIntervalMs);
  }

  function dispatch(delivery: ClaimedDelivery): void {
    perWebhook.set(delivery.webhookId, (perWebhook.get(delivery.webhookId) ?? 0) + 1);
    const done = attempt(delivery)
      .catch((error: unknown) => {
        // The lease runs out and another claim retries it: at least once, never lost.
        logger.error(
          { err: error, delivery: delivery.id, webhook: delivery.webhookId },
          'webhook worker: recording a delivery attempt failed',
        );
      })
      .finally(() => {
        inFlight.delete(delivery.id);
        const left = (perWebhook.get(delivery.webhookId) ?? 1) - 1;
        if (left > 0) perWebhook.set(delivery.webhookId, left);
        else perWebhook.delete(delivery.webhookId);
        wake();
      });
    inFlight.set(delivery.id, done);
  }

  async function attempt(delivery: ClaimedDelivery): Promise<void> {
    const base = { delivery, workerId };
    if (!delivery.webhookEnabled) {
      // Disabled since the event: nothing is sent. The delivery fails and says why, so it can be recovered.
      await repo.recordOutcome({
        ...base,
        now: clock.now().toISOString(),
        status: 'failed',
        lastError: `not sent: the webhook is disabled${delivery.disabledReason ? ` (${delivery.disabledReason})` : ''}`,
      });
      return;
    }

    const attemptedAt = clock.now();
    let result: SendResult;
    let secrets: string[] = [];
    let secretError: string | undefined;
    try {
      if (delivery.secretSealed !== null) secrets = [deps.secretBox.open(delivery.secretSealed)];
      // While a rotation runs, the replaced secret signs too, so receivers still holding it verify.
      if (
        delivery.secretSealed !== null &&
        delivery.previousSecretSealed !== null &&
        delivery.previousSecretExpiresAt !== null &&
        Date.parse(delivery.previousSecretExpiresAt) > attemptedAt.getTime()
      ) {
        secrets.push(deps.secretBox.open(delivery.previousSecretSealed));
      }
    } catch {
      secretError = 'the signing secret could not be decrypted (was the encryption key changed?)';
    }
    if (secretError) {
      result = { statusCode: null, headers: {}, responseExcerpt: null, durationMs: 0, error: secretError };
    } else {
      const body = webhookPayload(delivery);
      const timestamp = Math.floor(attemptedAt.getTime() / 1000);
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'user-agent': userAgent,
        'webhook-id': delivery.eventId,
        'webhook-timestamp': String(timestamp),
      };
      if (secrets.length > 0)
        headers['webhook-signature'] = signWebhook(secrets, delivery.eventId, timestamp, body);
      result = await sender.send({ url: delivery.url, headers, body, signal: abort.signal });
      // Stopping cut it short: no verdict on the receiver; stop() gives the lease back for a retry.
      if (abort.signal.aborted) return;
    }

    const finished = clock.now();
    const outcome = judge(delivery, result, finished);
    const recorded = await repo.recordOutcome({
      ...base,
      ...outcome,
      now: finished.toISOString(),
      attempt: {
        attemptedAt: attemptedAt.toISOString(),
        statusCode: result.statusCode,
        durationMs: result.durationMs,
        error: outcome.lastError,
        responseExcerpt: result.responseExcerpt,
      },
    });
    if (!recorded.held) {
      logger.warn(
        { delivery: delivery.id, webhook: delivery.webhookId, worker: workerId },
        'webhook worker: lease lost before the attempt was recorded; another worker owns the delivery',
      );
    }
    if (recorded.disabledReason) {
      logger.warn({ webhook: delivery.webhookId, reason: recorded.disabledReason }, 'webhook disabled');
    }
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

  async function openListener(): Promise<void> {
    if (!deps.database.listen || !running) return;
    try {
      listener = await deps.database.listen(DELIVERY_CHANNEL, wake, (error) => {
        listener = undefined;
        logger.warn({ err: error }, 'webhook worker: LISTEN connection lost; polling until it is back');
        scheduleRelisten();
      });
      if (!running) await listener.close();
    } catch (error) {
      logger.warn({ err: error }, 'webhook worker: could not LISTEN; polling until it can');
      scheduleRelisten();
    }
  }

  function scheduleRelisten(): void {
    if (!running || relisten) return;
    relisten = setTimeout(() => {
      relisten = undefined;
      void openListener();
    }, 5000);
    relisten.unref();
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
      unsubscribe = deps.notifier?.subscribe(wake);
      await openListener();
      loop = run();
    },

    async stop() {
      if (!running) return;
      running = false;
      unsubscribe?.();
      clearTimeout(relisten);
      relisten = undefined;
      await listener?.close();
      wake();
      await loop;

      const settled = Promise.allSettled([...inFlight.values()]);
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), stopGraceMs);
      });
      if ((await Promise.race([settled, grace])) === 'late') {
        abort.abort();
        // Aborted sends return at once; only a database that does not answer keeps one longer.
        await Promise.race([settled, new Promise((resolve) => setTimeout(resolve, 1000))]);
      }
      clearTimeout(timer);
      await repo.release(workerId).catch((error: unknown) => {
        logger.error({ err: error }, 'webhook worker: could not give back its leases; they expire');
      });
      sender.close();
      abort.abort();
    },
  };
}
