import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { newId } from '../../lib/ids.ts';
import { letOthersRun } from '../../lib/byte-chunks.ts';
import { parseAddress } from '../../lib/addresses.ts';
import type { Notifier } from '../../queue/notifier.ts';
import type { ContactPropertyRecord, ContactPropertyRepo } from '../contacts/contact-properties.repo.ts';
import { resolveFilter } from '../contacts/contact-filter.ts';
import type { ContactRecord } from '../contacts/contacts.repo.ts';
import type { ReputationService } from '../reputation/reputation.service.ts';
import { DomainError } from '../../lib/errors.ts';
import type { DomainService, SenderAuthentication } from '../domains/domains.service.ts';
import type { EmailRepo, NewEmail } from '../emails/emails.repo.ts';
import { trackedLinks } from '../emails/tracked-html.ts';
import type { TrackingRepo } from '../emails/tracking.repo.ts';
import { trackedEmails } from '../emails/tracking.ts';
import type { EventService } from '../events/events.service.ts';
import type { Audience, SegmentRepo } from '../segments/segments.repo.ts';
import { type SuppressionRepo, suppressionKey } from '../suppressions/suppressions.repo.ts';
import type { TemplateRenderer } from '../templates/render.ts';
import type { TemplateRepo } from '../templates/templates.repo.ts';
import type { TopicRepo } from '../topics/topics.repo.ts';
import type { BroadcastRecord, BroadcastRepo, ExclusionRecord, ExclusionReason } from './broadcasts.repo.ts';
import { broadcastContent, personalizedCopies } from './broadcast-copy.ts';
import type { CopyContent } from './personalization.ts';

// A broadcast's fan-out, a batch at a time: the next contacts of its segment after its cursor (keyset, never
// the whole segment), each excluded with its reason or given its own personalized copy, and the copies, the
// exclusions and the cursor moved past them written in one short transaction. Nothing is held across batches:
// a crash loses at most the batch in flight, which the next attempt makes again from the cursor (the copies'
// unique (broadcast, contact) index refuses a second copy whatever happens). The next batch is made (read and
// rendered) while one is written, never written before it.

export const FAN_OUT_BATCH = 500;

export interface FanOutDeps {
  db: Kysely<Database>;
  repo: BroadcastRepo;
  segments: Pick<SegmentRepo, 'membersAfter' | 'find'>;
  topics: Pick<TopicRepo, 'find' | 'choicesFor'>;
  suppressions: Pick<SuppressionRepo, 'matchingIn'>;
  properties: Pick<ContactPropertyRepo, 'all'>;
  templates: Pick<TemplateRepo, 'find' | 'findVersion'>;
  renderer: Pick<TemplateRenderer, 'renderMany'>;
  emails: Pick<EmailRepo, 'insert'>;
  tracking: Pick<TrackingRepo, 'insertSettings'>;
  senders?: Pick<DomainService, 'authorizeSender' | 'authorizeKeyDomain'> | undefined;
  events: Pick<EventService, 'emitIn'>;
  clock: Clock;
  /** Wakes this process's sending worker once copies are committed. */
  sendNotifier: Notifier;
  batchSize?: number | undefined;
  /** A contact's preference page URL (PUBLIC_URL), for `{{ preferences_url }}` / `{{{PREFERENCES_URL}}}`. */
  preferenceUrl?: ((contactId: string) => string) | undefined;
  /** The reputation breaker: while the project or the From domain is paused, the fan-out holds. */
  reputation?: Pick<ReputationService, 'assertSendingAllowed'> | undefined;
}

