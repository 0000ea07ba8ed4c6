import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import type { Database } from '../../db/schema.ts';

// Delivery workers in this process are woken by a Notifier (src/lib/notifier.ts); these reach the others.

/** The PostgreSQL channel a committed event NOTIFYs and workers LISTEN on. */
export const DELIVERY_CHANNEL = 'postwire_deliveries';

/**
 * Tells delivery workers in other processes (PostgreSQL NOTIFY) that deliveries are due. Inside a
 * transaction PostgreSQL delivers it at commit, so they wake only for committed work. SQLite has no
 * such channel: workers in other processes find the rows by polling.
 */
export async function notifyOtherProcesses(db: Kysely<Database>, engine: Engine): Promise<void> {
  if (engine === 'postgres') await sql.raw(`NOTIFY ${DELIVERY_CHANNEL}`).execute(db);
}
