import type { Kysely } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import type { PageRequest } from '../../db/pagination.ts';
import type { Database } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { type Clock, nextUpdatedAt } from '../../lib/clock.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import { notifyOtherProcesses, type Notifier, QUEUE_CHANNELS } from '../../queue/notifier.ts';
import type { EngagementDefaults } from '../../config.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import type { DomainService } from '../domains/domains.service.ts';
import { checkScheduledAt, hasLineBreak, parseList } from '../emails/send-checks.ts';
import { formatAddress } from '../../lib/addresses.ts';
import type { SegmentRepo } from '../segments/segments.repo.ts';
import type { TemplateRepo } from '../templates/templates.repo.ts';
import type { TopicRepo } from '../topics/topics.repo.ts';
import type { ReputationService } from '../reputation/reputation.service.ts';
import type { TopicService } from '../topics/topics.service.ts';
import type { AudienceUnsubscribe } from '../engagement/engagement.service.ts';
import type {
  BroadcastContent,
  BroadcastRecord,
  BroadcastRepo,
  Personalization,
  RecipientFilter,
} from './broadcasts.repo.ts';
import type {
  BroadcastSummaryView,
  BroadcastView,
  CreateBroadcastInput,
  UpdateBroadcastInput,
} from './broadcasts.schemas.ts';

export interface BroadcastServiceDeps {
  db: Kysely<Database>;
  engine: Engine;
  repo: BroadcastRepo;
  segments: Pick<SegmentRepo, 'find'>;
  topics: Pick<TopicRepo, 'find'>;
  templates: Pick<TemplateRepo, 'find'>;
  senders?: Pick<DomainService, 'authorizeSender' | 'authorizeKeyDomain'> | undefined;
  /** A click on a copy's unsubscribe: the contact leaves the broadcasts, or the topic. */
  contacts: Pick<ContactService, 'prepareUpdate' | 'update'>;
  topicChoices: Pick<TopicService, 'choose'>;
  clock: Clock;
  /** Wakes this process's broadcast worker. */
  notifier: Notifier;
  engagement: { publicUrl: string | undefined; defaults: EngagementDefaults };
  /** The reputation breaker: a paused project or From domain sends no broadcast (403 `sending_paused`). */
  reputation?: Pick<ReputationService, 'assertSendingAllowed'> | undefined;
}

/**
 * A draft as it starts, created or duplicated alike: not scheduled, not started, no copies, and no sending key's
 * domain (the key that sends it sets one). One rule, so a new field of the send's progress is reset in both.
 */
const newDraft = (
  now: string,
): Pick<
  BroadcastRecord,
  | 'status'
  | 'scheduledAt'
  | 'startedAt'
  | 'sentAt'
  | 'cursor'
  | 'copies'
  | 'excluded'
  | 'keyDomainId'
  | 'createdAt'
  | 'updatedAt'
> => ({
  status: 'draft',
  scheduledAt: null,
  startedAt: null,
  sentAt: null,
  cursor: null,
  copies: 0,
  excluded: 0,
  keyDomainId: null,
  createdAt: now,
  updatedAt: now,
});

/** What sending asks of the key: its project's, and the one domain it may send from (null: any). */
export interface BroadcastSender {
  domainId: string | null;
}