/** What one attempt works with, read once: the broadcast's content, sender and the project's properties. */
interface Prepared {
  broadcast: BroadcastRecord;
  content: CopyContent;
  templateVersion: number | null;
  authentication: SenderAuthentication | undefined;
  fromDomain: string;
  declared: ContactPropertyRecord[];
  topicDefault: 'opt_in' | 'opt_out' | null;
  /** Who the segment's members are: its list, or its filter resolved once for the whole fan-out. */
  audience: Audience;
  /**
   * Whether the content names the preference link (`preferences_url`, `PREFERENCES_URL`): each copy's is
   * signed only then (an HMAC per copy otherwise spent on a link no copy shows).
   */
  usesPreferences: boolean;
  /** Its copies and exclusions so far, this attempt's written batches counted (for broadcast.sent). */
  totals: { copies: number; excluded: number };
}

/**
 * A batch read and not yet written: its copies (being rendered on the render pool) and exclusions, and the
 * cursor before and after it.
 */
interface Batch {
  previous: string | null;
  next: string | null;
  done: boolean;
  copies: Promise<NewEmail[]>;
  excluded: ExclusionRecord[];
  now: string;
}

/** The event a finished broadcast emits. */
export const broadcastSentData = (
  broadcast: BroadcastRecord,
  copies: number,
  excluded: number,
  at: string,
) => ({
  id: broadcast.id,
  name: broadcast.name,
  segment_id: broadcast.segmentId,
  topic_id: broadcast.topicId,
  copies,
  excluded,
  sent_at: at,
});

