import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import type { ContactRecord, ContactRepo } from '../contacts/contacts.repo.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import type { PreferenceTokens } from '../engagement/tokens.ts';
import type { ContactTopicRecord, Subscription, TopicRepo } from '../topics/topics.repo.ts';
import { MAX_TOPIC_CHOICES } from '../topics/topics.schemas.ts';
import type { TopicService } from '../topics/topics.service.ts';

/** What the page shows: the contact's address, whether it gets broadcasts at all, and its topics. */
export interface Preferences {
  email: string;
  unsubscribed: boolean;
  topics: ContactTopicRecord[];
}

/** What a token leads to: the contact's preferences, or why not. */
export type PreferenceLookup =
  { found: 'contact'; contact: ContactRecord; preferences: Preferences } | { found: 'nothing' | 'expired' };

/** What a POST asked for and what came of it. */
export type PreferenceChange =
  | { done: 'saved'; changed: number }
  | { done: 'unsubscribed' }
  | { done: 'resubscribed' }
  | { done: 'refused'; reason: string };

export interface PreferenceServiceDeps {
  db: Kysely<Database>;
  tokens: PreferenceTokens;
  contactsRepo: Pick<ContactRepo, 'byId'>;
  contacts: Pick<ContactService, 'prepareUpdate' | 'update'>;
  topicsRepo: Pick<TopicRepo, 'ofContact'>;
  topics: Pick<TopicService, 'choose'>;
  clock: Clock;
}

/**
 * The preference page's work: a token read (no query for a bad one), then the contact and its topics; each
 * change is written at once with the event the API's own change emits (`contact.topics_updated`,
 * `contact.updated`). The topics shown are the project's newest MAX_TOPIC_CHOICES, the most one choice takes.
 */
export function createPreferenceService(deps: PreferenceServiceDeps) {
  const { tokens, clock } = deps;

  async function lookup(token: string): Promise<PreferenceLookup> {
    const ref = tokens.read(token, clock.now());
    if (!ref) return { found: 'nothing' };
    if (ref.expired) return { found: 'expired' };
    const contact = await deps.contactsRepo.byId(ref.contactId);
    if (!contact) return { found: 'nothing' };
    const page = await deps.topicsRepo.ofContact(contact.projectId, contact.id, { limit: MAX_TOPIC_CHOICES });
    return {
      found: 'contact',
      contact,
      preferences: { email: contact.email, unsubscribed: contact.unsubscribed, topics: page.items },
    };
  }

  /** The form's topic choices that change something: each shown topic, ticked or not. */
  function topicChanges(form: URLSearchParams, current: readonly ContactTopicRecord[]) {
    const shown = new Set((form.get('shown') ?? '').split(',').filter((id) => id !== ''));
    const ticked = new Set(form.getAll('topic'));
    const changes: Array<{ id: string; subscription: Subscription }> = [];
    // Only the topics the page showed (one added since is left as it is), and only the project's.
    for (const { topic, subscription } of current) {
      if (!shown.has(topic.id)) continue;
      const wanted: Subscription = ticked.has(topic.id) ? 'opt_in' : 'opt_out';
      if (wanted !== subscription) changes.push({ id: topic.id, subscription: wanted });
    }
    return changes;
  }

  return {
    lookup,

    /** Applies a POSTed form to the contact the token names (already looked up by the caller). */
    async change(
      contact: ContactRecord,
      preferences: Preferences,
      form: URLSearchParams,
    ): Promise<PreferenceChange> {
      const action = form.get('action');
      if (action === 'unsubscribe_all' || action === 'resubscribe') {
        const unsubscribed = action === 'unsubscribe_all';
        if (preferences.unsubscribed !== unsubscribed) {
          const plan = await deps.contacts.prepareUpdate(contact.projectId, contact.id, { unsubscribed });
          await inTransaction(deps.db, (transaction) => deps.contacts.update(transaction, plan));
        }
        return unsubscribed ? { done: 'unsubscribed' } : { done: 'resubscribed' };
      }
      if (action !== 'save') return { done: 'refused', reason: 'The form asked for nothing this page does.' };
      const changes = topicChanges(form, preferences.topics);
      if (changes.length > 0) {
        await inTransaction(deps.db, (transaction) =>
          deps.topics.choose(transaction, contact.projectId, contact.id, changes),
        );
      }
      return { done: 'saved', changed: changes.length };
    },
  };
}

export type PreferenceService = ReturnType<typeof createPreferenceService>;
