import { mapPage, type PageRequest } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import { parseAddress } from '../../lib/addresses.ts';
import { type Clock, nextUpdatedAt } from '../../lib/clock.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { EventService } from '../events/events.service.ts';
import type { EventKind } from '../event-kinds/event-kinds.ts';
import type { ContactPropertyRecord, ContactPropertyRepo, PropertyValue } from './contact-properties.repo.ts';
import { checkPropertyValues, parsePropertyFilter } from './contact-properties.service.ts';
import { resolveFilter, type SegmentFilter } from './contact-filter.ts';
import type { ContactFilter, ContactRecord, ContactRepo } from './contacts.repo.ts';
import { type ContactTriggers, noContactTriggers } from './contact-triggers.ts';
import { csvLines, EXPORT_PAGE } from './contact-export.ts';
import type {
  ContactListFilter,
  ContactView,
  CreateContactInput,
  UpdateContactInput,
} from './contacts.schemas.ts';

export interface ContactServiceDeps {
  repo: ContactRepo;
  properties: ContactPropertyRepo;
  events: Pick<EventService, 'emitIn'>;
  clock: Clock;
  /** What the list's segment and topic filters name, looked up in the project (another project's is a 404). */
  segments: {
    find(projectId: string, id: string): Promise<{ id: string; filter: SegmentFilter | null } | undefined>;
    /** The segments a contact is in (read in the transaction that emits its event). */
    idsOf(contactId: string, transaction: Transaction): Promise<string[]>;
  };
  topics: {
    find(projectId: string, id: string): Promise<{ defaultSubscription: 'opt_in' | 'opt_out' } | undefined>;
  };
  /** What a contact created, deleted or unsubscribed does to automations, in the write's transaction. */
  triggers?: ContactTriggers | undefined;
}

/** A contact as the API shows it: its values by key, of the properties still declared. */
export function toContactView(
  record: ContactRecord,
  declared: readonly ContactPropertyRecord[],
): ContactView {
  const properties: Record<string, PropertyValue> = {};
  for (const property of declared) {
    const value = record.values[property.id];
    if (value !== undefined) properties[property.key] = value;
  }
  return {
    object: 'contact',
    id: record.id,
    email: record.email,
    first_name: record.firstName,
    last_name: record.lastName,
    unsubscribed: record.unsubscribed,
    properties,
    created_at: record.createdAt,
    updated_at: record.updatedAt,
  };
}

/**
 * What `contact.*` events carry: the contact, in the fields of Resend's contact events (Postwire has no
 * audiences, so no `audience_id`), with its properties and the segments it is in.
 */
export const contactEventData = (contact: ContactView, segmentIds: string[]): Record<string, unknown> => ({
  id: contact.id,
  email: contact.email,
  first_name: contact.first_name,
  last_name: contact.last_name,
  unsubscribed: contact.unsubscribed,
  properties: contact.properties,
  segment_ids: segmentIds,
  created_at: contact.created_at,
  updated_at: contact.updated_at,
});

/** How a path names a contact: by id, or by address (stored lowercased). */
type ContactRef = { column: 'id' | 'email'; value: string; given: string };

function refOf(idOrEmail: string): ContactRef | undefined {
  if (isId('con', idOrEmail)) return { column: 'id', value: idOrEmail, given: idOrEmail };
  const parsed = parseAddress(idOrEmail);
  if (!parsed.ok || parsed.value.name !== null) return undefined;
  return { column: 'email', value: parsed.value.address.toLowerCase(), given: idOrEmail };
}

const missing = (idOrEmail: string) => notFound('contact', idOrEmail);

/** Applies checked values (by property id; null removes) to a contact's. */
function withValues(
  current: Record<string, PropertyValue>,
  changes: Map<string, PropertyValue | null>,
  declared: readonly ContactPropertyRecord[],
) {
  // Values of properties no longer declared are dropped at each write.
  const kept = new Set(declared.map((property) => property.id));
  const values: Record<string, PropertyValue> = {};
  for (const [id, value] of Object.entries(current)) if (kept.has(id)) values[id] = value;
  for (const [id, value] of changes) {
    if (value === null) delete values[id];
    else values[id] = value;
  }
  return values;
}