export function createFanOut(deps: FanOutDeps) {
  const { repo, clock } = deps;
  const batchSize = deps.batchSize ?? FAN_OUT_BATCH;

  async function pausedFor(projectId: string, fromDomain: string): Promise<boolean> {
    try {
      await deps.reputation?.assertSendingAllowed(projectId, fromDomain, 'broadcast');
      return false;
    } catch (error) {
      if (error instanceof DomainError) return true;
      throw error;
    }
  }

  async function prepare(broadcast: BroadcastRecord): Promise<Prepared> {
    const from = parseAddress(broadcast.from ?? '');
    if (!from.ok) throw new Error(`broadcast ${broadcast.id} has no valid From`);
    const fromDomain = from.value.domain;
    if (broadcast.keyDomainId !== null && deps.senders) {
      await deps.senders.authorizeKeyDomain(broadcast.projectId, broadcast.keyDomainId, fromDomain, 'from');
    }
    const authentication =
      deps.senders && (await deps.senders.authorizeSender(broadcast.projectId, fromDomain, 'from'));
    const made = await broadcastContent(deps.templates, broadcast);
    if (!made) throw new Error(`broadcast ${broadcast.id}: its template has no published version`);
    const { content, templateVersion } = made;
    const topic =
      broadcast.topicId === null ? undefined : await deps.topics.find(broadcast.projectId, broadcast.topicId);
    const declared = await deps.properties.all(broadcast.projectId);
    const segmentId = broadcast.segmentId ?? '';
    // A segment deleted since has no members; a filter's "last N days" count from the fan-out's start, the
    // same for every batch.
    const segment = await deps.segments.find(broadcast.projectId, segmentId);
    const filter =
      segment?.filter &&
      (await resolveFilter(
        segment.filter,
        declared,
        async (id) => (await deps.topics.find(broadcast.projectId, id))?.defaultSubscription,
        new Date(broadcast.startedAt ?? clock.now().toISOString()),
      ));
    return {
      broadcast,
      content,
      templateVersion,
      authentication,
      fromDomain,
      declared,
      audience: { projectId: broadcast.projectId, segmentId, filter: filter ?? null },
      // A topic deleted since: nobody is opted in any more.
      topicDefault: broadcast.topicId === null ? null : (topic?.defaultSubscription ?? 'opt_out'),
      totals: { copies: broadcast.copies, excluded: broadcast.excluded },
      usesPreferences: /preferences_url/i.test([content.subject, content.html, content.text].join('\n')),
    };
  }

  /** The contacts of a batch a broadcast goes to, and the others with why not. */
  async function sortOut(prepared: Prepared, members: ContactRecord[], now: string) {
    const { broadcast } = prepared;
    const choices =
      broadcast.topicId === null
        ? new Map<string, string>()
        : await deps.topics.choicesFor(
            broadcast.topicId,
            members.map((contact) => contact.id),
          );
    const suppressed = await deps.suppressions.matchingIn(
      [broadcast.projectId],
      members.map((contact) => contact.email),
    );
    const eligible: ContactRecord[] = [];
    const excluded: ExclusionRecord[] = [];
    for (const contact of members) {
      let reason: ExclusionReason | undefined;
      if (contact.unsubscribed) reason = 'unsubscribed';
      else if (
        prepared.topicDefault !== null &&
        (choices.get(contact.id) ?? prepared.topicDefault) === 'opt_out'
      ) {
        reason = 'topic_opt_out';
      } else if (suppressed.has(suppressionKey(broadcast.projectId, contact.email))) reason = 'suppressed';
      if (reason) excluded.push({ contactId: contact.id, email: contact.email, reason, createdAt: now });
      else eligible.push(contact);
    }
    return { eligible, excluded };
  }

  /** Each eligible contact's copy, personalized. */
  async function copiesOf(prepared: Prepared, contacts: ContactRecord[], now: string): Promise<NewEmail[]> {
    const { broadcast } = prepared;
    const preferenceUrls = contacts.map((contact) =>
      prepared.usesPreferences ? (deps.preferenceUrl?.(contact.id) ?? '') : '',
    );
    const made = await personalizedCopies(
      deps.renderer,
      broadcast,
      prepared.content,
      contacts,
      prepared.declared,
      preferenceUrls,
    );
    return contacts.map((contact, index) => {
      const copy = made[index]!;
      const html = copy.html;
      const id = newId('msg');
      return {
        id,
        projectId: broadcast.projectId,
        from: broadcast.from!,
        to: [contact.email],
        cc: [],
        bcc: [],
        replyTo: broadcast.replyTo,
        subject: copy.subject,
        html,
        text: copy.text,
        headers: {},
        tags: {},
        attachments: [],
        templateId: broadcast.templateId,
        templateVersion: prepared.templateVersion,
        messageId: `<${id}@${prepared.fromDomain}>`,
        source: 'api',
        smtpUsername: null,
        dkimDomain: prepared.authentication?.dkimDomain ?? null,
        returnPathDomain: prepared.authentication?.returnPathDomain ?? null,
        scheduledAt: null,
        createdAt: now,
        broadcastId: broadcast.id,
        contactId: contact.id,
        recipients: [
          {
            id: newId('rcpt'),
            position: 0,
            type: 'to',
            address: contact.email,
            host: contact.email.split('@')[1]!,
          },
        ],
        // Every copy carries its own one-click unsubscribe (and, when asked, opens and clicks).
        tracking: {
          opens: broadcast.trackOpens,
          clicks: broadcast.trackClicks,
          unsubscribe: true,
          // The preference link goes straight to its page: a click through the tracker would count it.
          links:
            broadcast.trackClicks && html !== null
              ? trackedLinks(html).filter((url) => url !== preferenceUrls[index])
              : [],
        },
      };
    });
  }

  /**
   * The batch after `previous`: its contacts, read and sorted out, their copies being made (rendered on the
   * render pool) when it returns; undefined when the broadcast is no longer sending. Nothing is written.
   */
  async function make(prepared: Prepared, previous: string | null): Promise<Batch | undefined> {
    const current = await repo.findById(prepared.broadcast.id);
    if (!current || current.status !== 'sending') return undefined;
    const now = clock.now().toISOString();
    const members = await deps.segments.membersAfter(prepared.audience, previous, batchSize);
    const { eligible, excluded } = await sortOut(prepared, members, now);
    const copies = copiesOf(prepared, eligible, now);
    // Awaited by the write; a batch dropped unwritten (its write before it failed) never is.
    copies.catch(() => undefined);
    const next = members.at(-1)?.id ?? previous;
    return { previous, next, done: members.length < batchSize, copies, excluded, now };
  }

  /**
   * Writes a batch: its copies, exclusions and the cursor moved past them, in one short transaction. Throws
   * LostBroadcast when this worker no longer holds it (its lease ran out, another worker took it, the cursor
   * moved, it is no longer sending): nothing of the batch is kept.
   */
  async function write(prepared: Prepared, made: Batch, workerId: string): Promise<void> {
    const { excluded, now, done } = made;
    const copies = await made.copies;
    // The batch's copies were made in one stretch of the event loop, after the render's last answer: the
    // requests waiting meanwhile go before the transaction takes the connection, not after it.
    await letOthersRun();
    const current = prepared.broadcast;
    await inTransaction(deps.db, async (transaction) => {
      const moved = await repo.advance(
        current.id,
        {
          workerId,
          previous: made.previous,
          next: made.next,
          copies: copies.length,
          excluded: excluded.length,
          done,
          now,
        },
        transaction,
      );
      if (!moved) throw new LostBroadcast(current.id);
      // Not counted against SEND_DAILY_LIMIT: a refusal half-way through would leave the audience half sent,
      // and a large broadcast would use up the day's sends for the project's transactional mail.
      await deps.emails.insert(copies, { dailyLimit: 0, counted: false }, transaction);
      await deps.tracking.insertSettings(trackedEmails(copies), transaction);
      await repo.insertExclusions(current.id, excluded, transaction);
      if (done) {
        await deps.events.emitIn(transaction, [
          {
            projectId: current.projectId,
            kind: 'broadcast.sent',
            data: broadcastSentData(
              current,
              prepared.totals.copies + copies.length,
              prepared.totals.excluded + excluded.length,
              now,
            ),
          },
        ]);
      }
      if (copies.length > 0) transaction.afterCommit(() => deps.sendNotifier.notify());
    });
    prepared.totals.copies += copies.length;
    prepared.totals.excluded += excluded.length;
  }

  return {
    /**
     * Fans a broadcast this worker holds out, a batch at a time, for about `budgetMs` (on the clock): `done`
     * once it is all sent (or no longer sending); `more` when the time is up (or `signal`, stopping, says so)
     * with more to go, for the caller to give back due at once; `paused` while the reputation breaker holds it.
     */
    async run(
      broadcastId: string,
      workerId: string,
      budgetMs: number,
      signal?: AbortSignal,
    ): Promise<'done' | 'more' | 'paused'> {
      const broadcast = await repo.findById(broadcastId);
      if (!broadcast || broadcast.status !== 'sending') return 'done';
      const prepared = await prepare(broadcast);
      // Paused after it was sent (scheduled, or mid-way): it holds, its cursor kept, until a resume.
      if (await pausedFor(broadcast.projectId, prepared.fromDomain)) return 'paused';
      const until = clock.now().getTime() + budgetMs;
      let next: Promise<Batch | undefined> | undefined = make(prepared, broadcast.cursor);
      for (;;) {
        const made: Batch | undefined = await next;
        if (made === undefined) return 'done';
        // The batch after it is read and rendered (on the render pool's thread) while this one is written:
        // the two overlap instead of the event loop waiting on each render. Its reads go while this batch's
        // copies are still being rendered, before the write takes the connection (SQLite's one connection
        // serves them in turn: behind the write, they and so the render would wait for its commit); its render
        // is then queued behind this batch's and runs while it is written. It starts from this batch's end,
        // which its own write checks is where the cursor is; dropped unwritten when this write fails.
        next =
          made.done || clock.now().getTime() >= until || signal?.aborted
            ? undefined
            : make(prepared, made.next);
        next?.catch(() => undefined);
        await write(prepared, made, workerId);
        if (made.done) return 'done';
        if (next === undefined) return 'more';
      }
    },
  };
}

/** The broadcast is no longer this worker's: the batch's transaction rolls back. */
export class LostBroadcast extends Error {
  constructor(id: string) {
    super(`broadcast ${id} is no longer held by this worker`);
  }
}

export type FanOut = ReturnType<typeof createFanOut>;
