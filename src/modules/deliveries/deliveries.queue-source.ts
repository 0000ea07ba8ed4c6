import type { WorkerLogger } from '../../lib/worker-logger.ts';
import type { Attempted, QueueJob, QueueSource, RecordResult } from '../../queue/runtime.ts';
import type { MetricsRecorder } from '../metrics/instruments.ts';
import type { ClaimedDelivery, DeliveryOutcome, DeliveryQueue, OutcomeResult } from './deliveries.queue.ts';

// The deliveries queue as the queue runtime sees it (src/queue/runtime.ts): each pending delivery a job in its
// webhook's lane. The statements themselves are deliveries.queue.ts's.

/** A delivery as the runtime holds it: one row, in its webhook's lane. */
export type DeliveryJob = ClaimedDelivery & QueueJob;

const toJob = (delivery: ClaimedDelivery): DeliveryJob => ({
  ...delivery,
  lane: delivery.webhookId,
  rows: [delivery.id],
});

/**
 * The deliveries table as the runtime's queue: each pending delivery a job in its webhook's lane, claimed,
 * topped up, given back and recorded through the statements above. Its own function so the
 * runtime's tests (test/queue.test.ts) hold the runtime to this SQL, not to a model of it.
 */
export function createDeliveryQueueSource(deps: {
  queue: DeliveryQueue;
  logger: WorkerLogger;
  metrics: Pick<MetricsRecorder, 'webhookAttempts'>;
}): QueueSource<DeliveryJob, DeliveryOutcome> {
  const { queue: repo, logger, metrics } = deps;
  /** What the runtime learns of written outcomes (contract.ts RecordResult); the attempts counted. */
  function resultsOf(
    attempted: ReadonlyArray<Attempted<DeliveryJob, DeliveryOutcome>>,
    results: readonly OutcomeResult[],
  ): RecordResult[] {
    // Every attempt made counts, recorded as ours or not (a lost lease still recorded the attempt).
    let succeeded = 0;
    let failed = 0;
    for (const { outcome } of attempted) {
      if (!outcome.attempt) continue;
      if (outcome.status === 'succeeded') succeeded += 1;
      else failed += 1;
    }
    metrics.webhookAttempts(succeeded, failed);
    return results.map((result, index) => {
      if (result.disabledReason) {
        const webhook = attempted[index]!.job.webhookId;
        logger.warn({ webhook, reason: result.disabledReason }, 'webhook disabled');
      }
      const retryAt = attempted[index]!.outcome.nextAttemptAt;
      return { held: result.held, retryAt: retryAt === undefined ? undefined : Date.parse(retryAt) };
    });
  }

  return {
    claim: async (lease, request) =>
      (await repo.claim(lease, { limit: request.limit, excludeWebhookIds: request.excludeLanes })).map(toJob),
    claimLanes: async (lease, lanes) =>
      (
        await repo.claimForWebhooks(
          lease,
          lanes.map(({ lane, limit }) => ({ webhookId: lane, limit })),
        )
      ).map(toJob),
    release: (workerId, rows) => repo.release(workerId, rows),
    nextDueAt: async () => {
      const next = await repo.nextDueAt();
      return next === undefined ? undefined : Date.parse(next);
    },
    async record(attempted) {
      return resultsOf(attempted, await repo.recordOutcomes(attempted.map(({ outcome }) => outcome)));
    },
    async recordAndClaimLanes(attempted, lease, lanes) {
      const { results, claimed } = await repo.recordOutcomesAndTopUp(
        attempted.map(({ outcome }) => outcome),
        lease,
        lanes.map(({ lane, limit }) => ({ webhookId: lane, limit })),
      );
      return { results: resultsOf(attempted, results), claimed: claimed?.map(toJob) };
    },
  };
}
