import type { Config } from './config.ts';
import type { DatabaseHandle } from './db/connection.ts';
import type { Clock } from './lib/clock.ts';
import type { SecretBox } from './lib/crypto.ts';
import type { Resolver } from './lib/network-policy.ts';
import { createNotifier, type Notifier } from './queue/notifier.ts';
import type { WorkerLogger } from './lib/worker-logger.ts';
import { createDeliveryWorker, deliverySettingsFromConfig } from './modules/deliveries/deliveries.worker.ts';
import { createDns } from './lib/dns.ts';
import { createDomainService, domainSettingsFromConfig } from './modules/domains/domains.service.ts';
import { createDomainCheckWorker } from './modules/domains/domains.worker.ts';
import { createEventService } from './modules/events/events.service.ts';
import { createWebhookRepo } from './modules/webhooks/webhooks.repo.ts';
import { createSendingWorkerFromConfig } from './modules/sending/sending.worker.ts';
import { createInboundWorker } from './modules/inbound/inbound.worker.ts';
import { createReportAuthenticator } from './modules/inbound/report-authentication.ts';
import { returnPathFromConfig } from './modules/emails/return-path.ts';
import { createRetention } from './modules/retention/retention.ts';
import { createEngagementService } from './modules/engagement/engagement.service.ts';
import { createEngagementTokens } from './modules/engagement/tokens.ts';

export interface WorkersDeps {
  config: Config;
  database: DatabaseHandle;
  clock: Clock;
  secretBox: SecretBox;
  resolver: Resolver;
  logger: WorkerLogger;
  /** Shared with the app in the same process, so what the API writes is picked up at once. */
  deliveryNotifier?: Notifier | undefined;
  sendNotifier?: Notifier | undefined;
  /** Shared with this process's inbound listener, so a stored report is read at once. */
  inboundNotifier?: Notifier | undefined;
}

export interface RunningWorkers {
  /** Stops claiming, lets attempts in flight finish (bounded), and gives back what is still held. */
  stop(): Promise<void>;
}

/**
 * The background work of a process: sending email, reading received reports and delivering webhooks. Run in
 * the API process, or alone (`postwire worker`).
 */
export async function startWorkers(deps: WorkersDeps): Promise<RunningWorkers> {
  // The sending worker's events must wake this process's delivery worker too, not only other processes'.
  const deliveryNotifier = deps.deliveryNotifier ?? createNotifier();
  const delivery = createDeliveryWorker({
    database: deps.database,
    clock: deps.clock,
    secretBox: deps.secretBox,
    resolver: deps.resolver,
    allowPrivateUrls: deps.config.allowPrivateUrls,
    settings: deliverySettingsFromConfig(deps.config),
    notifier: deliveryNotifier,
    logger: deps.logger,
    deadAfterMs: deps.config.workerDeadAfterMs,
  });
  const events = createEventService({
    db: deps.database.db,
    engine: deps.database.engine,
    clock: deps.clock,
    notifier: deliveryNotifier,
    webhooks: createWebhookRepo(deps.database.db, deps.database.stamps),
  });
  const dns = createDns({ servers: deps.config.dnsServers });
  const domains = createDomainService({
    db: deps.database.db,
    engine: deps.database.engine,
    clock: deps.clock,
    secretBox: deps.secretBox,
    dns,
    events,
    settings: domainSettingsFromConfig(deps.config),
  });
  const sending = createSendingWorkerFromConfig({
    config: deps.config,
    secretBox: deps.secretBox,
    database: deps.database,
    clock: deps.clock,
    events,
    notifier: deps.sendNotifier,
    logger: deps.logger,
    domains,
  });
  const domainChecks = createDomainCheckWorker({
    database: deps.database,
    clock: deps.clock,
    domains,
    logger: deps.logger,
    deadAfterMs: deps.config.workerDeadAfterMs,
  });
  const engagement = createEngagementService({
    db: deps.database.db,
    clock: deps.clock,
    tokens: createEngagementTokens(deps.secretBox),
    events,
  });
  const bounceDomain = deps.config.bounceDomain;
  const inbound = createInboundWorker({
    database: deps.database,
    clock: deps.clock,
    events,
    returnPath: returnPathFromConfig(deps.config, deps.secretBox),
    authenticator: createReportAuthenticator({ resolveTxt: dns.resolveTxt }),
    feedbackLoops: deps.config.reportFeedbackLoops,
    unsubscribeByMail: bounceDomain
      ? (address) => engagement.unsubscribeByMail(address, bounceDomain)
      : undefined,
    notifier: deps.inboundNotifier,
    reportParsing: deps.config.reportParsing,
    logger: deps.logger,
    deadAfterMs: deps.config.workerDeadAfterMs,
  });
  const retention =
    deps.config.retentionMs === undefined
      ? undefined
      : createRetention({
          database: deps.database,
          clock: deps.clock,
          retentionMs: deps.config.retentionMs,
          logger: deps.logger,
        });
  // Started in order, stopped in reverse: the producers of events stop before the delivery worker, so their
  // last outcomes' events are still picked up.
  const started: Array<{ stop(): Promise<void> }> = [];
  const stopAll = async () => {
    for (const worker of started.reverse()) {
      try {
        await worker.stop();
      } catch (error) {
        deps.logger.error({ err: error }, 'a worker failed to stop');
      }
    }
  };
  try {
    for (const worker of [delivery, sending, inbound, domainChecks]) {
      await worker.start();
      started.push(worker);
    }
    if (retention) {
      retention.start();
      started.push(retention);
    }
  } catch (error) {
    await stopAll();
    throw error;
  }
  return { stop: stopAll };
}
