import type { Kysely } from 'kysely';
import type { Database, Row } from '../db/schema.ts';

export type IdempotencyRecord = Row<'idempotency_keys'>;

/** The idempotency_keys table: a project's keys, the hash of the request each came with, its saved answer. */
export function createIdempotencyRepo(db: Kysely<Database>) {
  const keyOf = (projectId: string, key: string) =>
    db.deleteFrom('idempotency_keys').where('project_id', '=', projectId).where('key', '=', key);

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
      await keyOf(projectId, key)
        .where('status_code', 'is', null)
        .where('created_at', '=', createdAt)
        .execute();
    },

    async deleteExpired(before: string): Promise<void> {
      await db.deleteFrom('idempotency_keys').where('created_at', '<', before).execute();
    },

    /** Takes the key for a request; false when another request holds it already. */
    async claim(record: Pick<IdempotencyRecord, 'project_id' | 'key' | 'request_hash' | 'created_at'>) {
      const claimed = await db
        .insertInto('idempotency_keys')
        .values({ ...record, status_code: null, response_body: null })
        .onConflict((conflict) => conflict.columns(['project_id', 'key']).doNothing())
        .executeTakeFirst();
      return Number(claimed.numInsertedOrUpdatedRows ?? 0) > 0;
    },

    /** Gives the key up: its request's answer is not to be replayed (a retry may go through). */
    async release(projectId: string, key: string): Promise<void> {
      await keyOf(projectId, key).execute();
    },

    async saveResponse(projectId: string, key: string, statusCode: number, body: string): Promise<void> {
      await db
        .updateTable('idempotency_keys')
        .set({ status_code: statusCode, response_body: body })
        .where('project_id', '=', projectId)
        .where('key', '=', key)
        .execute();
    },
  };
}
