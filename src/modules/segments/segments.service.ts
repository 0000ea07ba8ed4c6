import { mapPage, type PageRequest } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import { insertThenView } from '../../db/project-rows.ts';
import { type Clock, nextUpdatedAt } from '../../lib/clock.ts';
import { DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import { checkFilter, type SegmentFilter } from '../contacts/contact-filter.ts';
import type { ContactPropertyRepo } from '../contacts/contact-properties.repo.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import { type ContactTriggers, noContactTriggers } from '../contacts/contact-triggers.ts';
import type { TopicRepo } from '../topics/topics.repo.ts';
import type { SegmentRecord, SegmentRepo } from './segments.repo.ts';
import type { CreateSegmentInput, SegmentView, UpdateSegmentInput } from './segments.schemas.ts';

export const toSegmentView = (record: SegmentRecord): SegmentView => ({
  object: 'segment',
  id: record.id,
  name: record.name,
  filter: record.filter,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

export interface SegmentServiceDeps {
  repo: SegmentRepo;
  contacts: Pick<ContactService, 'find' | 'lock'>;
  /** What a filter's conditions name: the declared properties and the project's topics. */
  properties: Pick<ContactPropertyRepo, 'all'>;
  topics: Pick<TopicRepo, 'find'>;
  clock: Clock;
  /** What a contact added to a segment does to automations, in the addition's transaction. */
  triggers?: ContactTriggers | undefined;
}

/**
 * Segments: named lists of a project's contacts, which contacts are added to and removed from, or filters
 * over contacts (properties, topic subscriptions, engagement recency, creation time), whose members are whoever
 * matches when they are read (contact-filter.ts). A segment keeps its kind: a list stays a list.
 */
export function createSegmentService({
  repo,
  contacts,
  properties,
  topics,
  clock,
  triggers = noContactTriggers,
}: SegmentServiceDeps) {
  /** The segment, in the project (any other id, another project's included, is a 404). */
  async function load(projectId: string, id: string, transaction?: Transaction): Promise<SegmentRecord> {
    const record = isId('seg', id) ? await repo.find(projectId, id, transaction) : undefined;
    if (!record) throw notFound('segment', id);
    return record;
  }

  /** The filter checked against what the project declares (422 naming the bad condition), normalized. */
  async function checked(projectId: string, filter: SegmentFilter): Promise<SegmentFilter> {
    const named = new Set<string>();
    for (const condition of filter.conditions) {
      const id = condition.topic_id;
      if (id !== undefined && isId('top', id) && (await topics.find(projectId, id))) named.add(id);
    }
    return checkFilter(filter, await properties.all(projectId), named);
  }

  /** A list has contacts added to it; a filter's members are whoever matches. */
  function assertList(segment: SegmentRecord): void {
    if (segment.filter !== null) {
      throw invalidParam(
        'segment_id',
        `The segment '${segment.id}' is a filter: its members are the contacts that match it, not added or removed.`,
        'segment_is_filter',
      );
    }
  }

  /** Its name, or a filter segment's filter (already checked: prepareUpdate). */
  async function update(
    transaction: Transaction,
    projectId: string,
    id: string,
    input: UpdateSegmentInput,
  ): Promise<SegmentView> {
    const current = await load(projectId, id, transaction);
    if (input.filter !== undefined && current.filter === null) {
      throw invalidParam(
        'filter',
        `The segment '${id}' is a list: a list does not become a filter (create a filter segment instead).`,
        'segment_is_list',
      );
    }
    const next: SegmentRecord = {
      ...current,
      name: input.name ?? current.name,
      filter: input.filter ?? current.filter,
      updatedAt: nextUpdatedAt(clock, current.updatedAt),
    };
    if (!(await repo.update(projectId, id, next, transaction))) throw notFound('segment', id);
    return toSegmentView(next);
  }

  return {
    async prepareCreate(projectId: string, input: CreateSegmentInput): Promise<SegmentRecord> {
      const now = clock.now().toISOString();
      const filter = input.filter === undefined ? null : await checked(projectId, input.filter);
      return { id: newId('seg'), projectId, name: input.name, filter, createdAt: now, updatedAt: now };
    },

    create: insertThenView(repo, toSegmentView),

    async get(projectId: string, id: string): Promise<SegmentView> {
      return toSegmentView(await load(projectId, id));
    },

    /** Throws the 404 of a segment the project does not have. */
    async check(projectId: string, id: string): Promise<void> {
      await load(projectId, id);
    },

    async list(projectId: string, page: PageRequest) {
      return mapPage(await repo.list(projectId, page), toSegmentView);
    },

    /** Its name, or a filter segment's filter (checked before the transaction: `prepareUpdate`). */
    async prepareUpdate(projectId: string, input: UpdateSegmentInput): Promise<UpdateSegmentInput> {
      return input.filter === undefined
        ? input
        : { ...input, filter: await checked(projectId, input.filter) };
    },

    update,

    async rename(
      transaction: Transaction,
      projectId: string,
      id: string,
      name: string,
    ): Promise<SegmentView> {
      return update(transaction, projectId, id, { name });
    },

    async delete(transaction: Transaction, projectId: string, id: string) {
      if (!isId('seg', id) || !(await repo.delete(projectId, id, transaction))) throw notFound('segment', id);
      return { object: 'segment' as const, id, deleted: true as const };
    },

    /** The segments a contact (by id or email) is in, newest first. */
    async ofContact(projectId: string, idOrEmail: string, page: PageRequest) {
      const contact = await contacts.find(projectId, idOrEmail);
      return mapPage(await repo.ofContact(projectId, contact.id, page), toSegmentView);
    },

    /** Adds a contact to a segment; adding one that is in it already changes nothing (`added: false`). */
    async addContact(transaction: Transaction, projectId: string, idOrEmail: string, segmentId: string) {
      const contact = await contacts.lock(transaction, projectId, idOrEmail);
      // Read in the transaction: the segment's delete, if it comes, waits for this insert or finds it.
      const segment = await load(projectId, segmentId, transaction);
      assertList(segment);
      const added = await repo.addContact(segment.id, contact.id, clock.now().toISOString(), transaction);
      if (added) {
        await triggers.changedIn(
          transaction,
          projectId,
          { kind: 'added_to_segment', segmentId: segment.id },
          [contact.id],
        );
      }
      return { object: 'segment_membership' as const, segment_id: segment.id, contact_id: contact.id, added };
    },

    /** Removes a contact from a segment; a contact that is not in it is a 404. */
    async removeContact(transaction: Transaction, projectId: string, idOrEmail: string, segmentId: string) {
      const contact = await contacts.lock(transaction, projectId, idOrEmail);
      const segment = await load(projectId, segmentId, transaction);
      assertList(segment);
      if (!(await repo.removeContact(segment.id, contact.id, transaction))) {
        throw new DomainError(
          'not_found',
          'resource_missing',
          `The contact '${contact.email}' is not in the segment '${segment.id}'.`,
          'segment_id',
        );
      }
      return {
        object: 'segment_membership' as const,
        segment_id: segment.id,
        contact_id: contact.id,
        deleted: true as const,
      };
    },
  };
}

export type SegmentService = ReturnType<typeof createSegmentService>;
