import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.ts';

/** Where workers say they are alive, and find the ones that stopped saying it. */
export interface HeartbeatStore {
  /** Records that `workerId`, a worker of `queue`, is alive at `now`. */
  beat(workerId: string, queue: string, now: Date): Promise<void>;
  /** The workers of `queue` whose last heartbeat is older than `before`: dead, or stalled as good as dead. */
  dead(queue: string, before: Date): Promise<string[]>;
  /** Forgets these workers (they stopped, or their jobs were given back). */
  forget(workerIds: readonly string[]): Promise<void>;
}

/** The queue_workers table. */
export function createHeartbeatRepo(db: Kysely<Database>): HeartbeatStore {
  return {
    async beat(workerId, queue, now) {
      const heartbeatAt = now.toISOString();
      await db
        .insertInto('queue_workers')
        .values({ id: workerId, queue, heartbeat_at: heartbeatAt })
        .onConflict((conflict) => conflict.column('id').doUpdateSet({ heartbeat_at: heartbeatAt }))
        .execute();
    },

    async dead(queue, before) {
      const rows = await db
        .selectFrom('queue_workers')
        .select('id')
        .where('queue', '=', queue)
        .where('heartbeat_at', '<', before.toISOString())
        .execute();
      return rows.map((row) => row.id);
    },

    async forget(workerIds) {
      if (workerIds.length === 0) return;
      await db
        .deleteFrom('queue_workers')
        .where('id', 'in', [...workerIds])
        .execute();
    },
  };
}
