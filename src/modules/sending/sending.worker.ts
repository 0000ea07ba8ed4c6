import { hostname } from 'node:os';
import type { Config } from '../../config.ts';
import type { DatabaseHandle } from '../../db/connection.ts';
import type { Clock } from '../../lib/clock.ts';
import { randomToken } from '../../lib/crypto.ts';
import type { Notifier } from '../../lib/notifier.ts';
import { silentWorkerLogger, type WorkerLogger } from '../../lib/worker-logger.ts';
import { createWorkLoop } from '../../lib/work-loop.ts';
import { nextRetryDelay } from '../deliveries/retry.ts';
import type { EventKind } from '../event-kinds/event-kinds.ts';
import type { EventService } from '../events/events.service.ts';
import type { EmailRecord } from '../emails/emails.repo.ts';
import { createBatcher } from './batcher.ts';
import { SENDING_CHANNEL } from './notifier.ts';
import {
  type AttemptRecord,
  type ClaimedRecipient,
  createSendingRepo,
  type RecipientUpdate,
  type StoredEmailEvent,
} from './sending.repo.ts';
import { createTransportFromConfig } from './transports/from-config.ts';
import type { MailTransport, RecipientOutcome, SendResult } from './transports/transport.ts';

export interface SendingSettings {
  /** Delay before each attempt of a recipient; `schedule[i]` comes before attempt i+1. Its length is the attempt count. */
  schedule: readonly number[];
  /** Retry delays move by up to ± this fraction of themselves. Default 0.2. */
  jitter?: number;
  /** SMTP transactions in flight at once in this worker. */
  concurrency: number;
  /** SMTP transactions in flight at once to one recipient domain in this worker (direct transport). */
  concurrencyPerHost: number;
  /** One attempt must end within this (it is aborted then, and retried). */
  timeoutMs: number;
  /** How long a claim holds; past it, another worker takes the recipient. Default 2 × timeout + 2 s. */
  leaseMs?: number;
  /** The fallback poll when no wake-up comes (another process on SQLite, a lost LISTEN). Default 1 s. */
  pollIntervalMs?: number;
  /** How long stop() waits for attempts in flight before aborting them. Default timeout + 1 s. */
  stopGraceMs?: number;
  /** Events written but not emitted for this long are emitted again (their worker died). Default 30 s. */
  emitRetryAfterMs?: number;
}

/**
 * The sending worker of a process, as the configuration sets it up: the transport (SMTP_URL relay, direct
 * MX delivery or capture), SEND_* settings and DKIM. Share `notifier` with the app (AppDeps.sendNotifier) so
 * accepted emails go out at once, and give it an event service whose notifier wakes the delivery worker.
 */
export function createSendingWorkerFromConfig(deps: {
  config: Config;
  database: DatabaseHandle;
  clock: Clock;
  events: Pick<EventService, 'emit'>;
  notifier?: Notifier | undefined;
  logger?: WorkerLogger | undefined;
}): SendingWorker {
  return createSendingWorker({
    database: deps.database,
    clock: deps.clock,
    events: deps.events,
    transport: createTransportFromConfig(deps.config),
    settings: sendingSettingsFromConfig(deps.config),
    notifier: deps.notifier,
    logger: deps.logger,
  });
}

export function sendingSettingsFromConfig(config: Config): SendingSettings {
  return {
    schedule: config.sendRetrySchedule,
    concurrency: config.sendConcurrency,
    concurrencyPerHost: config.sendConcurrencyPerHost,
    timeoutMs: config.sendTimeoutMs,
  };
}

export interface SendingWorkerDeps {
  database: DatabaseHandle;
  clock: Clock;
  /** The event service; the worker only emits. */
  events: Pick<EventService, 'emit'>;
  transport: MailTransport;
  settings: SendingSettings;
  /** In-process wake-ups from the send API. */
  notifier?: Notifier | undefined;
  logger?: WorkerLogger | undefined;
  /** Randomness for jitter (tests pin it). */
  random?: () => number;
  /** Names this worker in `locked_by`; unique per worker. */
  workerId?: string;
}

export interface SendingWorker {
  readonly id: string;
  start(): Promise<void>;
  /** Stops claiming, waits for attempts in flight (bounded), then gives back what it still holds, and closes the transport. */
  stop(): Promise<void>;
}

/** One SMTP transaction: recipients of one email (of one domain, when each domain is its own destination). */
interface Job {
  email: EmailRecord;
  host: string;
  recipients: ClaimedRecipient[];
}

