import { type Kysely, sql } from 'kysely';
import type { Engine } from '../db/connection.ts';
import type { Database } from '../db/schema.ts';
import { otherProcessesWork } from './heartbeats.repo.ts';

/** The PostgreSQL channels the queues' workers LISTEN on, one per queue. */
export const QUEUE_CHANNELS = {
  deliveries: 'postwire_deliveries',
  sending: 'postwire_sending',
  inbound: 'postwire_inbound',
  domains: 'postwire_domains',
  contactImports: 'postwire_contact_imports',
  broadcasts: 'postwire_broadcasts',
  automationRuns: 'postwire_automation_runs',
} as const;

export type QueueChannel = (typeof QUEUE_CHANNELS)[keyof typeof QUEUE_CHANNELS];

/**
 * Wakes workers in this process when new work is due, so they need not wait for their next poll. Other
 * processes learn about new work through PostgreSQL NOTIFY (notifyOtherProcesses) or their poll on SQLite.
 */
export interface Notifier {
  notify(): void;
  /** Calls `listener` on every notify; returns the function that stops it. */
  subscribe(listener: () => void): () => void;
}

export function createNotifier(): Notifier {
  const listeners = new Set<() => void>();
  return {
    /** Call it once the new rows are committed (`transaction.afterCommit`): a worker woken before finds nothing. */
    notify() {
      for (const listener of listeners) listener();
    },
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

/**
 * Tells a queue's workers in other processes (PostgreSQL NOTIFY) that jobs are due. Inside a transaction
 * PostgreSQL delivers it at commit, so they wake only for committed work. SQLite has no such channel:
 * workers in other processes find the rows by polling.
 */
export async function notifyOtherProcesses(
  db: Kysely<Database>,
  engine: Engine,
  channel: QueueChannel,
): Promise<void> {
  if (engine === 'postgres') await notifyStatement(channel).execute(db);
}

/**
 * The NOTIFY for `channel`, carrying this connection's schema: channels are shared by the whole database,
 * and a listener ignores notifications from other schemas (another deployment's, see listenPostgres).
 */
export function notifyStatement(channel: QueueChannel) {
  return sql`select pg_notify(${channel}, current_schema())`;
}

/** How long whether other processes work a queue (otherProcessesWork), once read, is trusted. */
const OTHERS_READ_EVERY_MS = 1000;

/**
 * Wakes a queue's workers in other processes (PostgreSQL NOTIFY) when called after a commit, at most once per
 * few milliseconds: a NOTIFY inside the accepting transaction takes a database-wide lock at commit, which made
 * concurrent sends wait for each other. Only when another process has a worker of the queue (read at most once
 * a second): `postwire serve` alone wakes its own worker through its in-process notifier, and a NOTIFY was a
 * round trip per accepted group for nobody. Workers poll anyway, so a lost wake-up (a worker started within
 * the second) only delays a job (≤ 1 s). SQLite has no such channel: the function does nothing.
 */
export function createDeferredWake(db: Kysely<Database>, engine: Engine, channel: QueueChannel): () => void {
  let wakePending = false;
  let others = { work: true, readAt: -Infinity };
  async function wake(): Promise<void> {
    const now = performance.now();
    if (now - others.readAt >= OTHERS_READ_EVERY_MS) {
      others = { work: await otherProcessesWork(db, channel).catch(() => true), readAt: now };
    }
    if (others.work) await notifyStatement(channel).execute(db);
  }
  return () => {
    if (engine !== 'postgres' || wakePending) return;
    wakePending = true;
    setTimeout(() => {
      wakePending = false;
      wake().catch(() => undefined);
    }, 5).unref();
  };
}
