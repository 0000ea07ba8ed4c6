import { hostname } from 'node:os';
import type { WorkerLogger } from './lib/worker-logger.ts';
import { createDeliveryWorker, deliverySettingsFromConfig } from './modules/deliveries/deliveries.worker.ts';
import { createDomainCheckWorker } from './modules/domains/domains.worker.ts';
import { createContactImportWorker } from './modules/contacts/contact-imports.worker.ts';
import { createSendingWorkerFromConfig } from './modules/sending/sending.from-config.ts';
import { createReceivedAuthenticator } from './modules/inbound/received-authentication.ts';
import { createInboundWorker } from './modules/inbound/inbound.worker.ts';
import { createBroadcastWorker } from './modules/broadcasts/broadcasts.worker.ts';
import { createRunWorker } from './modules/automations/runs.worker.ts';
import { createReportAuthenticator } from './modules/inbound/report-authentication.ts';
import { returnPathFromConfig } from './modules/emails/return-path.ts';
import type { Services } from './services.ts';
import type { QueueName } from './queue/running-workers.ts';
import type { QueueWorker } from './queue/runtime.ts';

export interface RunningWorkers {
  /** Stops claiming, lets attempts in flight finish (bounded), and gives back what is still held. */
  stop(): Promise<void>;
}

/**
 * The background work of a process: sending email, reading received reports, checking domains and delivering
 * webhooks, on the process's services. Run in the API process, or alone (`postwire worker`); the services'
 * notifiers wake them when this process's API or inbound listener stores work.
 */
export async function startWorkers(services: Services, logger: WorkerLogger): Promise<RunningWorkers> {
  const { config, database, clock, secretBox, events, notifiers } = services;
  const deadAfterMs = config.workerDeadAfterMs;
  const { repositories } = services;
  const delivery = createDeliveryWorker({
    database,
    webhooks: repositories.webhooks,
    clock,
    secretBox,
    resolver: services.resolver,
    allowPrivateUrls: config.allowPrivateUrls,
    settings: deliverySettingsFromConfig(config),
    notifier: notifiers.delivery,
    logger,
    deadAfterMs,
    metrics: services.metrics,
  });
  const sending = createSendingWorkerFromConfig({
    config,
    secretBox,
    database,
    clock,
    events,
    notifier: notifiers.send,
    logger,
    domains: services.domains,
    repositories,
    onThrottle: (throttled) => services.metrics.destinationThrottled(throttled.rule.kind, throttled.provider),
  });
  const domainChecks = createDomainCheckWorker({
    database,
    clock,
    domains: services.domains,
    settings: config.domainChecks,
    logger,
    deadAfterMs,
  });
  const broadcastFanOut = createBroadcastWorker({
    database,
    clock,
    fanOut: services.fanOut,
    notifier: notifiers.broadcast,
    logger,
    deadAfterMs,
  });
  const automationRuns = createRunWorker({
    database,
    clock,
    runner: services.automationRunner,
    notifier: notifiers.automationRuns,
    logger,
    deadAfterMs,
  });
  const bounceDomain = config.bounceDomain;
  const inbound = createInboundWorker({
    database,
    repositories,
    clock,
    events,
    returnPath: returnPathFromConfig(config, secretBox),
    authenticator: createReportAuthenticator({ resolveTxt: services.dns.resolveTxt }),
    receivedAuthenticator: createReceivedAuthenticator({
      dns: services.dns,
      hostname: config.mailHostname ?? hostname(),
    }),
    feedbackLoops: config.reportFeedbackLoops,
    unsubscribeByMail: bounceDomain
      ? (address) => services.engagement.unsubscribeByMail(address, bounceDomain)
      : undefined,
    dmarcReports: {
      address: bounceDomain ? `dmarc@${bounceDomain}` : undefined,
      readerOf: (address) => services.domains.dmarcReportsReader(address),
      store: services.dmarc.store,
    },
    notifier: notifiers.inbound,
    reportParsing: config.reportParsing,
    metrics: services.metrics,
    logger,
    deadAfterMs,
  });
  const contactImports = createContactImportWorker({
    database,
    clock,
    job: services.importJob,
    notifier: notifiers.contactImports,
    logger,
    deadAfterMs,
  });
  // Even with RETENTION off: the API logs have limits of their own.
  const retention = services.retention({
    retentionMs: config.retentionMs,
    logger,
    ...config.retentionPruning,
  });
  // Started in order, stopped in reverse: the producers of events stop before the delivery worker, so their
  // last outcomes' events are still picked up.
  const started: Array<{ stop(): Promise<void> }> = [];
  const stopAll = async () => {
    for (const worker of started.reverse()) {
      services.runningWorkers.remove(worker);
      try {
        await worker.stop();
      } catch (error) {
        logger.error({ err: error }, 'a worker failed to stop');
      }
    }
  };
  try {
    const queues: Array<[QueueName, QueueWorker]> = [
      ['deliveries', delivery],
      ['sending', sending],
      ['inbound', inbound],
      ['domain_checks', domainChecks],
      ['broadcasts', broadcastFanOut],
      ['contact_imports', contactImports],
    ];
    for (const [queue, worker] of queues) {
      await worker.start();
      started.push(worker);
      // From now on /readyz expects its heartbeats and /metrics reads its attempts in flight.
      services.runningWorkers.add({ queue, worker });
    }
    // Not among /readyz's and /metrics' queues (QUEUE_NAMES): a run that waits is not work the process owes now.
    await automationRuns.start();
    started.push(automationRuns);
    retention.start();
    started.push(retention);
    // The reputation breaker's check of every project's rates (a read of the daily counts).
    started.push(services.reputation.start(logger));
  } catch (error) {
    await stopAll();
    throw error;
  }
  return { stop: stopAll };
}
