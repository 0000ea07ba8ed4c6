import type { Insertable, Kysely } from 'kysely';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { deleteProjectRow, updateProjectRow } from '../../db/project-rows.ts';

export type Subscription = 'opt_in' | 'opt_out';

export interface TopicRecord {
  id: string;
  projectId: string;
  name: string;
  description: string | null;
  defaultSubscription: Subscription;
  createdAt: string;
  updatedAt: string;
}

/** A topic and a contact's subscription to it: their own choice, or the topic's default. */
export interface ContactTopicRecord {
  topic: TopicRecord;
  subscription: Subscription;
  /** False when it is the topic's default (the contact made no choice). */
  chosen: boolean;
}

const toRecord = (row: Row<'topics'>): TopicRecord => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  description: row.description,
  defaultSubscription: row.default_subscription,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

/** The row an insert writes: toRecord the other way. */
const toRow = (record: TopicRecord): Insertable<Database['topics']> => ({
  id: record.id,
  project_id: record.projectId,
  name: record.name,
  description: record.description,
  default_subscription: record.defaultSubscription,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** The topics and contact_topics tables: what contacts subscribe to, and their choices. */
export function createTopicRepo(db: Kysely<Database>) {
  const select = (projectId: string, via: Kysely<Database> = db) =>
    via.selectFrom('topics').selectAll().where('project_id', '=', projectId);

  /** Writes the same choices for each of these contacts, each replacing the one it had for that topic. */
  async function chooseFor(
    contactIds: readonly string[],
    choices: ReadonlyArray<{ topicId: string; subscription: Subscription }>,
    updatedAt: string,
    transaction: Transaction,
  ): Promise<void> {
    if (choices.length === 0 || contactIds.length === 0) return;
    await transaction.db
      .insertInto('contact_topics')
      .values(
        contactIds.flatMap((contactId) =>
          choices.map((choice) => ({
            contact_id: contactId,
            topic_id: choice.topicId,
            subscription: choice.subscription,
            updated_at: updatedAt,
          })),
        ),
      )
      .onConflict((conflict) =>
        conflict.columns(['contact_id', 'topic_id']).doUpdateSet((eb) => ({
          subscription: eb.ref('excluded.subscription'),
          updated_at: eb.ref('excluded.updated_at'),
        })),
      )
      .execute();
  }

  return {
    async insert(record: TopicRecord, transaction: Transaction): Promise<void> {
      await transaction.db.insertInto('topics').values(toRow(record)).execute();
    },

    /** In `transaction` when given (on SQLite a read beside an open transaction waits for it). */
    async find(projectId: string, id: string, transaction?: Transaction): Promise<TopicRecord | undefined> {
      const row = await select(projectId, transaction?.db).where('id', '=', id).executeTakeFirst();
      return row && toRecord(row);
    },

    /** Of these ids, the project's topics (in `transaction`, to write choices for them next). */
    async findMany(
      projectId: string,
      ids: readonly string[],
      transaction: Transaction,
    ): Promise<TopicRecord[]> {
      if (ids.length === 0) return [];
      const rows = await select(projectId, transaction.db).where('id', 'in', ids).execute();
      return rows.map(toRecord);
    },

    async list(projectId: string, page: PageRequest): Promise<Page<TopicRecord>> {
      const query = select(projectId);
      return mapPage(await pageOfQuery(query, page), toRecord);
    },

    /** Every topic of the project, newest first, with the contact's subscription to each. */
    async ofContact(
      projectId: string,
      contactId: string,
      page: PageRequest,
    ): Promise<Page<ContactTopicRecord>> {
      const query = db
        .selectFrom('topics')
        .leftJoin('contact_topics', (join) =>
          join
            .onRef('contact_topics.topic_id', '=', 'topics.id')
            .on('contact_topics.contact_id', '=', contactId),
        )
        .selectAll('topics')
        .select('contact_topics.subscription as choice')
        .where('topics.project_id', '=', projectId);
      return mapPage(await pageOfQuery(query, page, 'topics.id'), ({ choice, ...row }) => {
        const topic = toRecord(row);
        return { topic, subscription: choice ?? topic.defaultSubscription, chosen: choice !== null };
      });
    },

    /** Writes the fields that change (name, description); false when the topic is gone. */
    async update(record: TopicRecord, transaction: Transaction): Promise<boolean> {
      return updateProjectRow(transaction.db, 'topics', record.projectId, record.id, {
        name: record.name,
        description: record.description,
        updated_at: record.updatedAt,
      });
    },

    /** Contacts' choices for it go with it (the foreign key's cascade). */
    async delete(projectId: string, id: string, transaction: Transaction): Promise<boolean> {
      return deleteProjectRow(transaction.db, 'topics', projectId, id);
    },

    /** A contact's own choices for these topics (a topic without one is absent), read in `transaction`. */
    async choicesOf(
      contactId: string,
      topicIds: readonly string[],
      transaction: Transaction,
    ): Promise<Map<string, Subscription>> {
      const rows = await transaction.db
        .selectFrom('contact_topics')
        .select(['topic_id', 'subscription'])
        .where('contact_id', '=', contactId)
        .where('topic_id', 'in', topicIds)
        .execute();
      return new Map(rows.map((row) => [row.topic_id, row.subscription]));
    },

    /** Of these contacts, the ones that made a choice for the topic, with it (a broadcast's batch). */
    async choicesFor(
      topicId: string,
      contactIds: readonly string[],
      transaction?: Transaction,
    ): Promise<Map<string, Subscription>> {
      if (contactIds.length === 0) return new Map();
      const rows = await (transaction?.db ?? db)
        .selectFrom('contact_topics')
        .select(['contact_id', 'subscription'])
        .where('topic_id', '=', topicId)
        .where('contact_id', 'in', [...contactIds])
        .execute();
      return new Map(rows.map((row) => [row.contact_id, row.subscription]));
    },

    /** Writes a contact's choices, each replacing the one it had for that topic. */
    async choose(
      contactId: string,
      choices: ReadonlyArray<{ topicId: string; subscription: Subscription }>,
      updatedAt: string,
      transaction: Transaction,
    ): Promise<void> {
      await chooseFor([contactId], choices, updatedAt, transaction);
    },

    chooseFor,
  };
}

export type TopicRepo = ReturnType<typeof createTopicRepo>;
