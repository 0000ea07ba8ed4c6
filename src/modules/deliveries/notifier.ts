import { type Kysely, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import type { Database } from '../../db/schema.ts';

/**
 * Wakes delivery workers in this process when new deliveries are due, so they need not wait for their
 * next poll. Other processes learn about new work through PostgreSQL NOTIFY (or their poll on SQLite).
 */
export interface DeliveryNotifier {
  notify(): void;
  /** Calls `listener` on every notify; returns the function that stops it. */
  subscribe(listener: () => void): () => void;
}

export function createDeliveryNotifier(): DeliveryNotifier {
  const listeners = new Set<() => void>();
  return {
    notify() {
      for (const listener of listeners) listener();
    },
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

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