// Waiting recipients moved into the queue per round; more rounds follow at once when there are more.
const PROMOTE_BATCH = 500;
// How often the worker looks for events that were written but never emitted.
const SWEEP_INTERVAL_MS = 5000;

const responseCode = (response: string | null): number | null => {
  const match = response ? /^([2-5]\d\d)[\s-]/.exec(response) : null;
  return match ? Number(match[1]) : null;
};

/**
 * Claims due recipients and sends them through the transport. Concurrency is bounded overall and per
 * recipient domain (direct delivery), recipients of one email travel in one SMTP transaction, and claiming
 * is fair across projects (see fair-queue.ts). Many workers, in many processes, can share one database:
 * leases keep them from sending the same recipient at once and bring back the claims of a worker that died
 * (a message can then reach its server twice, with the same Message-ID: at least once, never lost).
 */
export function createSendingWorker(deps: SendingWorkerDeps): SendingWorker {
  const { clock, settings, transport } = deps;
  const logger = deps.logger ?? silentWorkerLogger;
  const random = deps.random ?? Math.random;
  const jitter = settings.jitter ?? 0.2;
  const workerId = deps.workerId ?? `${hostname()}/${process.pid}/${randomToken(6)}`;
  const leaseMs = settings.leaseMs ?? 2 * settings.timeoutMs + 2000;
  const pollIntervalMs = settings.pollIntervalMs ?? 1000;
  const stopGraceMs = settings.stopGraceMs ?? settings.timeoutMs + 1000;
  const emitRetryAfterMs = settings.emitRetryAfterMs ?? 30_000;
  if (leaseMs <= settings.timeoutMs) throw new Error('The lease must be longer than the send timeout.');

  const repo = createSendingRepo(deps.database.db, deps.database.engine);
  let abort = new AbortController();
  const inFlight = new Set<Promise<void>>();
  const perHost = new Map<string, number>();
  let running = false;
  let unsubscribe: (() => void) | undefined;
  let lastSweep = 0;
  let lastPrune = 0;
  // When the earliest waiting recipient becomes due, as last read, and when it was read: the worker reads it
  // again once that time has come or a poll interval has passed (new retries and scheduled sends), not on
  // every wake-up.
  let nextWaiting: { at: string | undefined; readAt: number } = { at: undefined, readAt: -Infinity };
  // Attempts that finish together are recorded in one transaction, and their event ids noted in one statement.
  const record = createBatcher((records: AttemptRecord[]) => repo.recordAttempts(records));
  const noteEmitted = createBatcher(async (pairs: Array<{ id: string; eventId: string }>) => {
    await repo.markEmitted(pairs);
    return pairs.map(() => undefined);
  });

  async function waitingAt(now: number): Promise<string | undefined> {
    const stale = now - nextWaiting.readAt >= pollIntervalMs;
    const due = nextWaiting.at !== undefined && Date.parse(nextWaiting.at) <= now;
    if (stale || due) nextWaiting = { at: await repo.nextWaitingAt(), readAt: now };
    return nextWaiting.at;
  }

  const loop = createWorkLoop({
    round,
    errorPauseMs: pollIntervalMs,
    onRoundError(error) {
      logger.error({ err: error, worker: workerId }, 'sending worker: claiming recipients failed');
    },
    listen: deps.database.listen && ((onLost) => deps.database.listen!(SENDING_CHANNEL, loop.wake, onLost)),
    onListenProblem(error, lost) {
      logger.warn(
        { err: error },
        lost
          ? 'sending worker: LISTEN connection lost; polling until it is back'
          : 'sending worker: could not LISTEN; polling until it can',
      );
    },
  });

  async function round(): Promise<number> {
    const now = clock.now();
    const waiting = await waitingAt(now.getTime());
    if (waiting !== undefined && waiting <= now.toISOString()) {
      // More than a batch due: go round again at once instead of sleeping.
      if ((await repo.promoteDue(now.toISOString(), PROMOTE_BATCH)) >= PROMOTE_BATCH) loop.wake();
      nextWaiting.readAt = -Infinity;
    }
    await fill();
    await sweep();
    const next = await waitingAt(clock.now().getTime());
    if (next === undefined) return pollIntervalMs;
    return Math.max(0, Math.min(pollIntervalMs, Date.parse(next) - clock.now().getTime()));
  }

  /** Claims until the free slots are used or nothing more is due. */
  async function fill(): Promise<void> {
    while (running) {
      const free = settings.concurrency - inFlight.size;
      if (free <= 0) return;
      // Under load, claim in batches: wait until a quarter of the slots are free (each finished attempt
      // wakes the loop) instead of paying a claim and a load for every single slot.
      if (inFlight.size > 0 && free < Math.max(1, Math.floor(settings.concurrency / 4))) return;
      const saturated = transport.perDomain
        ? [...perHost].filter(([, count]) => count >= settings.concurrencyPerHost).map(([host]) => host)
        : [];
      const now = clock.now();
      const lease = {
        workerId,
        now: now.toISOString(),
        lockedUntil: new Date(now.getTime() + leaseMs).toISOString(),
      };
      const claimed = await repo.claim({ ...lease, limit: free, excludeHosts: saturated });
      if (claimed.length === 0) return;

      const emails = await repo.loadEmails([...new Set(claimed.map((row) => row.emailId))]);
      const several = [...emails.values()]
        .filter((email) => email.recipientCount > 1)
        .map((email) => email.id);
      const all = [...claimed, ...(await repo.claimSiblings({ ...lease, emailIds: several }))];

      // Recipients of one email (and one domain, when domains are destinations) share a transaction; jobs
      // go out in queue order, as many as there are free slots and per-host room; the rest are given back.
      const jobs = new Map<string, Job>();
      for (const row of all) {
        const email = emails.get(row.emailId);
        if (!email) continue; // deleted with its project meanwhile (its recipients went with it)
        const key = transport.perDomain ? `${row.emailId} ${row.host}` : row.emailId;
        const job = jobs.get(key) ?? { email, host: row.host, recipients: [] };
        job.recipients.push(row);
        jobs.set(key, job);
      }
      const kept: Job[] = [];
      const excess: string[] = [];
      const hostCounts = new Map(perHost);
      for (const job of jobs.values()) {
        const count = hostCounts.get(job.host) ?? 0;
        const roomy = !transport.perDomain || count < settings.concurrencyPerHost;
        if (kept.length < free && roomy) {
          kept.push(job);
          if (transport.perDomain) hostCounts.set(job.host, count + 1);
        } else {
          excess.push(...job.recipients.map((row) => row.id));
        }
      }
      if (excess.length > 0) await repo.release(workerId, excess);
      for (const job of kept) dispatch(job);
      if (claimed.length < free || kept.length === 0) return;
    }
  }

  function dispatch(job: Job): void {
    if (transport.perDomain) perHost.set(job.host, (perHost.get(job.host) ?? 0) + 1);
    const done: Promise<void> = attempt(job)
      .catch((error: unknown) => {
        // The lease runs out and another claim retries it: at least once, never lost.
        logger.error({ err: error, email: job.email.id }, 'sending worker: recording an attempt failed');
      })
      .finally(() => {
        inFlight.delete(done);
        if (transport.perDomain) {
          const left = (perHost.get(job.host) ?? 1) - 1;
          if (left > 0) perHost.set(job.host, left);
          else perHost.delete(job.host);
        }
        loop.wake();
      });
    inFlight.add(done);
  }

  async function attempt(job: Job): Promise<void> {
    const attemptedAt = clock.now();
    const timeout = AbortSignal.timeout(settings.timeoutMs);
    const signal = AbortSignal.any([abort.signal, timeout]);
    let result: SendResult;
    try {
      result = await transport.send({
        email: job.email,
        host: job.host,
        recipients: job.recipients.map((row) => ({ address: row.address, attempts: row.attempts })),
        signal,
      });
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
    if (abort.signal.aborted) return;
    if (timeout.aborted) {
      result.outcomes = result.outcomes.map((outcome) =>
        outcome.result === 'deferred' && outcome.response === null
          ? { ...outcome, error: `timed out after ${settings.timeoutMs} ms` }
          : outcome,
      );
    }

    const now = clock.now();
    const updates = job.recipients.map((row) => {
      const outcome =
        result.outcomes.find((entry) => entry.address.toLowerCase() === row.address.toLowerCase()) ??
        ({
          address: row.address,
          result: 'deferred',
          response: null,
          error: 'no result for this recipient',
        } as const);
      return judge(job.email, row, outcome, now);
    });
    const events = await record({
      workerId,
      emailId: job.email.id,
      projectId: job.email.projectId,
      recipientCount: job.email.recipientCount,
      attemptedAt: attemptedAt.toISOString(),
      now: now.toISOString(),
      updates,
      raw: result.raw,
    });
    // A retry of our own comes due later: read the earliest waiting time again rather than sleep past it.
    if (updates.some((update) => update.retryAt !== undefined)) nextWaiting.readAt = -Infinity;
    if (events.length < updates.reduce((sum, update) => sum + update.events.length, 0)) {
      logger.warn(
        { email: job.email.id, worker: workerId },
        'sending worker: a lease ran out before the attempt was recorded; another worker owns the recipient',
      );
    }
    await emit(events);
  }

  /** The data every event of the email carries, plus what this one adds. */
  function eventData(email: EmailRecord, recipient: string, extra: Record<string, unknown>) {
    return {
      email_id: email.id,
      from: email.from,
      to: email.to,
      subject: email.subject,
      ...(email.templateId !== null
        ? { template_id: email.templateId, template_version: email.templateVersion }
        : {}),
      tags: email.tags,
      recipient,
      ...extra,
    };
  }

  /** What an attempt's outcome means for the recipient: its next status and the events that say so. */
  function judge(
    email: EmailRecord,
    row: ClaimedRecipient,
    outcome: RecipientOutcome,
    now: Date,
  ): RecipientUpdate {
    const reply = outcome.response;
    const said = {
      ...(reply !== null ? { smtp_response: reply } : {}),
      ...('error' in outcome && outcome.error !== null ? { error: outcome.error } : {}),
    };
    const data = eventData(email, row.address, said);
    const base = {
      id: row.id,
      response: reply ?? ('error' in outcome ? outcome.error : null),
      responseCode: responseCode(reply),
    };
    const events = (...types: EventKind[]) => types.map((type) => ({ type, data }));

    if (outcome.result === 'accepted') {
      const types: EventKind[] = ['email.sent'];
      if (transport.finalHop) types.push('email.delivered');
      if (outcome.complained) types.push('email.complained');
      const status = outcome.complained ? 'complained' : transport.finalHop ? 'delivered' : 'sent';
      return { ...base, status, events: events(...types) };
    }
    if (outcome.result === 'bounced') return { ...base, status: 'bounced', events: events('email.bounced') };

    const delay = nextRetryDelay({
      attemptsMade: row.attempts + 1,
      schedule: settings.schedule,
      jitter,
      random,
    });
    if (delay === undefined) return { ...base, status: 'failed', events: events('email.failed') };
    return {
      ...base,
      status: 'delayed',
      retryAt: new Date(now.getTime() + delay).toISOString(),
      // Said once when a recipient starts waiting, not again on every retry.
      events: row.status === 'delayed' ? [] : events('email.delivery_delayed'),
    };
  }

  /** Emits written events in order through the event service and notes their ids. */
  async function emit(rows: StoredEmailEvent[]): Promise<void> {
    const emitted: Array<{ id: string; eventId: string }> = [];
    try {
      for (const row of rows) {
        const data = JSON.parse(row.data) as Record<string, unknown>;
        const event = await deps.events.emit(row.project_id, row.type as EventKind, data);
        emitted.push({ id: row.id, eventId: event.id });
      }
    } catch (error) {
      // Left without an event id: the sweep emits it later.
      logger.error({ err: error }, 'sending worker: emitting an event failed');
    }
    await Promise.all(emitted.map((pair) => noteEmitted(pair)));
  }

  /** Emits events that were written but never emitted (their worker died in between). */
  async function sweep(): Promise<void> {
    const now = clock.now().getTime();
    if (now - lastSweep < SWEEP_INTERVAL_MS) return;
    lastSweep = now;
    const stale = await repo.unemittedEvents(new Date(now - emitRetryAfterMs).toISOString(), 100);
    await emit(stale);
    if (now - lastPrune >= 3_600_000) {
      lastPrune = now;
      // Daily counts are read for today only; two days back covers clocks that disagree about midnight.
      await repo.pruneQuota(new Date(now - 2 * 86_400_000).toISOString().slice(0, 10));
    }
  }

  return {
    id: workerId,

    async start() {
      if (running) return;
      running = true;
      if (abort.signal.aborted) abort = new AbortController();
      unsubscribe = deps.notifier?.subscribe(loop.wake);
      await loop.start();
      logger.info({ transport: transport.kind }, `Sending email ${transport.description}`);
    },

    async stop() {
      if (!running) return;
      running = false;
      unsubscribe?.();
      await loop.stop();

      const settled = Promise.allSettled([...inFlight]);
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), stopGraceMs);
      });
      if ((await Promise.race([settled, grace])) === 'late') {
        abort.abort();
        await Promise.race([settled, new Promise((resolve) => setTimeout(resolve, 1000))]);
      }
      clearTimeout(timer);
      await repo.release(workerId).catch((error: unknown) => {
        logger.error({ err: error }, 'sending worker: could not give back its leases; they expire');
      });
      await transport.close();
    },
  };
}
