import { type Insertable, type Kysely, type SelectQueryBuilder, sql } from 'kysely';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { deleteProjectRow, updateProjectRow } from '../../db/project-rows.ts';
import type { Engine } from '../../db/connection.ts';
import { type AudienceFilter, audienceWhere, type SegmentFilter } from '../contacts/contact-filter.ts';
import { type ContactRecord, toContactRecord } from '../contacts/contacts.repo.ts';

export interface SegmentRecord {
  id: string;
  projectId: string;
  name: string;
  /** A filter segment's filter, as the API gave it; null: a list contacts are added to. */
  filter: SegmentFilter | null;
  createdAt: string;
  updatedAt: string;
}

const toRecord = (row: Row<'segments'>): SegmentRecord => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  filter: row.filter === null ? null : (JSON.parse(row.filter) as SegmentFilter),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

/** The row an insert writes: toRecord the other way. */
const toRow = (record: SegmentRecord): Insertable<Database['segments']> => ({
  id: record.id,
  project_id: record.projectId,
  name: record.name,
  filter: record.filter === null ? null : JSON.stringify(record.filter),
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** Whose members a read means: a segment's list, or (`filter`, resolved for this read) whoever matches. */
export interface Audience {
  projectId: string;
  segmentId: string;
  filter: AudienceFilter | null;
}

/**
 * The segments and segment_contacts tables: named lists, filters, and who is on a list. Writes join the
 * caller's transaction.
 */
/**
 * A batch of the contacts `query` selects, by `key` (their id, as the query names it) ascending after
 * `afterContactId` (keyset; null from the first), at most `limit`.
 */
async function contactsAfter<DB, TB extends keyof DB>(
  query: SelectQueryBuilder<DB, TB, Row<'contacts'>>,
  key: string,
  afterContactId: string | null,
  limit: number,
): Promise<ContactRecord[]> {
  const column = sql.ref(key);
  const after = afterContactId === null ? query : query.where(column, '>', afterContactId);
  const rows = await after.orderBy(column).limit(limit).execute();
  return rows.map(toContactRecord);
}

/** Each side of a list's membership (a row of segment_contacts): its column there, and the other side's. */
const MEMBERSHIP = {
  segments: { own: 'segment_contacts.segment_id', other: 'segment_contacts.contact_id' },
  contacts: { own: 'segment_contacts.contact_id', other: 'segment_contacts.segment_id' },
} as const;

/**
 * Who is on a list, read from either side: the project's `segments` a contact (`otherId`) is listed on, or the
 * project's `contacts` listed on a segment (`otherId`), each as its own row.
 */
function listed(
  db: Kysely<Database>,
  side: 'segments',
  projectId: string,
  otherId: string,
): SelectQueryBuilder<Database, 'segment_contacts' | 'segments', Row<'segments'>>;
function listed(
  db: Kysely<Database>,
  side: 'contacts',
  projectId: string,
  otherId: string,
): SelectQueryBuilder<Database, 'segment_contacts' | 'contacts', Row<'contacts'>>;
function listed(
  db: Kysely<Database>,
  side: keyof typeof MEMBERSHIP,
  projectId: string,
  otherId: string,
): unknown {
  const { own, other } = MEMBERSHIP[side];
  // Kysely types a join one table at a time; both sides have the `id` and `project_id` this reads.
  const table = side as 'contacts';
  return db
    .selectFrom('segment_contacts')
    .innerJoin(table, `${table}.id`, own)
    .selectAll(table)
    .where(`${table}.project_id`, '=', projectId)
    .where(other, '=', otherId);
}

export function createSegmentRepo(db: Kysely<Database>, engine: Engine) {
  const select = (projectId: string, via: Kysely<Database> = db) =>
    via.selectFrom('segments').selectAll().where('project_id', '=', projectId);

  return {
    async insert(record: SegmentRecord, transaction: Transaction): Promise<void> {
      await transaction.db.insertInto('segments').values(toRow(record)).execute();
    },

    /** In `transaction` when given (on SQLite a read beside an open transaction waits for it). */
    async find(projectId: string, id: string, transaction?: Transaction): Promise<SegmentRecord | undefined> {
      const row = await select(projectId, transaction?.db).where('id', '=', id).executeTakeFirst();
      return row && toRecord(row);
    },

    async list(projectId: string, page: PageRequest): Promise<Page<SegmentRecord>> {
      const query = select(projectId);
      return mapPage(await pageOfQuery(query, page), toRecord);
    },

    /** The segments a contact is in, newest first. */
    async ofContact(projectId: string, contactId: string, page: PageRequest): Promise<Page<SegmentRecord>> {
      const query = listed(db, 'segments', projectId, contactId);
      return mapPage(await pageOfQuery(query, page, 'segments.id'), toRecord);
    },

    /** The segments a contact is in, oldest first, read in `transaction`. */
    async idsOf(contactId: string, transaction: Transaction): Promise<string[]> {
      const rows = await transaction.db
        .selectFrom('segment_contacts')
        .select('segment_id')
        .where('contact_id', '=', contactId)
        .orderBy('segment_id', 'asc')
        .execute();
      return rows.map((row) => row.segment_id);
    },

    /**
     * The members of a segment, by contact id ascending, after `afterContactId` (keyset; null from the first),
     * at most `limit`: how a broadcast reads its audience a batch at a time, never the whole segment at once.
     * The one read of "who is in a segment" a send makes, for both kinds: a list's contacts (its rows in
     * segment_contacts), a filter's (the project's contacts that match, on contacts_project_id).
     */
    async membersAfter(
      audience: Audience,
      afterContactId: string | null,
      limit: number,
    ): Promise<ContactRecord[]> {
      const { projectId, segmentId, filter } = audience;
      if (filter !== null) {
        const matching = db
          .selectFrom('contacts')
          .selectAll('contacts')
          .where('contacts.project_id', '=', projectId)
          .where(audienceWhere(engine, filter));
        return contactsAfter(matching, 'contacts.id', afterContactId, limit);
      }
      // By the list's own column: its primary key (segment_id, contact_id) gives the order without a sort.
      const members = listed(db, 'contacts', projectId, segmentId);
      return contactsAfter(members, 'segment_contacts.contact_id', afterContactId, limit);
    },

    /** False when the segment is gone. */
    async update(
      projectId: string,
      id: string,
      changes: { name: string; filter: SegmentFilter | null; updatedAt: string },
      transaction: Transaction,
    ): Promise<boolean> {
      return updateProjectRow(transaction.db, 'segments', projectId, id, {
        name: changes.name,
        filter: changes.filter === null ? null : JSON.stringify(changes.filter),
        updated_at: changes.updatedAt,
      });
    },

    /** Its memberships go with it (the foreign key's cascade); the contacts stay. */
    async delete(projectId: string, id: string, transaction: Transaction): Promise<boolean> {
      return deleteProjectRow(transaction.db, 'segments', projectId, id);
    },

    /** The segments each of these contacts is in, oldest first, read in `transaction`. */
    async idsOfMany(contactIds: readonly string[], transaction: Transaction): Promise<Map<string, string[]>> {
      const found = new Map<string, string[]>(contactIds.map((id) => [id, []]));
      if (contactIds.length === 0) return found;
      const rows = await transaction.db
        .selectFrom('segment_contacts')
        .select(['contact_id', 'segment_id'])
        .where('contact_id', 'in', contactIds)
        .orderBy('segment_id', 'asc')
        .execute();
      for (const row of rows) found.get(row.contact_id)?.push(row.segment_id);
      return found;
    },

    /** Adds each contact to each segment (those in one already stay as they are). */
    async addContacts(
      segmentIds: readonly string[],
      contactIds: readonly string[],
      createdAt: string,
      transaction: Transaction,
    ): Promise<void> {
      if (segmentIds.length === 0 || contactIds.length === 0) return;
      await transaction.db
        .insertInto('segment_contacts')
        .values(
          segmentIds.flatMap((segmentId) =>
            contactIds.map((contactId) => ({
              segment_id: segmentId,
              contact_id: contactId,
              created_at: createdAt,
            })),
          ),
        )
        .onConflict((conflict) => conflict.columns(['segment_id', 'contact_id']).doNothing())
        .execute();
    },

    /** False when the contact was in the segment already (nothing written). */
    async addContact(
      segmentId: string,
      contactId: string,
      createdAt: string,
      transaction: Transaction,
    ): Promise<boolean> {
      const result = await transaction.db
        .insertInto('segment_contacts')
        .values({ segment_id: segmentId, contact_id: contactId, created_at: createdAt })
        .onConflict((conflict) => conflict.columns(['segment_id', 'contact_id']).doNothing())
        .executeTakeFirst();
      return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
    },

    /** False when the contact was not in the segment. */
    async removeContact(segmentId: string, contactId: string, transaction: Transaction): Promise<boolean> {
      const result = await transaction.db
        .deleteFrom('segment_contacts')
        .where('segment_id', '=', segmentId)
        .where('contact_id', '=', contactId)
        .executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },
  };
}

export type SegmentRepo = ReturnType<typeof createSegmentRepo>;
