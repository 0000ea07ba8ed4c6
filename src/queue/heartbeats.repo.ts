import { type Kysely, sql } from 'kysely';
import { THIS_PROCESS } from './lease.ts';
import type { Database } from '../db/schema.ts';

/**
 * A worker silent this long is dead (WORKER_DEAD_AFTER `deadAfterMs`): it beats three times per period, so a
 * live one is never silent for more than a third of it, and one silent for two thirds is dead.
 */
export const silentWhenDead = (deadAfterMs: number) => (deadAfterMs * 2) / 3;

/** Where workers say they are alive, and find the ones that stopped saying it. */
export interface HeartbeatStore {
  /** Records that `workerId`, a worker of `queue`, is alive at `now`. */
  beat(workerId: string, queue: string, now: Date): Promise<void>;
  /** The workers of `queue` whose last heartbeat is older than `before`: dead, or stalled as good as dead. */
  dead(queue: string, before: Date): Promise<string[]>;
  /** Forgets these workers (they stopped, or their jobs were given back). */
  forget(workerIds: readonly string[]): Promise<void>;
  /** How many workers of `queue` are alive: `workerId` itself and the others heard from since `since`. */
  alive(workerId: string, queue: string, since: Date): Promise<number>;
}

/**
 * Whether a process other than this one has a worker of `queue` the table knows (alive, or dead and not yet
 * forgotten by the others' heartbeats): whether a wake-up of that queue has anyone to wake elsewhere.
 */
export async function otherProcessesWork(db: Kysely<Database>, queue: string): Promise<boolean> {
  const row = await db
    .selectFrom('queue_workers')
    .select('id')
    .where('queue', '=', queue)
    .where(sql<boolean>`substr(id, 1, ${THIS_PROCESS.length}) <> ${THIS_PROCESS}`)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
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

    async alive(workerId, queue, since) {
      const row = await db
        .selectFrom('queue_workers')
        .select((eb) => eb.fn.countAll<string | number>().as('others'))
        .where('queue', '=', queue)
        .where('heartbeat_at', '>=', since.toISOString())
        .where('id', '<>', workerId)
        .executeTakeFirst();
      return 1 + Number(row?.others ?? 0);
    },
  };
}
