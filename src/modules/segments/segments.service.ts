import { mapPage, type PageRequest } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import { type Clock, nextUpdatedAt } from '../../lib/clock.ts';
import { DomainError, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import type { SegmentRecord, SegmentRepo } from './segments.repo.ts';
import type { CreateSegmentInput, SegmentView } from './segments.schemas.ts';

export const toSegmentView = (record: SegmentRecord): SegmentView => ({
  object: 'segment',
  id: record.id,
  name: record.name,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

export interface SegmentServiceDeps {
  repo: SegmentRepo;
  contacts: Pick<ContactService, 'find' | 'lock'>;
  clock: Clock;
}

/**
 * Segments: named lists of a project's contacts, which contacts are added to and removed from. (A segment
 * that is a filter over contacts' properties and engagement is a later step of issue 37.)
 */
export function createSegmentService({ repo, contacts, clock }: SegmentServiceDeps) {
  /** The segment, in the project (any other id, another project's included, is a 404). */
  async function load(projectId: string, id: string, transaction?: Transaction): Promise<SegmentRecord> {
    const record = isId('seg', id) ? await repo.find(projectId, id, transaction) : undefined;
    if (!record) throw notFound('segment', id);
    return record;
  }

  return {
    prepareCreate(projectId: string, input: CreateSegmentInput): SegmentRecord {
      const now = clock.now().toISOString();
      return { id: newId('seg'), projectId, name: input.name, createdAt: now, updatedAt: now };
    },

    async create(transaction: Transaction, record: SegmentRecord): Promise<SegmentView> {
      await repo.insert(record, transaction);
      return toSegmentView(record);
    },

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

    async rename(
      transaction: Transaction,
      projectId: string,
      id: string,
      name: string,
    ): Promise<SegmentView> {
      const current = await load(projectId, id, transaction);
      const next = { ...current, name, updatedAt: nextUpdatedAt(clock, current.updatedAt) };
      if (!(await repo.rename(projectId, id, name, next.updatedAt, transaction)))
        throw notFound('segment', id);
      return toSegmentView(next);
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
      const added = await repo.addContact(segment.id, contact.id, clock.now().toISOString(), transaction);
      return { object: 'segment_membership' as const, segment_id: segment.id, contact_id: contact.id, added };
    },

    /** Removes a contact from a segment; a contact that is not in it is a 404. */
    async removeContact(transaction: Transaction, projectId: string, idOrEmail: string, segmentId: string) {
      const contact = await contacts.lock(transaction, projectId, idOrEmail);
      const segment = await load(projectId, segmentId, transaction);
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