export const toBroadcastSummary = (record: BroadcastRecord): BroadcastSummaryView => ({
  object: 'broadcast',
  id: record.id,
  name: record.name,
  from: record.from,
  reply_to: record.replyTo,
  subject: record.subject,
  preview_text: record.previewText,
  html: record.html,
  text: record.text,
  template_id: record.templateId,
  segment_id: record.segmentId,
  topic_id: record.topicId,
  tracking: { opens: record.trackOpens, clicks: record.trackClicks },
  status: record.status,
  scheduled_at: record.scheduledAt,
  started_at: record.startedAt,
  sent_at: record.sentAt,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** A contact deleted since its copy was sent has nothing left to unsubscribe: the click still counts. */
async function unlessGone(work: Promise<unknown>): Promise<void> {
  try {
    await work;
  } catch (error) {
    if (!(error instanceof DomainError && error.kind === 'not_found')) throw error;
  }
}

const notDraft = (record: BroadcastRecord, what: string) =>
  conflict(
    'broadcast_not_draft',
    `The broadcast '${record.id}' is ${record.status}: only a draft can be ${what}.`,
  );

/**
 * Broadcasts: a draft, made ready and sent (now or at a time) to a segment's contacts by the fan-out
 * (fan-out.ts, on the broadcast worker). Content and sender are checked when it is sent; each copy is an email.
 */
export function createBroadcastService(deps: BroadcastServiceDeps) {
  const { repo, clock } = deps;

  async function load(projectId: string, id: string, transaction?: Transaction): Promise<BroadcastRecord> {
    const record = isId('bc', id) ? await repo.find(projectId, id, transaction) : undefined;
    if (!record) throw notFound('broadcast', id);
    return record;
  }

  /** The From and Reply-To as stored (checked, formatted). */
  function addresses(input: { from?: string | undefined; reply_to?: string | string[] | undefined }) {
    const from = input.from === undefined ? undefined : formatAddress(parseList(input.from, 'from')[0]!);
    const replyTo =
      input.reply_to === undefined ? undefined : parseList(input.reply_to, 'reply_to').map(formatAddress);
    return { from, replyTo };
  }

  /** The references a draft makes, checked in the project: its segment, topic and template. */
  async function checkRefs(projectId: string, content: BroadcastContent): Promise<void> {
    const references = [
      { id: content.segmentId, prefix: 'seg', kind: 'segment', param: 'segment_id', repo: deps.segments },
      { id: content.topicId, prefix: 'top', kind: 'topic', param: 'topic_id', repo: deps.topics },
      { id: content.templateId, prefix: 'tpl', kind: 'template', param: 'template.id', repo: deps.templates },
    ] as const;
    for (const { id, prefix, kind, param, repo } of references) {
      if (id !== null && !(isId(prefix, id) && (await repo.find(projectId, id)))) {
        throw new DomainError('not_found', 'resource_missing', `No ${kind} with id '${id}'.`, param);
      }
    }
    if (content.subject !== null && hasLineBreak(content.subject)) {
      throw invalidParam('subject', 'The subject contains a line break.');
    }
  }

  /**
   * What sending needs, checked before the transaction that sends: a From the key and the project may send
   * as, a segment, a subject and a body (or a published template), and PUBLIC_URL for each copy's unsubscribe.
   */
  async function checkSendable(record: BroadcastRecord, sender: BroadcastSender): Promise<void> {
    if (deps.engagement.publicUrl === undefined) {
      throw invalidParam(
        'id',
        'Broadcasts need PUBLIC_URL: every copy carries its own one-click unsubscribe link, served there.',
        'public_url_required',
      );
    }
    if (record.from === null) throw invalidParam('from', 'The broadcast has no From.', 'parameter_missing');
    const domain = parseList(record.from, 'from')[0]!.domain;
    if (sender.domainId !== null) {
      if (!deps.senders) throw new Error('a domain-limited key needs the domains service');
      await deps.senders.authorizeKeyDomain(record.projectId, sender.domainId, domain, 'from');
    }
    if (deps.senders) await deps.senders.authorizeSender(record.projectId, domain, 'from');
    await deps.reputation?.assertSendingAllowed(record.projectId, domain, 'broadcast', 'from');
    if (record.segmentId === null)
      throw invalidParam('segment_id', 'The broadcast has no segment.', 'parameter_missing');
    if (record.templateId !== null) {
      const template = await deps.templates.find(record.projectId, record.templateId);
      if (!template || template.publishedVersion === null) {
        throw invalidParam(
          'template.id',
          `Template '${record.templateId}' has no published version; publish it first.`,
          'template_not_published',
        );
      }
    } else {
      if (record.subject === null)
        throw invalidParam('subject', 'The broadcast has no subject.', 'parameter_missing');
      if (record.html === null && record.text === null) {
        throw invalidParam('html', 'The broadcast has no html or text.', 'parameter_missing');
      }
    }
    await checkRefs(record.projectId, record);
  }

  /** Sends (now, or at `at`) in `transaction`; the worker is woken at the commit. */
  async function sendIn(
    transaction: Transaction,
    record: BroadcastRecord,
    at: string | null,
    sender: BroadcastSender,
  ) {
    const updatedAt = nextUpdatedAt(clock, record.updatedAt);
    const moved = await repo.move(
      record.projectId,
      record.id,
      ['draft'],
      at === null ? 'sending' : 'scheduled',
      { scheduledAt: at, keyDomainId: sender.domainId, updatedAt },
      transaction,
    );
    if (!moved) throw notDraft(record, 'sent');
    if (at === null) {
      await notifyOtherProcesses(transaction.db, deps.engine, QUEUE_CHANNELS.broadcasts);
      transaction.afterCommit(() => deps.notifier.notify());
    }
    return load(record.projectId, record.id, transaction);
  }

  const scheduleOf = (value: string | undefined) => checkScheduledAt(value, clock.now(), '');

  return {
    /** Checks a new broadcast before its transaction (and, when it is sent at once, that it can be). */
    async prepareCreate(
      projectId: string,
      input: CreateBroadcastInput,
      sender: BroadcastSender,
      personalization: Personalization,
    ) {
      if (input.scheduled_at !== undefined && !input.send) {
        throw invalidParam('scheduled_at', 'scheduled_at needs send: true.');
      }
      if (input.template && (input.html !== undefined || input.text !== undefined)) {
        throw invalidParam('template', 'Send either a template or html/text, not both.');
      }
      const now = clock.now().toISOString();
      const { from, replyTo } = addresses(input);
      const defaults = deps.engagement.defaults;
      const record: BroadcastRecord = {
        id: newId('bc'),
        projectId,
        name: input.name ?? input.subject ?? 'Untitled broadcast',
        from: from ?? null,
        replyTo: replyTo ?? [],
        subject: input.subject ?? null,
        previewText: input.preview_text ?? null,
        html: input.html ?? null,
        text: input.text ?? null,
        templateId: input.template?.id ?? null,
        templateVariables: input.template?.variables ?? null,
        personalization,
        segmentId: input.segment_id,
        topicId: input.topic_id ?? null,
        trackOpens: input.tracking?.opens ?? defaults.trackOpens,
        trackClicks: input.tracking?.clicks ?? defaults.trackClicks,
        ...newDraft(now),
      };
      await checkRefs(projectId, record);
      if (input.send) await checkSendable(record, sender);
      return { record, send: input.send ? { at: scheduleOf(input.scheduled_at) } : undefined, sender };
    },

    async create(
      transaction: Transaction,
      plan: { record: BroadcastRecord; send: { at: string | null } | undefined; sender: BroadcastSender },
    ): Promise<BroadcastRecord> {
      await repo.insert(plan.record, transaction);
      if (!plan.send) return plan.record;
      return sendIn(transaction, plan.record, plan.send.at, plan.sender);
    },

    async get(projectId: string, id: string): Promise<BroadcastView> {
      const record = await load(projectId, id);
      const counts = await repo.counts(record.id);
      const status = (name: string) => counts.byStatus.get(name) ?? 0;
      const delivered = status('delivered') + status('complained');
      return {
        ...toBroadcastSummary(record),
        counts: {
          copies: record.copies,
          excluded: record.excluded,
          queued: status('queued') + status('delayed'),
          sent: status('sent') + delivered + status('bounced'),
          delivered,
          opened: counts.opened,
          clicked: counts.clicked,
          bounced: status('bounced'),
          complained: status('complained'),
          unsubscribed: counts.unsubscribed,
          failed: status('failed'),
        },
      };
    },

    /** The broadcast as stored (the /resend views). */
    find: (projectId: string, id: string) => load(projectId, id),

    async list(projectId: string, page: PageRequest) {
      const result = await repo.list(projectId, page);
      return { items: result.items.map(toBroadcastSummary), hasMore: result.hasMore };
    },

    /** As stored (the /resend list). */
    listRecords: (projectId: string, page: PageRequest) => repo.list(projectId, page),

    async prepareUpdate(projectId: string, id: string, input: UpdateBroadcastInput) {
      const current = await load(projectId, id);
      if (current.status !== 'draft') throw notDraft(current, 'changed');
      const { from, replyTo } = addresses(input);
      const template = input.template === undefined ? undefined : input.template;
      const next: BroadcastRecord = {
        ...current,
        name: input.name ?? current.name,
        from: from ?? current.from,
        replyTo: replyTo ?? current.replyTo,
        subject: input.subject === undefined ? current.subject : input.subject,
        previewText: input.preview_text === undefined ? current.previewText : input.preview_text,
        html: input.html === undefined ? current.html : input.html,
        text: input.text === undefined ? current.text : input.text,
        templateId: template === undefined ? current.templateId : (template?.id ?? null),
        templateVariables: template === undefined ? current.templateVariables : (template?.variables ?? null),
        segmentId: input.segment_id ?? current.segmentId,
        topicId: input.topic_id === undefined ? current.topicId : input.topic_id,
        trackOpens: input.tracking?.opens ?? current.trackOpens,
        trackClicks: input.tracking?.clicks ?? current.trackClicks,
        updatedAt: nextUpdatedAt(clock, current.updatedAt),
      };
      await checkRefs(projectId, next);
      return next;
    },

    async update(transaction: Transaction, next: BroadcastRecord): Promise<BroadcastRecord> {
      if (!(await repo.updateDraft(next, transaction))) {
        throw notDraft(await load(next.projectId, next.id, transaction), 'changed');
      }
      return next;
    },

    /** Checks that a draft can be sent, before the transaction that sends it. */
    async prepareSend(
      projectId: string,
      id: string,
      scheduledAt: string | undefined,
      sender: BroadcastSender,
    ) {
      const record = await load(projectId, id);
      if (record.status !== 'draft') throw notDraft(record, 'sent');
      await checkSendable(record, sender);
      return { record, at: scheduleOf(scheduledAt), sender };
    },

    send: (
      transaction: Transaction,
      plan: { record: BroadcastRecord; at: string | null; sender: BroadcastSender },
    ): Promise<BroadcastRecord> => sendIn(transaction, plan.record, plan.at, plan.sender),

    /** Cancels a scheduled broadcast whose fan-out has not begun. */
    async cancel(transaction: Transaction, projectId: string, id: string) {
      const record = await load(projectId, id, transaction);
      const updatedAt = nextUpdatedAt(clock, record.updatedAt);
      if (!(await repo.move(projectId, id, ['scheduled', 'draft'], 'canceled', { updatedAt }, transaction))) {
        throw conflict(
          'broadcast_not_cancelable',
          `The broadcast '${id}' is ${record.status}: only a draft or a scheduled broadcast whose sending has not begun can be canceled.`,
        );
      }
      return { object: 'broadcast' as const, id };
    },

    /** A new draft with the content of another broadcast. */
    async duplicate(transaction: Transaction, projectId: string, id: string): Promise<BroadcastRecord> {
      const source = await load(projectId, id, transaction);
      const copy: BroadcastRecord = { ...source, id: newId('bc'), ...newDraft(clock.now().toISOString()) };
      await repo.insert(copy, transaction);
      return copy;
    },

    /** Deletes a draft (or a canceled broadcast): one that sent anything stays, with its copies. */
    async delete(transaction: Transaction, projectId: string, id: string) {
      const record = await load(projectId, id, transaction);
      if (!(await repo.deleteUnsent(projectId, id, transaction))) {
        throw conflict(
          'broadcast_not_deletable',
          `The broadcast '${id}' is ${record.status}: only a draft or a canceled broadcast can be deleted.`,
        );
      }
      return { object: 'broadcast' as const, id, deleted: true as const };
    },

    async recipients(
      projectId: string,
      id: string,
      filter: RecipientFilter | undefined,
      email: string | undefined,
      page: PageRequest,
    ) {
      const record = await load(projectId, id);
      return repo.recipients(record.id, filter, email, page);
    },

    async exclusions(projectId: string, id: string, after: string | undefined, limit: number) {
      const record = await load(projectId, id);
      return repo.exclusions(record.id, after, limit);
    },

    async clickedLinks(projectId: string, id: string) {
      const record = await load(projectId, id);
      return repo.clickedLinks(record.id, (data) => {
        const url = (JSON.parse(data) as { click?: { url?: unknown } }).click?.url;
        return typeof url === 'string' ? url : undefined;
      });
    },

    /**
     * A click on a copy's unsubscribe (engagement): the contact leaves the broadcast's topic (when it has one)
     * or every broadcast, with its `contact.topics_updated` or `contact.updated` event, in the click's
     * transaction.
     */
    audienceUnsubscribe: (async ({ projectId, broadcastId, contactId }) => {
      const broadcast = await repo.find(projectId, broadcastId);
      if (!broadcast) return undefined;
      const topicId = broadcast.topicId;
      if (topicId !== null && (await deps.topics.find(projectId, topicId))) {
        return (transaction: Transaction) =>
          unlessGone(
            deps.topicChoices.choose(transaction, projectId, contactId, [
              { id: topicId, subscription: 'opt_out' },
            ]),
          );
      }
      const plan = await deps.contacts.prepareUpdate(projectId, contactId, { unsubscribed: true });
      return (transaction: Transaction) => unlessGone(deps.contacts.update(transaction, plan));
    }) satisfies AudienceUnsubscribe,
  };
}

export type BroadcastService = ReturnType<typeof createBroadcastService>;
