import type { Engine } from '../../db/connection.ts';
import type { PageRequest } from '../../db/pagination.ts';
import type { DeliveryStatus } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type {
  AttemptRow,
  DeliveryRecord,
  DeliveryRepo,
  DeliveryWithType,
  RequeueRequest,
} from './deliveries.repo.ts';
import { type DeliveryView, toDeliveryView } from './deliveries.schemas.ts';
import { type Notifier, notifyOtherProcesses, QUEUE_CHANNELS } from '../../queue/notifier.ts';

export interface DeliveryServiceDeps {
  repo: DeliveryRepo;
  engine: Engine;
  notifier: Notifier;
}

/** What became of a delivery's first attempt while someone waited for it. */
export interface FirstAttempt {
  /** The delivery as it stands; undefined when it is gone (its webhook was deleted meanwhile). */
  delivery: DeliveryRecord | undefined;
  /** The first attempt; undefined when none was made in time, or none will be (the delivery failed unsent). */
  attempt: AttemptRow | undefined;
}

/** How often waitForFirstAttempt looks: one primary-key read, cheap next to an HTTP attempt. */
const POLL_INTERVAL_MS = 25;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The delivery log as the API shows it, and the operations on queued deliveries that are not the worker's:
 * waiting for an attempt, and putting failed deliveries back in the queue.
 */
export function createDeliveryService({ repo, engine, notifier }: DeliveryServiceDeps) {
  /** Views of deliveries with their attempt logs, read in one query for all of them. */
  async function views(projectId: string, rows: readonly DeliveryWithType[]): Promise<DeliveryView[]> {
    const attempts = await repo.listAttempts(projectId, rows);
    return rows.map((row) => toDeliveryView(row, row.event_type, attempts.get(row.id) ?? []));
  }

  return {
    views,

    async listForEvent(projectId: string, eventId: string, eventType: string): Promise<DeliveryView[]> {
      const rows = await repo.listForEvent(projectId, eventId);
      return views(
        projectId,
        rows.map((row) => ({ ...row, event_type: eventType })),
      );
    },

    async listForWebhook(projectId: string, webhookId: string, page: PageRequest, status?: DeliveryStatus) {
      const result = await repo.listForWebhook(projectId, webhookId, page, status);
      return { items: await views(projectId, result.items), hasMore: result.hasMore };
    },

    async getForWebhook(projectId: string, webhookId: string, id: string): Promise<DeliveryView | undefined> {
      const row = await repo.findForWebhook(projectId, webhookId, id);
      return row && (await views(projectId, [row]))[0];
    },

    /**
     * Waits up to `waitMs` for the delivery's first attempt, made by whichever worker claims it (in this
     * process or another), by reading the delivery row. There is no cross-process signal for a recorded
     * attempt, and a poll every 25 ms of one row costs little next to the attempt itself.
     */
    async waitForFirstAttempt(projectId: string, deliveryId: string, waitMs: number): Promise<FirstAttempt> {
      const deadline = performance.now() + waitMs;
      for (;;) {
        const delivery = await repo.find(projectId, deliveryId);
        if (!delivery) return { delivery, attempt: undefined };
        if (delivery.attempts > 0 || delivery.status !== 'pending') {
          const attempts = await repo.listAttempts(projectId, [delivery]);
          return { delivery, attempt: attempts.get(deliveryId)?.[0] };
        }
        const left = deadline - performance.now();
        if (left <= 0) return { delivery, attempt: undefined };
        await sleep(Math.min(POLL_INTERVAL_MS, left));
      }
    },

    /**
     * Re-queues a webhook's failed deliveries created since `since` in `transaction`; the workers wake at its
     * commit. Returns how many.
     */
    async requeueFailed(transaction: Transaction, options: RequeueRequest): Promise<number> {
      const count = await repo.requeueFailed(options, transaction);
      if (count > 0) {
        await notifyOtherProcesses(transaction.db, engine, QUEUE_CHANNELS.deliveries);
        transaction.afterCommit(() => notifier.notify());
      }
      return count;
    },
  };
}

export type DeliveryService = ReturnType<typeof createDeliveryService>;
