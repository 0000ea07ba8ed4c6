import { DEFAULTS, type DsnNotify } from '../../config.ts';
import { silentWhenDead } from '../../queue/heartbeats.repo.ts';
import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createQueueWorker, withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import { nextRetryDelay } from '../../queue/retry.ts';
import type { EmailRecord } from '../emails/emails.repo.ts';
import { classifyBounce } from '../emails/bounce.ts';
import type { ReturnPath } from '../emails/return-path.ts';
import type { ClaimedRecipient } from './sending.claims.ts';
import { createSendingQueue, type SendJob, type SendOutcome } from './sending.queue.ts';
import { createSendingQueueSource, type SendingQueueSourceDeps } from './sending.queue-source.ts';
import type { DomainService } from '../domains/domains.service.ts';
import type { EventService } from '../events/events.service.ts';
import { personalize } from '../engagement/personalize.ts';
import type { EngagementLinks } from '../engagement/tokens.ts';
import type { DestinationsRepo } from '../destinations/destinations.repo.ts';
import { createDestinationSync, type DestinationSync } from '../destinations/destinations.sync.ts';
import { createDestinationEvents } from '../destinations/destination-events.ts';
import { classifyResponse } from '../destinations/responses.ts';
import { DEFAULT_SOURCE, type Throttled } from '../destinations/shaping.ts';
import { createSourcedShaping } from '../destinations/source-shaping.ts';
import { createWarmupGate, type WarmupGate } from '../destinations/warmup.ts';
import { createWarmupStep } from './sending.warmup.ts';
import { createAttemptSources, type OpenAttempt } from './sending.sources.ts';
import type { SourceChooser } from '../destinations/source-ips.ts';
import { attemptOutcome } from './sending.outcome-rows.ts';
import type { WarmupsRepo } from '../destinations/warmups.repo.ts';
import type { MailTransport, RecipientOutcome, SendResult } from './transports/transport.ts';

export interface SendingSettings {
  /** Delay before each attempt of a recipient; `schedule[i]` comes before attempt i+1. Its length is the attempt count. */
  schedule: readonly number[];
  /** Retry delays move by up to ± this fraction of themselves; the configuration's sendRetryJitter when absent. */
  jitter?: number;
  /** SMTP transactions in flight at once in this worker. */
  concurrency: number;
  /** SMTP transactions in flight at once to one recipient domain in this worker (direct transport). */
  concurrencyPerHost: number;
  /** One attempt must end within this (it is aborted then, and retried). */
  timeoutMs: number;
  /** How long a claim holds; past it, another worker takes the recipient. Default 2 × timeout + 2 s. */
  leaseMs?: number;
  /** The fallback poll when no wake-up comes (another process on SQLite, a lost LISTEN). */
  pollIntervalMs?: number;
  /** How long stop() waits for attempts in flight before aborting them. Default timeout + 1 s. */
  stopGraceMs?: number;
  /** The outcomes the next hop is asked to report (SMTP_DSN); none when absent. */
  dsn?: readonly DsnNotify[];
}

export interface SendingWorkerDeps extends QueueWorkerDeps {
  /** Per-recipient return paths (BOUNCE_DOMAIN): each recipient then goes in an SMTP transaction of its own. */
  returnPath?: ReturnPath | undefined;
  /**
   * The DKIM key and return-path domain of the sending domain an email was accepted for (DomainService); the
   * transport's DKIM_* key and BOUNCE_DOMAIN otherwise.
   */
  signing?: Pick<DomainService, 'signingFor'> | undefined;
  /**
   * Builds the tracking and unsubscribe URLs on PUBLIC_URL: a recipient of an email that asked for tracking or
   * unsubscribe gets a copy of its own, built at send time, in an SMTP transaction of its own.
   */
  engagementLinks?: EngagementLinks | undefined;
  /** The event service; the worker emits in the transaction that records the attempts. */
  events: Pick<EventService, 'emitIn' | 'emitWith' | 'beforeEmitting'>;
  /** The process's repositories (createRepositories, src/repositories.ts) the sending queue reads and writes through. */
  repositories: SendingQueueSourceDeps['repositories'] & {
    destinations: DestinationsRepo;
    warmups: Pick<WarmupsRepo, 'enabled' | 'take' | 'takeForSource' | 'pruneCounts'>;
  };
  transport: MailTransport;
  settings: SendingSettings;
  /**
   * Direct delivery's destinations (issue 38): lanes, limits and throttles shared through the database. A
   * direct transport without it gets the built-in table's, as the source `default`.
   */
  destinations?: DestinationSync | undefined;
  /**
   * Direct delivery's warm-ups (issue 38): mail of a warming sending domain over its day's allowance waits. A
   * direct transport without it gets WARMUP_SCHEDULE's default, as the source `default`.
   */
  warmup?: WarmupGate | undefined;
  /** Direct delivery's source IPs (DIRECT_SOURCE_IPS): which address each message leaves from. */
  sources?: SourceChooser | undefined;
  /** Told of each throttle (a deferral that slowed or suspended a destination): metrics and the operator's event. */
  onThrottle?: ((throttled: Throttled) => void) | undefined;
}

