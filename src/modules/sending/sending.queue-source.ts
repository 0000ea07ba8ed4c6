import type { Kysely } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import type { Database } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { writesInWith } from '../../db/engine/sql.ts';
import type { Lease } from '../../queue/lease.ts';
import type { ClaimRequest, QueueSource, RecordResult } from '../../queue/runtime.ts';
import type { LoadedEmail } from '../emails/email-rows.ts';
import { createRecipientOutcomes } from '../emails/recipients.ts';
import type { TrackingRepo } from '../emails/tracking.repo.ts';
import type { SuppressionRepo } from '../suppressions/suppressions.repo.ts';
import type { EventService } from '../events/events.service.ts';
import type { AliveWorkers, DestinationSync } from '../destinations/destinations.sync.ts';
import type { DestinationEvents } from '../destinations/destination-events.ts';
import type { ClaimedRecipient } from './sending.claims.ts';
import {
  type ClaimAlong,
  createSendingQueue,
  type LookOptions,
  type SendJob,
  type SendOutcome,
} from './sending.queue.ts';

// The sending queue as the queue runtime sees it (src/queue/runtime.ts): the claims' rows grouped into SMTP
// transactions, and the outcomes recorded with their events. The statements themselves are sending.queue.ts's.

// Waiting recipients moved into the queue per claim; the next claim moves more.
const PROMOTE_BATCH = 500;
// The most recipient domains a paced destination's own part of a look reads (each one a probe of an index):
// its rows of other domains are claimed with the rest, and the runtime gives back what it cannot hold.
const LIMITED_LANE_HOSTS = 16;
// How often the daily counts older than two days are forgotten.
const PRUNE_INTERVAL_MS = 3_600_000;

export interface SendingQueueSourceDeps {
  db: Kysely<Database>;
  engine: Engine;
  /** The event service; the events are emitted in the transaction that records the attempts. */
  events: Pick<EventService, 'emitIn' | 'emitWith' | 'beforeEmitting'>;
  /** The process's repositories (createRepositories): what each email asked to track, and the suppressions outcomes add. */
  repositories: { tracking: Pick<TrackingRepo, 'settingsFor'>; suppressions: Pick<SuppressionRepo, 'add'> };
  /** When the suppressions an outcome makes are made. */
  now: () => string;
  /** Each recipient domain is its own lane (direct delivery); else one lane (a relay). */
  perDomain: boolean;
  /** Each recipient in an SMTP transaction of its own (per-recipient return paths). */
  recipientPerJob: boolean;
  /** How long the earliest waiting time, once read, is trusted (the worker's poll interval). */
  pollIntervalMs: number;
  /** Direct delivery: lanes are destinations (issue 38), suspended ones left out of the claims. */
  destinations?: DestinationSync | undefined;
  /** Direct delivery: the destinations' suspensions that ended are announced before a look. */
  destinationEvents?: DestinationEvents | undefined;
  /** Direct delivery: the sending workers alive, who share each destination's limits. */
  aliveWorkers?: AliveWorkers | undefined;
}

/**
 * The email_recipients table as the runtime's queue: promoted and claimed (fairly), grouped into SMTP
 * transactions (recipients of one email, and one domain when domains are lanes), given back and recorded with
 * their events. Its own function so the runtime's tests (test/queue.test.ts) hold the runtime to this SQL.
 */
