import type { Transaction } from '../../db/transaction.ts';
import type { WebhookRepo } from '../webhooks/webhooks.repo.ts';

// How delivery outcomes bear on their webhooks' health (last_success_at, the failure streak that disables a
// webhook), written through the webhooks' repository in the transaction of the deliveries queue's outcome write
// (deliveries.queue.ts).

/** How an attempt bears on its webhook's health. */
export type AttemptHealth =
  { ok: true } | { ok: false; disableNow?: string | undefined; disableAfterMs: number };

/** An outcome as its webhook's health reads it. */
interface HealthOutcome {
  delivery: { webhookId: string };
  now: string;
  /** Absent when no attempt was made. */
  health?: AttemptHealth | undefined;
}

/** last_success_at is kept to this precision (see recordOutcome). */
const SUCCESS_RECORD_INTERVAL_MS = 60_000;
/** Webhooks whose last recorded success a worker remembers; past it, it forgets them all. */
const SUCCESS_CACHE_SIZE = 10_000;

/** The webhooks' writes the health makes. */
export type HealthWrites = Pick<WebhookRepo, 'recordSuccess' | 'recordFailures'>;

/** The health writes of one worker's outcomes, through the webhooks' repository. */
export function createWebhookHealth(webhooks: HealthWrites) {
  /**
   * When this worker last recorded a success per webhook, and no failure since: within the interval, the
   * success write would only be needed to clear a failure streak another worker started, and waiting up to a
   * minute for that changes nothing (a streak disables a webhook after days). Spares a statement per batch.
   */
  const successRecorded = new Map<string, number>();

  return {
    /** Whether an outcome has a health write to make: not a success recorded within the interval. */
    needsWrite: (outcome: HealthOutcome): boolean =>
      outcome.health !== undefined &&
      !(
        outcome.health.ok &&
        Date.parse(outcome.now) - (successRecorded.get(outcome.delivery.webhookId) ?? -Infinity) <
          SUCCESS_RECORD_INTERVAL_MS
      ),

    /**
     * How the held outcomes bear on their webhooks' health; an outcome that disabled its webhook says so in
     * its result. Each webhook's outcomes in order, lock order fixed by webhook id so that workers writing
     * outcomes for the same webhooks at once do not deadlock.
     */
    async write(
      outcomes: readonly HealthOutcome[],
      results: Array<{ held: boolean; disabledReason?: string | undefined }>,
      transaction: Transaction,
    ): Promise<void> {
      const byWebhook = new Map<string, number[]>();
      outcomes.forEach((outcome, index) => {
        if (!results[index]!.held || !outcome.health) return;
        const list = byWebhook.get(outcome.delivery.webhookId);
        if (list) list.push(index);
        else byWebhook.set(outcome.delivery.webhookId, [index]);
      });
      for (const webhookId of [...byWebhook.keys()].sort()) {
        const indexes = byWebhook.get(webhookId)!;
        // A run of successes (or of failures) in a row has the effect of its last (or first) one.
        let start = 0;
        while (start < indexes.length) {
          const ok = outcomes[indexes[start]!]!.health!.ok;
          let end = start;
          while (end + 1 < indexes.length && outcomes[indexes[end + 1]!]!.health!.ok === ok) end += 1;
          const run = indexes.slice(start, end + 1);
          const disabledReason = await recordHealth(
            webhooks,
            webhookId,
            run.map((index) => outcomes[index]!),
            successRecorded,
            transaction,
          );
          if (disabledReason) results[run.at(-1)!] = { held: true, disabledReason };
          start = end + 1;
        }
      }
    },
  };
}

/**
 * How a run of consecutive outcomes of one kind (all successes or all failures) bears on their webhook;
 * returns the reason when it disabled the webhook. Every attempt to a busy webhook would otherwise write its
 * row: the writes are skipped when they change nothing that matters (a failure streak already started; a
 * success recorded in the last minute), so concurrent outcomes for one webhook do not queue on its row lock.
 */
async function recordHealth(
  webhooks: HealthWrites,
  webhookId: string,
  run: readonly HealthOutcome[],
  successRecorded: Map<string, number>,
  transaction: Transaction,
): Promise<string | undefined> {
  const last = run.at(-1)!;
  const now = last.now;
  if (last.health!.ok) {
    const at = Date.parse(now);
    if (at - (successRecorded.get(webhookId) ?? -Infinity) < SUCCESS_RECORD_INTERVAL_MS) return undefined;
    if (successRecorded.size >= SUCCESS_CACHE_SIZE) successRecorded.clear();
    successRecorded.set(webhookId, at);
    const recentSince = new Date(at - SUCCESS_RECORD_INTERVAL_MS).toISOString();
    await webhooks.recordSuccess(webhookId, now, recentSince, transaction);
    return undefined;
  }

  successRecorded.delete(webhookId);
  const health = last.health as { ok: false; disableAfterMs: number };
  return webhooks.recordFailures(
    webhookId,
    {
      firstAt: run[0]!.now,
      now,
      disableNow: run.map((outcome) => (outcome.health as { disableNow?: string }).disableNow).find(Boolean),
      disableAfterMs: health.disableAfterMs,
    },
    transaction,
  );
}
