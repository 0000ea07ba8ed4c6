import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inTransaction, type Transaction } from '../../db/transaction.ts';
import { createBatcher } from '../../queue/batcher.ts';
import type { Clock } from '../../lib/clock.ts';
import { emailEventData } from '../emails/event-data.ts';
import { createRecipientOutcomes } from '../emails/recipients.ts';
import type { EventService, NewEvent } from '../events/events.service.ts';
import type { Increment, Metric, StatsRepo } from '../stats/stats.repo.ts';
import type { SuppressionRepo } from '../suppressions/suppressions.repo.ts';
import { isAutomated } from './automation.ts';
import type { TrackingRepo } from '../emails/tracking.repo.ts';
import type { EngagementRepo, EngagementTarget } from './engagement.repo.ts';
import { type EngagementTokens, unsubscribeAddressRecipient } from './tokens.ts';

/** Unsubscribes a broadcast copy's contact: prepared outside the transaction, applied in it. */
export type AudienceUnsubscribe = (target: {
  projectId: string;
  broadcastId: string;
  contactId: string;
}) => Promise<((transaction: Transaction) => Promise<void>) | undefined>;

/** What the public routes know about a fetch. */
export interface FetchMeta {
  userAgent: string | undefined;
  purpose: string | undefined;
}

const MAX_USER_AGENT = 512;

/** An open or a click to record. */
interface Fetch {
  what: 'open' | 'click';
  target: EngagementTarget;
  /** For a click: the stored URL it was sent to. */
  url?: string;
  automated: boolean;
  at: string;
  userAgent: string | null;
}

/**
 * The public side of engagement: what a recipient's mail client does with the tracking and unsubscribe URLs.
 * A token is checked before any query (a bad one costs no database work); each open, click or unsubscribe,
 * its counters, its daily numbers and its event commit in one transaction.
 */
