import type { Kysely } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { jsonMemberIs, textStartsWith } from '../../db/engine/sql.ts';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, Row } from '../../db/schema.ts';
import type { PropertyValue } from './contact-properties.repo.ts';
import { type AudienceFilter, audienceWhere, subscribedTo } from './contact-filter.ts';
import type { Transaction } from '../../db/transaction.ts';
import { deleteProjectRow, updateProjectRow } from '../../db/project-rows.ts';

export interface ContactRecord {
  id: string;
  projectId: string;
  /** Lowercased. */
  email: string;
  firstName: string | null;
  lastName: string | null;
  unsubscribed: boolean;
  /** Property values by their property's id (`cprop_…`), as stored: a deleted property's may linger. */
  values: Record<string, PropertyValue>;
  createdAt: string;
  updatedAt: string;
}

export interface ContactFilter {
  unsubscribed?: boolean | undefined;
  /** Lowercased. */
  emailPrefix?: string | undefined;
  /** A property (by id) holding a value. */
  property?: { id: string; value: PropertyValue } | undefined;
  /** In this segment: on its list, or matching its filter (resolved for this read). */
  segment?: { id: string; filter: AudienceFilter | null } | undefined;
  /** Subscribed to this topic: by their own choice, or without one when the topic's default is opt-in. */
  topic?: { id: string; defaultSubscription: 'opt_in' | 'opt_out' } | undefined;
}

/** A contacts row as a record (also read by the segments repository's members). */
export const toContactRecord = (row: Row<'contacts'>): ContactRecord => ({
  id: row.id,
  projectId: row.project_id,
  email: row.email,
  firstName: row.first_name,
  lastName: row.last_name,
  unsubscribed: Boolean(row.unsubscribed),
  values: JSON.parse(row.properties) as Record<string, PropertyValue>,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

const toRow = (record: ContactRecord) => ({
  id: record.id,
  project_id: record.projectId,
  email: record.email,
  first_name: record.firstName,
  last_name: record.lastName,
  unsubscribed: record.unsubscribed,
  properties: JSON.stringify(record.values),
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** The contacts table. Writes go through the caller's transaction: each emits its event in it. */
export function createContactRepo(db: Kysely<Database>, engine: Engine) {
  const select = (via: Kysely<Database>, projectId: string) =>
    via.selectFrom('contacts').selectAll().where('project_id', '=', projectId);

  /** The list's filters on a select of the project's contacts (each served by an index: migrations 0029–0034). */
  function filtered(query: ReturnType<typeof select>, filter: ContactFilter): ReturnType<typeof select> {
    if (filter.unsubscribed !== undefined) query = query.where('unsubscribed', '=', filter.unsubscribed);
    if (filter.emailPrefix !== undefined) {
      query = query.where(textStartsWith(engine, 'email', filter.emailPrefix));
    }
    if (filter.property) {
      const { id, value } = filter.property;
      query = query.where(jsonMemberIs(engine, 'properties', id, JSON.stringify(value)));
    }
    const { segment, topic } = filter;
    if (segment?.filter) query = query.where(audienceWhere(engine, segment.filter));
    else if (segment) {
      const segmentId = segment.id;
      query = query.where((eb) =>
        eb.exists(
          eb
            .selectFrom('segment_contacts')
            .select('segment_contacts.contact_id')
            .whereRef('segment_contacts.contact_id', '=', 'contacts.id')
            .where('segment_contacts.segment_id', '=', segmentId),
        ),
      );
    }
    if (topic) query = query.where((eb) => subscribedTo(eb, topic.id, topic.defaultSubscription));
    return query;
  }

  return {
    /** False when the project already has a contact with this address (nothing written). */
    async insert(record: ContactRecord, transaction: Transaction): Promise<boolean> {
      const result = await transaction.db
        .insertInto('contacts')
        .values(toRow(record))
        .onConflict((conflict) => conflict.columns(['project_id', 'email']).doNothing())
        .executeTakeFirst();
      return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
    },

    /** Inserts contacts whose addresses the project has not (an import's batch); answers the ids inserted. */
    async insertMany(records: readonly ContactRecord[], transaction: Transaction): Promise<Set<string>> {
      if (records.length === 0) return new Set();
      const rows = await transaction.db
        .insertInto('contacts')
        .values(records.map(toRow))
        .onConflict((conflict) => conflict.columns(['project_id', 'email']).doNothing())
        .returning('id')
        .execute();
      return new Set(rows.map((row) => row.id));
    },

    /** The project's contacts with these (lowercased) addresses, read in `transaction`. */
    async findByEmails(
      projectId: string,
      emails: readonly string[],
      transaction: Transaction,
    ): Promise<ContactRecord[]> {
      if (emails.length === 0) return [];
      const rows = await select(transaction.db, projectId).where('email', 'in', emails).execute();
      return rows.map(toContactRecord);
    },

    /** By id or by (lowercased) email; in `transaction` when given (one that writes it next). */
    async find(
      projectId: string,
      column: 'id' | 'email',
      value: string,
      transaction?: Transaction,
    ): Promise<ContactRecord | undefined> {
      const row = await select(transaction?.db ?? db, projectId)
        .where(column, '=', value)
        .executeTakeFirst();
      return row && toContactRecord(row);
    },

    /** A contact by id alone, whatever its project (the preference page's token names only the contact). */
    async byId(id: string): Promise<ContactRecord | undefined> {
      const row = await db.selectFrom('contacts').selectAll().where('id', '=', id).executeTakeFirst();
      return row && toContactRecord(row);
    },

    /**
     * Takes the contact's row lock for the rest of `transaction` (a write that changes nothing: the portable
     * way to lock a row) and reads it under the lock; undefined when there is none.
     */
    async lock(
      projectId: string,
      column: 'id' | 'email',
      value: string,
      transaction: Transaction,
    ): Promise<ContactRecord | undefined> {
      const via = transaction.db;
      const result = await via
        .updateTable('contacts')
        .set((eb) => ({ updated_at: eb.ref('updated_at') }))
        .where('project_id', '=', projectId)
        .where(column, '=', value)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) return undefined;
      const row = await select(via, projectId).where(column, '=', value).executeTakeFirst();
      return row && toContactRecord(row);
    },

    async list(projectId: string, page: PageRequest, filter: ContactFilter): Promise<Page<ContactRecord>> {
      return mapPage(await pageOfQuery(filtered(select(db, projectId), filter), page), toContactRecord);
    },

    /** Up to `limit` of the filter's contacts after `afterId`, oldest first: a keyset page of an export. */
    async pageAfter(
      projectId: string,
      filter: ContactFilter,
      afterId: string | undefined,
      limit: number,
    ): Promise<ContactRecord[]> {
      let query = filtered(select(db, projectId), filter);
      if (afterId !== undefined) query = query.where('id', '>', afterId);
      const rows = await query.orderBy('id', 'asc').limit(limit).execute();
      return rows.map(toContactRecord);
    },

    /** Writes every field but the id, project, email and creation time; false when the contact is gone. */
    async update(record: ContactRecord, transaction: Transaction): Promise<boolean> {
      const {
        id: _id,
        project_id: _project,
        email: _email,
        created_at: _created,
        ...changes
      } = toRow(record);
      return updateProjectRow(transaction.db, 'contacts', record.projectId, record.id, changes);
    },

    async delete(projectId: string, id: string, transaction: Transaction): Promise<boolean> {
      return deleteProjectRow(transaction.db, 'contacts', projectId, id);
    },
  };
}

export type ContactRepo = ReturnType<typeof createContactRepo>;
