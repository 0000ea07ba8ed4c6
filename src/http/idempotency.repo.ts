import type { Kysely } from 'kysely';
import type { Database, Row } from '../db/schema.ts';
import type { Transaction } from '../db/transaction.ts';

export type IdempotencyRecord = Row<'idempotency_keys'>;
type NewKey = Pick<IdempotencyRecord, 'project_id' | 'key' | 'request_hash' | 'created_at'>;

/** The idempotency_keys table: a project's keys, the hash of the request each came with, its saved answer. */
export function createIdempotencyRepo(db: Kysely<Database>) {
  const insertKey = async (
    record: NewKey,
    statusCode: number | null,
    body: string | null,
    transaction: Transaction | undefined,
  ) => {
    const inserted = await (transaction?.db ?? db)
      .insertInto('idempotency_keys')
      .values({ ...record, status_code: statusCode, response_body: body })
      .onConflict((conflict) => conflict.columns(['project_id', 'key']).doNothing())
      .executeTakeFirst();
    return Number(inserted.numInsertedOrUpdatedRows ?? 0) > 0;
  };

  return {
    find(projectId: string, key: string): Promise<IdempotencyRecord | undefined> {
      return db
        .selectFrom('idempotency_keys')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('key', '=', key)
        .executeTakeFirst();
    },

    /** Drops a key whose request never finished, if it is still that one (no other retry took it over first). */
    async dropAbandoned(projectId: string, key: string, createdAt: string): Promise<void> {
      await db
        .deleteFrom('idempotency_keys')
        .where('project_id', '=', projectId)
        .where('key', '=', key)
        .where('status_code', 'is', null)
        .where('created_at', '=', createdAt)
        .execute();
    },

    async deleteExpired(before: string): Promise<void> {
      await db.deleteFrom('idempotency_keys').where('created_at', '<', before).execute();
    },

    /**
     * Takes the key for a request, in `transaction`: the one that does the request's work; false when another
     * request has it. On PostgreSQL, while another uncommitted transaction holds the key, this waits for it.
     */
    claim(record: NewKey, transaction: Transaction): Promise<boolean> {
      return insertKey(record, null, null, transaction);
    },

    /** Saves an answer given without a claim (a refusal whose work rolled back); false when a key was there. */
    saveAnswer(record: NewKey, statusCode: number, body: string): Promise<boolean> {
      return insertKey(record, statusCode, body, undefined);
    },

    /** Saves the answer of the request that claimed the key, in the same `transaction`. */
    async saveResponse(
      projectId: string,
      key: string,
      statusCode: number,
      body: string,
      transaction: Transaction,
    ): Promise<void> {
      await transaction.db
        .updateTable('idempotency_keys')
        .set({ status_code: statusCode, response_body: body })
        .where('project_id', '=', projectId)
        .where('key', '=', key)
        .execute();
    },
  };
}
