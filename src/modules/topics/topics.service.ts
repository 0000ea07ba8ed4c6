import { mapPage, type PageRequest } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import { insertThenView } from '../../db/project-rows.ts';
import { type Clock, nextUpdatedAt } from '../../lib/clock.ts';
import { DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import type { EventService } from '../events/events.service.ts';
import { type ContactTriggers, noContactTriggers } from '../contacts/contact-triggers.ts';
import type { ContactTopicRecord, Subscription, TopicRecord, TopicRepo } from './topics.repo.ts';
import type {
  ContactTopicView,
  CreateTopicInput,
  TopicChoiceInput,
  TopicView,
  UpdateTopicInput,
} from './topics.schemas.ts';

export const toTopicView = (record: TopicRecord): TopicView => ({
  object: 'topic',
  id: record.id,
  name: record.name,
  description: record.description,
  default_subscription: record.defaultSubscription,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

const toContactTopicView = ({ topic, subscription, chosen }: ContactTopicRecord): ContactTopicView => ({
  object: 'contact_topic',
  topic_id: topic.id,
  name: topic.name,
  description: topic.description,
  subscription,
  chosen,
});

export interface TopicServiceDeps {
  repo: TopicRepo;
  contacts: Pick<ContactService, 'find' | 'lock'>;
  events: Pick<EventService, 'emitIn'>;
  clock: Clock;
  /** What a contact subscribed to a topic does to automations, in the choice's transaction. */
  triggers?: ContactTriggers | undefined;
}

/**
 * Topics: what a project's contacts subscribe to, and each contact's subscription per topic. A contact that
 * has made no choice for a topic follows its default; a choice that changes a contact's subscription emits
 * `contact.topics_updated` in its transaction.
 */
export function createTopicService({
  repo,
  contacts,
  events,
  clock,
  triggers = noContactTriggers,
}: TopicServiceDeps) {
  async function load(projectId: string, id: string, transaction?: Transaction): Promise<TopicRecord> {
    const record = isId('top', id) ? await repo.find(projectId, id, transaction) : undefined;
    if (!record) throw notFound('topic', id);
    return record;
  }

  return {
    prepareCreate(projectId: string, input: CreateTopicInput): TopicRecord {
      const now = clock.now().toISOString();
      return {
        id: newId('top'),
        projectId,
        name: input.name,
        description: input.description ?? null,
        defaultSubscription: input.default_subscription,
        createdAt: now,
        updatedAt: now,
      };
    },

    create: insertThenView(repo, toTopicView),

    async get(projectId: string, id: string): Promise<TopicView> {
      return toTopicView(await load(projectId, id));
    },

    async list(projectId: string, page: PageRequest) {
      return mapPage(await repo.list(projectId, page), toTopicView);
    },

    async update(
      transaction: Transaction,
      projectId: string,
      id: string,
      input: UpdateTopicInput,
    ): Promise<TopicView> {
      if (input.name === undefined && input.description === undefined) {
        throw new DomainError('validation', 'parameter_missing', 'Send at least one of name, description.');
      }
      const current = await load(projectId, id, transaction);
      const next: TopicRecord = {
        ...current,
        name: input.name ?? current.name,
        description: input.description === undefined ? current.description : input.description,
        updatedAt: nextUpdatedAt(clock, current.updatedAt),
      };
      if (!(await repo.update(next, transaction))) throw notFound('topic', id);
      return toTopicView(next);
    },

    async delete(transaction: Transaction, projectId: string, id: string) {
      if (!isId('top', id) || !(await repo.delete(projectId, id, transaction))) throw notFound('topic', id);
      return { object: 'topic' as const, id, deleted: true as const };
    },

    /** Every topic of the project, newest first, with the contact's subscription to each. */
    async ofContact(projectId: string, idOrEmail: string, page: PageRequest) {
      const contact = await contacts.find(projectId, idOrEmail);
      return mapPage(await repo.ofContact(projectId, contact.id, page), toContactTopicView);
    },

    /**
     * Makes a contact's choices (each topic named once, each the project's; otherwise nothing is written) and
     * answers the contact's id and the topics chosen for. Emits `contact.topics_updated` with the subscriptions that changed.
     */
    async choose(
      transaction: Transaction,
      projectId: string,
      idOrEmail: string,
      choices: readonly TopicChoiceInput[],
    ): Promise<{ contactId: string; topics: ContactTopicView[] }> {
      const seen = new Set<string>();
      for (const [index, choice] of choices.entries()) {
        if (seen.has(choice.id)) {
          throw invalidParam(`topics[${index}].id`, `The topic '${choice.id}' is named twice.`);
        }
        seen.add(choice.id);
      }
      const contact = await contacts.lock(transaction, projectId, idOrEmail);
      const ids = choices.map((choice) => choice.id);
      const topics = new Map(
        (await repo.findMany(projectId, ids, transaction)).map((topic) => [topic.id, topic]),
      );
      const unknown = ids.find((id) => !topics.has(id));
      if (unknown !== undefined) throw notFound('topic', unknown);
      const before = await repo.choicesOf(contact.id, ids, transaction);
      await repo.choose(
        contact.id,
        choices.map((choice) => ({ topicId: choice.id, subscription: choice.subscription })),
        clock.now().toISOString(),
        transaction,
      );
      const changed: Array<{ id: string; subscription: Subscription; previous_subscription: Subscription }> =
        [];
      const answer = choices.map((choice) => {
        const topic = topics.get(choice.id)!;
        const previous = before.get(topic.id) ?? topic.defaultSubscription;
        if (previous !== choice.subscription) {
          changed.push({ id: topic.id, subscription: choice.subscription, previous_subscription: previous });
        }
        return toContactTopicView({ topic, subscription: choice.subscription, chosen: true });
      });
      if (changed.length > 0) {
        await events.emitIn(transaction, [
          {
            projectId,
            kind: 'contact.topics_updated',
            data: { id: contact.id, email: contact.email, topics: changed },
          },
        ]);
      }
      for (const change of changed) {
        if (change.subscription !== 'opt_in') continue;
        await triggers.changedIn(transaction, projectId, { kind: 'topic_subscribed', topicId: change.id }, [
          contact.id,
        ]);
      }
      return { contactId: contact.id, topics: answer };
    },
  };
}

export type TopicService = ReturnType<typeof createTopicService>;