export type SendingWorker = QueueWorker;

/**
 * Outcomes are written at most this often, each write one transaction for all of them (the recipients, the
 * emails, their events and counts). Written as soon as the last write ended, a write under load took one or
 * two outcomes; the wait delays only the write, never a send, and maxUnrecorded bounds what a crash resends.
 */
const OUTCOME_WRITE_INTERVAL_MS = 10;
/** Jobs held per slot through a relay (the attempts in flight and those ready to start when one ends). */
const HELD_PER_SLOT = 2;

const responseCode = (response: string | null): number | null => {
  const match = response ? /^([2-5]\d\d)[\s-]/.exec(response) : null;
  return match ? Number(match[1]) : null;
};

/**
 * Sends email on the queue runtime (src/queue/runtime.ts): recipients of one email travel in one SMTP
 * transaction, lanes are recipient domains (direct delivery) or the one relay, and claiming is fair across
 * projects (see emails/fair-queue.repo.ts). Each attempt's outcome, the recipients' new states and their events
 * commit in one transaction. A worker that dies mid-send leaves its recipients leased until the lease runs
 * out; another worker then sends them again (the same Message-ID: at least once, never lost).
 */
export function createSendingWorker(deps: SendingWorkerDeps): SendingWorker {
  const { clock, settings, transport } = deps;
  const { logger, random, workerId, pollIntervalMs, heartbeats, deadAfterMs } = withQueueDefaults(
    deps,
    settings,
  );
  const jitter = settings.jitter ?? DEFAULTS.sendRetryJitter;
  const { db, engine } = deps.database;
  const queue = createSendingQueue(db, engine);
  const destinations = transport.perDomain
    ? (deps.destinations ??
      createDestinationSync({
        repo: deps.repositories.destinations,
        shaping: createSourcedShaping({ sources: deps.sources?.sources.map((source) => source.address) }),
      }))
    : undefined;
  const shaping = destinations?.shaping;
  const destinationEvents =
    destinations &&
    createDestinationEvents({ db, events: deps.events, repo: deps.repositories.destinations });
  const warmupStep =
    destinations &&
    createWarmupStep({
      gate:
        deps.warmup ??
        createWarmupGate({
          repo: deps.repositories.warmups,
          source: DEFAULT_SOURCE,
          defaultSchedule: DEFAULTS.warmupSchedule,
        }),
      sources: deps.sources,
      destinations,
      transport,
      clock,
    });
  const sources =
    shaping &&
    createAttemptSources({
      shaping,
      chooser: deps.sources,
      concurrencyPerHost: settings.concurrencyPerHost,
      now: () => clock.now().getTime(),
    });
  const sourceCount = shaping?.sources.length ?? 1;
  const source = createSendingQueueSource({
    db,
    engine,
    events: deps.events,
    repositories: deps.repositories,
    now: () => clock.now().toISOString(),
    perDomain: transport.perDomain,
    recipientPerJob: Boolean(deps.returnPath),
    pollIntervalMs,
    destinations,
    destinationEvents,
    // The sending workers heard from lately (this one too): each takes its share of every destination.
    aliveWorkers: (now) =>
      heartbeats.alive(workerId, QUEUE_CHANNELS.sending, new Date(now - silentWhenDead(deadAfterMs))),
  });

  const worker = createQueueWorker({
    name: 'sending worker',
    workerId,
    source,
    attempt,
    close: () => transport.close(),
    settings: {
      concurrency: settings.concurrency,
      // Direct: SEND_CONCURRENCY_PER_HOST per destination from each source address (the shaping holds each).
      laneConcurrency: transport.perDomain ? sourceCount * settings.concurrencyPerHost : settings.concurrency,
      // Through a relay (or captured), twice the slots held: the next job starts the moment an attempt ends.
      // Held only as many as there are slots, a slot stood empty from its attempt's end until the outcomes'
      // write (at most every OUTCOME_WRITE_INTERVAL_MS, and its commit) brought the next claim with it
      // (recordAndClaim). The relay's pool bounds its connections. Delivering directly, one per slot: the
      // next attempt to a host would open its connection while the last one's is still closing (a receiving
      // server counted 3 at once against SEND_CONCURRENCY_PER_HOST 2, test/sending.test.ts).
      laneCapacity: transport.perDomain
        ? sourceCount * settings.concurrencyPerHost
        : HELD_PER_SLOT * settings.concurrency,
      capacity: (transport.perDomain ? 1 : HELD_PER_SLOT) * settings.concurrency,
      // Under load, claim in batches: wait until a quarter of the slots are free (each finished attempt
      // wakes the loop) instead of paying a claim and a load for every single slot.
      claimBatch: Math.max(1, Math.floor(settings.concurrency / 4)),
      attemptTimeoutMs: settings.timeoutMs,
      leaseMs: settings.leaseMs ?? 2 * settings.timeoutMs + 2000,
      pollIntervalMs,
      stopGraceMs: settings.stopGraceMs ?? settings.timeoutMs + 1000,
      outcomeWriteIntervalMs: OUTCOME_WRITE_INTERVAL_MS,
      // Each attempt sent but not yet recorded is sent again after a crash: at most 2 × concurrency.
      maxUnrecorded: settings.concurrency,
    },
    clock,
    logger,
    notifier: deps.notifier,
    database: deps.database,
    channel: QUEUE_CHANNELS.sending,
    heartbeats,
    deadAfterMs,
    shaping: sources?.lanes,
  });
  return {
    ...worker,
    async start() {
      await worker.start();
      logger.info({ transport: transport.kind }, `Sending email ${transport.description}`);
      if (!deps.returnPath && transport.kind !== 'capture') {
        logger.warn(
          {},
          'BOUNCE_DOMAIN is not set: the envelope sender is the From address, so bounce reports go there and late bounces stay invisible',
        );
      }
    },
  };

  async function attempt(job: SendJob, stopping: AbortSignal): Promise<SendOutcome | undefined> {
    // Counted open from the start (synchronously, before the runtime looks at the next job of its lane).
    const opened = sources?.open(job.host);
    /** The connection is over: called once its reply is in, before what the reply says is judged. */
    const end = () => opened && sources!.close(opened);
    try {
      return await attemptIn(job, stopping, end, opened);
    } finally {
      end();
    }
  }

  /**
   * What an attempt's replies tell its destination (issue 38): the domain's MX hosts, an acceptance, or a
   * throttle (which it returns: the recipients then wait for the destination, without using up an attempt).
   */
  async function observe(
    job: SendJob,
    result: SendResult,
    opened: OpenAttempt | undefined,
  ): Promise<Throttled | undefined> {
    if (!destinations || !shaping || !opened) return undefined;
    const now = clock.now().getTime();
    if (result.mxHosts) {
      const learned = shaping.learn(job.host, result.mxHosts, now);
      if (learned.isNew) await destinations.learned(job.host, learned.destination, now);
    }
    const accepted = result.outcomes.some((outcome) => outcome.result === 'accepted');
    const deferred = result.outcomes.find((outcome) => outcome.result === 'deferred' && outcome.response);
    const throttled = shaping
      .of(opened.source)
      .observe(job.host, deferred?.response ?? null, accepted, now, sources!.others(opened));
    if (throttled) {
      await destinations.flush(now);
      await destinationEvents?.suspended(throttled, job.email.projectId);
      deps.onThrottle?.(throttled);
      logger.warn(
        {
          destination: throttled.destination,
          source: throttled.source,
          reply: throttled.reply,
          rate: throttled.rate,
        },
        'sending worker: a destination asked to slow down; it is suspended for a back-off',
      );
    }
    return throttled;
  }

  async function attemptIn(
    job: SendJob,
    stopping: AbortSignal,
    end: () => unknown,
    opened: OpenAttempt | undefined,
  ): Promise<SendOutcome | undefined> {
    const attemptedAt = clock.now();
    const timeout = AbortSignal.timeout(settings.timeoutMs);
    const signal = AbortSignal.any([stopping, timeout]);
    let result: SendResult;
    let rawPiecesKey: string | undefined;
    try {
      if (job.tracking && !deps.engagementLinks) {
        throw new Error(
          'PUBLIC_URL is not set in this worker, so its tracking and unsubscribe URLs cannot be built',
        );
      }
      const decided = await warmupStep?.decide(job, opened && sources!.readiness(opened));
      if (decided && 'hold' in decided)
        return attemptOutcome(
          workerId,
          job.email,
          attemptedAt,
          clock.now(),
          warmupStep!.held(job, decided.hold),
        );
      // The warm-up chose another address than the shaping did: the start is that one's.
      if (opened && decided?.source) sources!.moveTo(opened, decided.source.address, clock.now().getTime());
      const identity = deps.signing ? await deps.signing.signingFor(job.email.projectId, job.email) : {};
      result = await transport.send({
        email:
          job.tracking && deps.engagementLinks
            ? await personalize(job.email, job.recipients[0]!.id, job.tracking, deps.engagementLinks)
            : job.email,
        host: job.host,
        envelopeFrom: deps.returnPath?.forRecipient(job.recipients[0]!.id, identity.returnPathDomain),
        dkim: identity.dkim,
        dsn: settings.dsn,
        recipients: job.recipients.map((row) => ({ address: row.address, attempts: row.attempts })),
        signal,
        limits: opened && sources!.connectionLimitsOf(opened),
        source: decided?.source,
      });
      if (result.raw !== undefined)
        rawPiecesKey = await queue.keepLargeCaptureInPieces(job.email.id, result.raw);
    } catch (error) {
      logger.error({ err: error, email: job.email.id }, 'sending worker: the transport failed');
      const message = error instanceof Error ? error.message : String(error);
      result = {
        outcomes: job.recipients.map((row) => ({
          address: row.address,
          result: 'deferred',
          response: null,
          error: `internal error: ${message}`,
        })),
      };
    }
    // Stopping cut it short: no verdict; stop() gives the leases back for a retry.
    if (stopping.aborted) return undefined;
    if (timeout.aborted) {
      result.outcomes = result.outcomes.map((outcome) =>
        outcome.result === 'deferred' && outcome.response === null
          ? { ...outcome, error: `timed out after ${settings.timeoutMs} ms` }
          : outcome,
      );
    }

    // Synchronously, so that attempts refused together each see the others that are still open.
    end();
    const throttled = await observe(job, result, opened).catch((error: unknown) => {
      logger.error({ err: error, email: job.email.id }, 'sending worker: recording a destination failed');
      return undefined;
    });
    const now = clock.now();
    return {
      ...attemptOutcome(
        workerId,
        job.email,
        attemptedAt,
        now,
        job.recipients.map((row) => {
          const outcome =
            result.outcomes.find((entry) => entry.address.toLowerCase() === row.address.toLowerCase()) ??
            ({
              address: row.address,
              result: 'deferred',
              response: null,
              error: 'no result for this recipient',
            } as const);
          return judge(job.email, row, outcome, now, throttled);
        }),
      ),
      raw: result.raw,
      rawPiecesKey,
    };
  }

  /** What an attempt's outcome means for the recipient: its next status and what happened to it. */
  function judge(
    email: EmailRecord,
    row: ClaimedRecipient,
    outcome: RecipientOutcome,
    now: Date,
    throttled?: Throttled,
  ): SendOutcome['updates'][number] {
    const reply = outcome.response;
    const said = {
      ...(reply !== null ? { smtp_response: reply } : {}),
      ...('error' in outcome && outcome.error !== null ? { error: outcome.error } : {}),
    };
    const base = {
      id: row.id,
      response: reply ?? ('error' in outcome ? outcome.error : null),
      responseCode: responseCode(reply),
      email,
      address: row.address,
      data: said,
    };

    if (outcome.result === 'accepted') {
      const status = outcome.complained ? 'complained' : transport.finalHop ? 'delivered' : 'sent';
      return {
        ...base,
        status,
        outcomes: [
          'sent',
          ...(transport.finalHop ? (['delivered'] as const) : []),
          ...(outcome.complained ? (['complained'] as const) : []),
        ],
      };
    }
    if (outcome.result === 'bounced') {
      // No reply at all: the transport found that the domain does not exist.
      const bounce = classifyBounce(reply ?? ('error' in outcome ? outcome.error : null), {
        noSuchDomain: reply === null,
      });
      return { ...base, data: { ...said, bounce }, bounce, status: 'bounced', outcomes: ['bounced'] };
    }

    // A destination's "slow down": the recipient waits for it, and the attempt is not counted against it.
    if (throttled && outcome.response !== null && classifyResponse(outcome.response)) {
      return {
        ...base,
        status: 'delayed',
        counted: false,
        waitReason: 'destination',
        retryAt: new Date(shaping!.resumesAt(row.host, throttled, now.getTime())).toISOString(),
        outcomes: row.status === 'delayed' ? [] : ['delayed'],
      };
    }
    const delay = nextRetryDelay({
      attemptsMade: row.attempts + 1,
      schedule: settings.schedule,
      jitter,
      random,
    });
    if (delay === undefined) return { ...base, status: 'failed', outcomes: ['failed'] };
    return {
      ...base,
      status: 'delayed',
      retryAt: new Date(now.getTime() + delay).toISOString(),
      // Said once when a recipient starts waiting, not again on every retry.
      outcomes: row.status === 'delayed' ? [] : ['delayed'],
    };
  }
}