/** A write checked before its transaction: the contact named, the project's properties, the changes. */
interface UpdatePlan {
  projectId: string;
  ref: ContactRef;
  input: UpdateContactInput;
  declared: ContactPropertyRecord[];
  values: Map<string, PropertyValue | null>;
}

/** Contacts: the people a project's broadcasts go to. Each write emits its `contact.*` event in its transaction. */
export function createContactService({
  repo,
  properties,
  events,
  clock,
  segments,
  topics,
  triggers = noContactTriggers,
}: ContactServiceDeps) {
  async function emitFor(transaction: Transaction, projectId: string, kind: EventKind, contact: ContactView) {
    // A new contact is in no segment yet.
    const segmentIds = kind === 'contact.created' ? [] : await segments.idsOf(contact.id, transaction);
    await events.emitIn(transaction, [{ projectId, kind, data: contactEventData(contact, segmentIds) }]);
  }

  /** The list's filters as the repository reads them: named segments and topics looked up in the project. */
  async function filterOf(
    projectId: string,
    filter: ContactListFilter,
    declared: readonly ContactPropertyRecord[],
  ): Promise<ContactFilter> {
    const { segment_id: segmentId, topic_id: topicId } = filter;
    const segment = segmentId === undefined ? undefined : await segments.find(projectId, segmentId);
    if (segmentId !== undefined && !segment) throw notFound('segment', segmentId);
    const topic = topicId === undefined ? undefined : await topics.find(projectId, topicId);
    if (topicId !== undefined && !topic) throw notFound('topic', topicId);
    return {
      unsubscribed: filter.unsubscribed,
      emailPrefix: filter.email_prefix?.toLowerCase(),
      property: filter.property === undefined ? undefined : parsePropertyFilter(declared, filter.property),
      segment: segment && {
        id: segment.id,
        // A filter segment's members: whoever matches it now.
        filter:
          segment.filter &&
          (await resolveFilter(
            segment.filter,
            declared,
            async (id) => (await topics.find(projectId, id))?.defaultSubscription,
            clock.now(),
          )),
      },
      topic:
        topic && topicId !== undefined
          ? { id: topicId, defaultSubscription: topic.defaultSubscription }
          : undefined,
    };
  }

  return {
    async prepareCreate(projectId: string, input: CreateContactInput) {
      const parsed = parseAddress(input.email);
      if (!parsed.ok || parsed.value.name !== null) {
        throw invalidParam(
          'email',
          `'${input.email}' is not an email address such as ada@example.org${parsed.ok ? ' (without a name)' : `: ${parsed.reason}`}.`,
          'invalid_address',
        );
      }
      const declared = await properties.all(projectId);
      const values = withValues({}, checkPropertyValues(declared, input.properties ?? {}), declared);
      const now = clock.now().toISOString();
      const record: ContactRecord = {
        id: newId('con'),
        projectId,
        email: parsed.value.address.toLowerCase(),
        firstName: input.first_name ?? null,
        lastName: input.last_name ?? null,
        unsubscribed: input.unsubscribed ?? false,
        values,
        createdAt: now,
        updatedAt: now,
      };
      return { record, declared };
    },

    async create(
      transaction: Transaction,
      { record, declared }: { record: ContactRecord; declared: ContactPropertyRecord[] },
    ): Promise<ContactView> {
      if (!(await repo.insert(record, transaction))) {
        throw conflict('contact_exists', `The project already has a contact '${record.email}'.`, 'email');
      }
      const view = toContactView(record, declared);
      await emitFor(transaction, record.projectId, 'contact.created', view);
      await triggers.changedIn(transaction, record.projectId, { kind: 'created' }, [record.id]);
      return view;
    },

    async get(projectId: string, idOrEmail: string): Promise<ContactView> {
      const ref = refOf(idOrEmail);
      const record = ref && (await repo.find(projectId, ref.column, ref.value));
      if (!record) throw missing(idOrEmail);
      return toContactView(record, await properties.all(projectId));
    },

    /** The contact a path names, as stored (to read what hangs off it: its segments, its topics). */
    async find(projectId: string, idOrEmail: string): Promise<ContactRecord> {
      const ref = refOf(idOrEmail);
      const record = ref && (await repo.find(projectId, ref.column, ref.value));
      if (!record) throw missing(idOrEmail);
      return record;
    },

    /**
     * The contact a path names, locked for the rest of `transaction`: a membership or a topic choice written
     * next cannot meet the contact's delete half-way.
     */
    async lock(transaction: Transaction, projectId: string, idOrEmail: string): Promise<ContactRecord> {
      const ref = refOf(idOrEmail);
      const record = ref && (await repo.lock(projectId, ref.column, ref.value, transaction));
      if (!record) throw missing(idOrEmail);
      return record;
    },

    async list(projectId: string, page: PageRequest, filter: ContactListFilter) {
      const declared = await properties.all(projectId);
      return mapPage(
        await repo.list(projectId, page, await filterOf(projectId, filter, declared)),
        (record) => toContactView(record, declared),
      );
    },

    /**
     * The filter's contacts as CSV lines, oldest first, read a keyset page at a time (never all at once): a
     * header (`email`, `first_name`, `last_name`, `unsubscribed`, each declared property's key, `id`,
     * `created_at`, `updated_at`), then a line per contact. Checked before the first line (a 404 for a
     * segment or topic that is not the project's).
     */
    async export(projectId: string, filter: ContactListFilter): Promise<AsyncIterable<string>> {
      const declared = await properties.all(projectId);
      const resolved = await filterOf(projectId, filter, declared);
      return csvLines(declared, (afterId) => repo.pageAfter(projectId, resolved, afterId, EXPORT_PAGE));
    },

    /** Checks an update before its transaction: something to change, declared properties of their types. */
    async prepareUpdate(
      projectId: string,
      idOrEmail: string,
      input: UpdateContactInput,
    ): Promise<UpdatePlan> {
      if (Object.keys(input).length === 0) {
        throw new DomainError(
          'validation',
          'parameter_missing',
          'Send at least one of first_name, last_name, unsubscribed, properties.',
        );
      }
      const ref = refOf(idOrEmail);
      if (!ref) throw missing(idOrEmail);
      const declared = await properties.all(projectId);
      return {
        projectId,
        ref,
        input,
        declared,
        values: checkPropertyValues(declared, input.properties ?? {}),
      };
    },

    async update(transaction: Transaction, plan: UpdatePlan): Promise<ContactView> {
      const { projectId, ref, input, declared } = plan;
      // Read under the row's lock: two updates of one contact's properties each keep the other's values.
      const current = await repo.lock(projectId, ref.column, ref.value, transaction);
      if (!current) throw missing(ref.given);
      const next: ContactRecord = {
        ...current,
        firstName: input.first_name === undefined ? current.firstName : input.first_name,
        lastName: input.last_name === undefined ? current.lastName : input.last_name,
        unsubscribed: input.unsubscribed ?? current.unsubscribed,
        values: withValues(current.values, plan.values, declared),
        updatedAt: nextUpdatedAt(clock, current.updatedAt),
      };
      await repo.update(next, transaction);
      const view = toContactView(next, declared);
      await emitFor(transaction, projectId, 'contact.updated', view);
      if (next.unsubscribed && !current.unsubscribed) {
        await triggers.changedIn(transaction, projectId, { kind: 'unsubscribed' }, [current.id]);
      }
      return view;
    },

    async prepareDelete(projectId: string, idOrEmail: string) {
      const ref = refOf(idOrEmail);
      if (!ref) throw missing(idOrEmail);
      return { projectId, ref, declared: await properties.all(projectId) };
    },

    async delete(
      transaction: Transaction,
      { projectId, ref, declared }: { projectId: string; ref: ContactRef; declared: ContactPropertyRecord[] },
    ): Promise<{ object: 'contact'; id: string; deleted: true }> {
      const current = await repo.lock(projectId, ref.column, ref.value, transaction);
      if (!current) throw missing(ref.given);
      // The event first: it names the segments the contact was in, which the delete takes with it (a delete
      // that then fails rolls the event back with it).
      await emitFor(transaction, projectId, 'contact.deleted', toContactView(current, declared));
      if (!(await repo.delete(projectId, current.id, transaction))) throw missing(ref.given);
      await triggers.changedIn(transaction, projectId, { kind: 'deleted' }, [current.id]);
      return { object: 'contact', id: current.id, deleted: true };
    },
  };
}

export type ContactService = ReturnType<typeof createContactService>;
