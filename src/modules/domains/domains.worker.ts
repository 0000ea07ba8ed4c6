import { DEFAULTS } from '../../config.ts';
import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createLongJobWorker } from '../../queue/long-job-worker.ts';
import { withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import { createDomainCheckQueueSource, createDomainQueue } from './domains.queue.ts';
import type { DomainService } from './domains.service.ts';

export interface DomainCheckSettings {
  /** Domains looked up at once by this worker (each check is a handful of DNS queries). */
  concurrency?: number;
  /** One check's lookups and write must end within this. */
  timeoutMs?: number;
  /** The fallback poll when no wake-up comes. */
  pollIntervalMs?: number;
}

export interface DomainCheckWorkerDeps extends QueueWorkerDeps {
  /** Looks a domain's records up and writes the result with its event (DomainService.check). */
  domains: Pick<DomainService, 'check'>;
  settings?: DomainCheckSettings;
}

/**
 * Re-checks sending domains on the queue runtime (src/queue/runtime.ts): each domain row is a job, due at its
 * `next_check_at` (DOMAIN_RECHECK after its last check). The check writes its own result, with the status
 * change and its `domain.verified` / `domain.failed` event in one transaction, and clears the lease; the
 * runtime only bounds the concurrency and gives back what a stopped or dead worker held.
 */
export function createDomainCheckWorker(deps: DomainCheckWorkerDeps): QueueWorker {
  // The configuration's domainChecks for what the caller leaves out.
  const settings = deps.settings ?? {};
  const concurrency = settings.concurrency ?? DEFAULTS.domainChecks.concurrency;
  const timeoutMs = settings.timeoutMs ?? DEFAULTS.domainChecks.timeoutMs;
  const defaults = withQueueDefaults(deps, settings);

  const source = createDomainCheckQueueSource(createDomainQueue(deps.database.db, deps.database.engine));

  return createLongJobWorker(deps, defaults, {
    name: 'domain check worker',
    channel: QUEUE_CHANNELS.domains,
    source,
    concurrency,
    attemptTimeoutMs: timeoutMs,
    leaseMs: 2 * timeoutMs + 2000,
    stopGraceMs: timeoutMs,
    async attempt(job) {
      try {
        await deps.domains.check(job.domain);
      } catch (error) {
        defaults.logger.error({ err: error, domain: job.domain.id }, 'domain check worker: the check failed');
      }
      return { checked: true };
    },
  });
}