export function createEngagementService({
  db,
  repo,
  tracking,
  stats,
  suppressions,
  clock,
  tokens,
  events,
  audience,
  preferenceToken,
}: {
  db: Kysely<Database>;
  repo: EngagementRepo;
  /** Where a click's stored URL is read (the emails module's table). */
  tracking: Pick<TrackingRepo, 'link'>;
  /** The daily numbers opens and clicks add to. */
  stats: Pick<StatsRepo, 'addCounts'>;
  /** The suppression list an unsubscribe adds to. */
  suppressions: Pick<SuppressionRepo, 'add'>;
  clock: Clock;
  tokens: EngagementTokens;
  events: Pick<EventService, 'emitIn'>;
  /**
   * A broadcast copy's unsubscribe (the broadcasts module): made ready before the transaction, then run in it,
   * it unsubscribes the contact from the broadcast's topic or from every broadcast, with its contact event.
   */
  audience?: AudienceUnsubscribe | undefined;
  /** A contact's preference page token (PUBLIC_URL), for the unsubscribe page of a broadcast's copy. */
  preferenceToken?: ((contactId: string) => string) | undefined;
}) {
  const recipientOutcomes = createRecipientOutcomes({ events, suppressions });

  const userAgentOf = (meta: FetchMeta) =>
    meta.userAgent === undefined ? null : meta.userAgent.slice(0, MAX_USER_AGENT);

  async function targetOf(kind: 'open' | 'click' | 'unsubscribe', token: string) {
    const ref = tokens.read(kind, token);
    if (!ref) return undefined;
    const target = await repo.target(ref.recipientId);
    return target ? { target, index: ref.index } : undefined;
  }

  const eventData = (target: EngagementTarget, extra: Record<string, unknown>) =>
    emailEventData(target.email, target.address, extra);

  /** Counts opens and clicks, their daily numbers and their events, in the caller's transaction. */
  async function writeFetches(transaction: Transaction, fetches: readonly Fetch[]): Promise<void> {
    const increments: Increment[] = [];
    const emitted: NewEvent[] = [];
    // One after the other: two fetches of one recipient in a batch each see the other's count.
    for (const fetch of fetches) {
      const { target, automated, at } = fetch;
      const counts =
        fetch.what === 'open'
          ? await repo.countOpen(target, automated, at, transaction)
          : await repo.countClick(target, automated, at, transaction);
      const unique = automated ? counts.automated === 1 : counts.human === 1;
      if (unique) {
        const metric: Metric =
          fetch.what === 'open'
            ? automated
              ? 'unique_opens_automated'
              : 'unique_opens'
            : automated
              ? 'unique_clicks_automated'
              : 'unique_clicks';
        increments.push({
          projectId: target.projectId,
          day: at.slice(0, 10),
          tags: target.email.tags,
          metric,
        });
      }
      emitted.push({
        projectId: target.projectId,
        kind: fetch.what === 'open' ? 'email.opened' : 'email.clicked',
        emailId: target.emailId,
        data: eventData(
          target,
          fetch.what === 'open'
            ? { open: { first: counts.total === 1, user_agent: fetch.userAgent, automated } }
            : { click: { url: fetch.url, user_agent: fetch.userAgent, automated } },
        ),
      });
    }
    await stats.addCounts(increments, transaction);
    await events.emitIn(transaction, emitted);
  }

  // Group commit: the opens and clicks that arrive while one transaction commits share the next, so a burst
  // of fetches costs one commit, one event insert and one webhook lookup per batch rather than per fetch.
  // Each request still answers only once its own fetch is committed.
  const recorder = createBatcher<Fetch & { done(error?: unknown): void }>({
    maxBatch: 200,
    async write(batch) {
      try {
        await inTransaction(db, (transaction) => writeFetches(transaction, batch));
        for (const fetch of batch) fetch.done();
      } catch (error) {
        if (batch.length === 1) return batch[0]!.done(error);
        // One bad fetch (its email deleted meanwhile) must not sink the others: each alone, then.
        for (const fetch of batch) {
          try {
            await inTransaction(db, (transaction) => writeFetches(transaction, [fetch]));
            fetch.done();
          } catch (single) {
            fetch.done(single);
          }
        }
      }
    },
  });
  const record = (fetch: Fetch) =>
    new Promise<void>((resolve, reject) =>
      recorder.add({ ...fetch, done: (error) => (error === undefined ? resolve() : reject(error)) }),
    );

  return {
    /** Resolves once every open and click handed in so far is written (the app waits for it on close). */
    drain: (): Promise<void> => recorder.drain(),

    /** Records an open; false when the token names nobody (the route answers 404). */
    async open(token: string, meta: FetchMeta): Promise<boolean> {
      const found = await targetOf('open', token);
      if (!found) return false;
      const now = clock.now();
      await record({
        what: 'open',
        target: found.target,
        automated: isAutomated({ ...meta, at: now, deliveredAt: found.target.completedAt }),
        at: now.toISOString(),
        userAgent: userAgentOf(meta),
      });
      return true;
    },

    /** The stored URL a click token names (recording the click), or undefined: never a URL not stored. */
    async click(token: string, meta: FetchMeta, recordIt = true): Promise<string | undefined> {
      const found = await targetOf('click', token);
      if (!found) return undefined;
      const { target, index } = found;
      const url = await tracking.link(target.emailId, index);
      if (url === undefined || !recordIt) return url;
      const now = clock.now();
      await record({
        what: 'click',
        target,
        url,
        automated: isAutomated({ ...meta, at: now, deliveredAt: target.completedAt }),
        at: now.toISOString(),
        userAgent: userAgentOf(meta),
      });
      return url;
    },

    /** Whether a token names a recipient (HEAD, the unsubscribe page): nothing is recorded. */
    async known(kind: 'open' | 'unsubscribe', token: string): Promise<boolean> {
      return (await targetOf(kind, token)) !== undefined;
    },

    /**
     * What the unsubscribe page shows for a token: undefined when it names nobody; for a broadcast's copy, the
     * contact's preference page token (its other topics are chosen there).
     */
    async unsubscribePage(token: string): Promise<{ preferences: string | undefined } | undefined> {
      const found = await targetOf('unsubscribe', token);
      if (!found) return undefined;
      const { broadcastId, contactId } = found.target;
      const fromBroadcast = broadcastId !== null && contactId !== null;
      return { preferences: fromBroadcast ? preferenceToken?.(contactId) : undefined };
    },

    /** The one-click POST (RFC 8058); false when the token names nobody. */
    unsubscribe: (token: string): Promise<boolean> => unsubscribeToken(token, 'one_click'),

    /**
     * The `mailto:` of List-Unsubscribe: a mail to `unsubscribe+<token>@BOUNCE_DOMAIN` unsubscribes like the
     * one-click POST. For the inbound SMTP listener to call; false when the address names nobody.
     */
    async unsubscribeByMail(recipientAddress: string, bounceDomain: string): Promise<boolean> {
      const match = /^unsubscribe\+([0-9a-z]+)@/i.exec(recipientAddress);
      if (!match || !unsubscribeAddressRecipient(tokens, recipientAddress, bounceDomain)) return false;
      return unsubscribeToken(match[1]!.toLowerCase(), 'mailto');
    },
  };

  /**
   * Puts the recipient's address on its project's suppression list (reason `unsubscribe`) and emits
   * `email.unsubscribed`, once: a repeated request answers the same and changes nothing more.
   */
  async function unsubscribeToken(token: string, method: 'one_click' | 'mailto'): Promise<boolean> {
    const found = await targetOf('unsubscribe', token);
    if (!found) return false;
    const { target } = found;
    const at = clock.now().toISOString();
    // A broadcast's copy: its contact leaves the topic or the broadcasts, and the address stays sendable.
    const { broadcastId, contactId } = target;
    const leave =
      audience && broadcastId !== null && contactId !== null
        ? await audience({ projectId: target.projectId, broadcastId, contactId })
        : undefined;
    await inTransaction(db, async (transaction) => {
      const times = await repo.countUnsubscribe(target, at, transaction);
      if (times !== 1) return;
      if (leave) await leave(transaction);
      await recipientOutcomes.record(
        transaction,
        [
          {
            email: { ...target.email, projectId: target.projectId },
            address: target.address,
            outcomes: ['unsubscribed'],
            data: { unsubscribe: { method } },
            unsuppressed: broadcastId !== null,
            detail: `${method === 'mailto' ? 'mailto' : 'one-click'} unsubscribe from ${target.emailId}`,
          },
        ],
        at,
      );
    });
    return true;
  }
}

export type EngagementService = ReturnType<typeof createEngagementService>;