export function createSendingQueueSource(deps: SendingQueueSourceDeps): QueueSource<SendJob, SendOutcome> {
  const { db, engine, perDomain, destinations } = deps;
  const filter = destinations && { sources: destinations.shaping.sources };
  const queue = createSendingQueue(db, engine, filter);
  const laneOf = (host: string) => (destinations ? destinations.shaping.laneOf(host) : host);
  const recipientOutcomes = createRecipientOutcomes({
    events: deps.events,
    suppressions: deps.repositories.suppressions,
  });
  let lastPrune = -Infinity;
  // Direct delivery: the rows without a `paced_host` are given one before the first look (markPaced).
  let pacedHostsMarked = false;
  // When the earliest waiting recipient becomes due, as last read, and when it was read: read again once
  // that time has come, a retry was recorded, or a poll interval has passed, not on every claim.
  let nextWaiting: { at: string | undefined; readAt: number } = { at: undefined, readAt: -Infinity };

  async function waitingAt(now: number): Promise<string | undefined> {
    const stale = now - nextWaiting.readAt >= deps.pollIntervalMs;
    const due = nextWaiting.at !== undefined && Date.parse(nextWaiting.at) <= now;
    if (stale || due) nextWaiting = { at: await queue.nextWaitingAt(), readAt: now };
    return nextWaiting.at;
  }

  /** Before a look: the waiting rows now due moved into the queue, and now and then old daily counts dropped. */
  async function beforeLook(lease: Lease): Promise<void> {
    if (perDomain && !pacedHostsMarked) {
      await queue.markPaced();
      pacedHostsMarked = true;
    }
    if (destinations) {
      await destinations.sync(lease.now.getTime(), deps.aliveWorkers);
      await deps.destinationEvents?.resumed(lease.now.getTime(), destinations.shaping);
    }
    const now = lease.now.toISOString();
    const waiting = await waitingAt(lease.now.getTime());
    if (waiting !== undefined && waiting <= now) {
      await queue.promoteDue(now, PROMOTE_BATCH);
      nextWaiting.readAt = -Infinity;
    }
    if (lease.now.getTime() - lastPrune >= PRUNE_INTERVAL_MS) {
      lastPrune = lease.now.getTime();
      // Daily counts are read for today only; two days back covers clocks that disagree about midnight.
      await queue.pruneQuota(new Date(lastPrune - 2 * 86_400_000).toISOString().slice(0, 10));
    }
  }

  /** The claimed recipients as SMTP transactions, with the other due recipients of their emails. */
  async function jobsOf(
    lease: Lease,
    { recipients: claimed, emails }: { recipients: ClaimedRecipient[]; emails: Map<string, LoadedEmail> },
  ): Promise<SendJob[]> {
    if (claimed.length === 0) return [];
    const tracking = await deps.repositories.tracking.settingsFor(
      [...emails.values()].filter((email) => email.tracked).map((email) => email.id),
    );
    const several = [...emails.values()].filter((email) => email.recipientCount > 1).map((email) => email.id);
    // Recipients of one email (and one domain, when domains are destinations) share a transaction; jobs
    // come in queue order.
    const jobs = new Map<string, SendJob>();
    for (const row of [...claimed, ...(await queue.claimSiblings(lease, several))]) {
      const email = emails.get(row.emailId);
      if (!email) continue; // deleted with its project meanwhile (its recipients went with it)
      // A domain another worker mapped (the claim read its destination): that destination's lane already.
      if (destinations && row.destination !== null)
        destinations.shaping.adopt(row.host, row.destination, lease.now.getTime());
      const lane = perDomain ? laneOf(row.host) : '';
      // A return path or tracking URLs of its own per recipient mean an SMTP transaction of its own.
      const settings = tracking.get(row.emailId);
      const key = deps.recipientPerJob || settings ? row.id : `${row.emailId} ${perDomain ? row.host : ''}`;
      const job = jobs.get(key) ?? {
        lane,
        rows: [],
        email,
        host: row.host,
        recipients: [],
        tracking: settings,
      };
      job.recipients.push(row);
      (job.rows as string[]).push(row.id);
      jobs.set(key, job);
    }
    return [...jobs.values()];
  }

  /**
   * Records the outcomes in one transaction: in one statement when it can (PostgreSQL, every lease held, no
   * suppression or webhook: the common case), with the look `claim` in it when given; else in as many as it
   * takes to sort out which leases held. Per outcome and update, whether its lease held; and the rows the
   * look claimed (undefined: it made none).
   */
  async function recordIn(outcomes: SendOutcome[], claim: ClaimAlong | undefined) {
    // Outside the transaction, where concurrent reads share it (the API's): the webhooks' stamp its events read.
    await deps.events.beforeEmitting();
    return inTransaction(db, async (transaction) => {
      const recording = createSendingQueue(transaction.db, engine, filter);
      const along = claim && recording.recordingWithClaim(claim);
      const writer = along?.writer ?? recording;
      const now = deps.now();
      const held = (await recipientOutcomes.recordAttemptsAtOnce(transaction, writer, outcomes, now))
        ? outcomes.map((outcome) => outcome.updates.map(() => true))
        : await recipientOutcomes.recordAttempts(transaction, recording, outcomes, now);
      return { held, claimed: along?.claimed() };
    });
  }

  /** What the runtime learns of recorded outcomes (contract.ts RecordResult). */
  function resultsOf(outcomes: SendOutcome[], held: boolean[][]): RecordResult[] {
    return outcomes.map((outcome, index) => {
      let retryAt: number | undefined;
      outcome.updates.forEach((update, position) => {
        if (held[index]![position] && update.retryAt !== undefined)
          retryAt = Math.min(retryAt ?? Infinity, Date.parse(update.retryAt));
      });
      // A retry of our own comes due later: read the earliest waiting time again rather than sleep past it.
      if (retryAt !== undefined) nextWaiting.readAt = -Infinity;
      return { held: held[index]!.includes(true), retryAt };
    });
  }

  // Lanes are destinations with direct delivery: a lane left out is the recipient domains known to be its.
  const hostsOf = (lane: string) => (destinations ? destinations.shaping.hostsOf(lane) : [lane]);
  const lookOf = (request: ClaimRequest): LookOptions => {
    if (!perDomain) return { limit: request.limit, excludeHosts: [] };
    // A lane's hosts are those still its own: a domain that was its own lane until its destination was
    // learned is that destination's now, and left out with it when that lane is full (its jobs, claimed
    // for the old lane, would go to the full one and back for ever).
    const lanes = (request.laneLimits ?? [])
      .map(({ lane, limit }) => ({
        hosts: hostsOf(lane)
          .filter((host) => laneOf(host) === lane)
          .slice(-LIMITED_LANE_HOSTS),
        limit,
      }))
      .filter((lane) => lane.hosts.length > 0);
    const limited = new Set(lanes.flatMap((lane) => lane.hosts));
    const excludeHosts = [...new Set(request.excludeLanes.flatMap(hostsOf))].filter((h) => !limited.has(h));
    return { limit: request.limit, excludeHosts, lanes };
  };

  return {
    // Direct delivery: each lane's hosts have a part of the look of their own (sending.claims.ts).
    limitsLanes: perDomain,
    async claim(lease, request) {
      await beforeLook(lease);
      return jobsOf(lease, await queue.claimWithEmails(lease, lookOf(request)));
    },
    release: (releasing, rows) => queue.release(releasing, rows),
    async nextDueAt(now) {
      const next = await waitingAt(now.getTime());
      return next === undefined ? undefined : Date.parse(next);
    },
    async record(attempted) {
      const outcomes = attempted.map(({ outcome }) => outcome);
      return resultsOf(outcomes, (await recordIn(outcomes, undefined)).held);
    },
    /** PostgreSQL: the look in the outcomes' statement (sending.queue.ts recordAllText). */
    ...(writesInWith(engine) && {
      async recordAndClaim(attempted, lease, next) {
        await beforeLook(lease);
        const outcomes = attempted.map(({ outcome }) => outcome);
        const claim = { lease, ...lookOf(next) };
        const { held, claimed } = await recordIn(outcomes, claim);
        const results = resultsOf(outcomes, held);
        // Not in the statement (an outcome that suppresses, goes to a webhook, or sums up its email's status
        // from several recipients): claimed on its own, as the round whose look this is would have.
        const found = claimed ? await queue.claimedIn(claimed) : await queue.claimWithEmails(lease, claim);
        return { results, claimed: await jobsOf(lease, found) };
      },
    }),
  };
}
