// Every service of a process, built once from the database, the configuration and the process's infrastructure.
// The HTTP app (app.ts), the background workers (workers.ts) and the CLI take them from here, so a service
// has the same dependencies whichever of them uses it.
import type { Config } from './config.ts';
import type { DatabaseHandle } from './db/connection.ts';
import type { Clock } from './lib/clock.ts';
import type { SecretBox } from './lib/crypto.ts';
import { createDns, type Dns } from './lib/dns.ts';
import type { Resolver } from './lib/network-policy.ts';
import { createContactPropertyRepo } from './modules/contacts/contact-properties.repo.ts';
import { createContactPropertyService } from './modules/contacts/contact-properties.service.ts';
import { createContactRepo } from './modules/contacts/contacts.repo.ts';
import { createContactService } from './modules/contacts/contacts.service.ts';
import { createDeliveryService } from './modules/deliveries/deliveries.service.ts';
import { createDmarcService } from './modules/dmarc/dmarc.service.ts';
import { createDomainService, domainSettingsFromConfig } from './modules/domains/domains.service.ts';
import { createEmailRepo } from './modules/emails/emails.repo.ts';
import { createEmailService } from './modules/emails/emails.service.ts';
import { GROUPS_IN_FLIGHT } from './modules/emails/send-groups.ts';
import { createTrackingRepo } from './modules/emails/tracking.repo.ts';
import { createEngagementService } from './modules/engagement/engagement.service.ts';
import { createEngagementTokens } from './modules/engagement/tokens.ts';
import { createEventService } from './modules/events/events.service.ts';
import { createInboundRepo } from './modules/inbound/inbound.repo.ts';
import { createInboundService } from './modules/inbound/inbound.service.ts';
import { createProjectRepo } from './modules/projects/projects.repo.ts';
import { createProjectService } from './modules/projects/projects.service.ts';
import { createStatsService } from './modules/stats/stats.service.ts';
import { createSuppressionRepo } from './modules/suppressions/suppressions.repo.ts';
import { createReceivedRepo } from './modules/inbound/received.repo.ts';
import { createReceivedService } from './modules/inbound/received.service.ts';
import { createReceivedReader } from './modules/inbound/received-reader.ts';
import { createInboundRouteRepo } from './modules/inbound-routes/inbound-routes.repo.ts';
import { createInboundRouteService } from './modules/inbound-routes/inbound-routes.service.ts';
import { createSubmissionService } from './modules/submission/submission.service.ts';
import { createDomainRepo } from './modules/domains/domains.repo.ts';
import { createSuppressionService } from './modules/suppressions/suppressions.service.ts';
import { createRenderPool } from './modules/templates/render-pool.ts';
import { createTemplateRepo } from './modules/templates/templates.repo.ts';
import { createTemplateService } from './modules/templates/templates.service.ts';
import { createWebhookOperations } from './modules/webhook-operations/webhook-operations.service.ts';
import { createWebhookRepo } from './modules/webhooks/webhooks.repo.ts';
import { createWebhookService } from './modules/webhooks/webhooks.service.ts';
import { createNotifier, type Notifier } from './queue/notifier.ts';
import { createRunningQueueWorkers } from './queue/running-workers.ts';
import { createHealthService } from './modules/health/health.service.ts';
import { createProcessMetrics } from './modules/metrics/instruments.ts';
import { createMetricsRepo } from './modules/metrics/metrics.repo.ts';
import { createMetricsService } from './modules/metrics/metrics.service.ts';

/**
 * Wake-ups within one process: what its API writes, its own workers pick up at once (other processes hear of
 * it through NOTIFY on PostgreSQL, or their poll).
 */
export interface Notifiers {
  /** Events were emitted: webhook deliveries are due. */
  delivery: Notifier;
  /** Emails were accepted: recipients are due. */
  send: Notifier;
  /** The inbound listener stored a message: it is due to be read. */
  inbound: Notifier;
}

/** What a process brings besides the database and the configuration. */
export interface Infra {
  clock: Clock;
  secretBox: SecretBox;
  /** Resolves webhook hosts, for the private-network checks on create and at connect time. */
  resolver: Resolver;
  /** Sending domains' and reports' DNS lookups; the DNS_SERVERS of the configuration when absent. */
  dns?: Dns | undefined;
  /** Fresh ones when absent. */
  notifiers?: Partial<Notifiers> | undefined;
}

export type Services = ReturnType<typeof createServices>;

export function createServices(database: DatabaseHandle, config: Config, infra: Infra) {
  const { db, engine, stamps } = database;
  const { clock, secretBox } = infra;
  const dns = infra.dns ?? createDns({ servers: config.dnsServers });
  const notifiers: Notifiers = {
    delivery: infra.notifiers?.delivery ?? createNotifier(),
    send: infra.notifiers?.send ?? createNotifier(),
    inbound: infra.notifiers?.inbound ?? createNotifier(),
  };

  // The queue workers this process runs (workers.ts adds them), and what it counts for /metrics: both per
  // process, like the services, so that tests building many apps in one process keep theirs apart.
  const runningWorkers = createRunningQueueWorkers();
  const metrics = createProcessMetrics({
    latencyBuckets: config.metricsLatencyBuckets,
    runningWorkers,
    poolUse: database.poolUse,
  });

  const webhookRepo = createWebhookRepo(db, stamps);
  const templateRepo = createTemplateRepo(db, stamps);
  const suppressionRepo = createSuppressionRepo(db, engine);
  // Threads start as renders need them: a process that renders nothing (a worker) starts none.
  const renderer = createRenderPool(config.templateRendering);

  const events = createEventService({
    db,
    engine,
    clock,
    notifier: notifiers.delivery,
    webhooks: webhookRepo,
    metrics,
  });
  const deliveries = createDeliveryService({ db, engine, notifier: notifiers.delivery });
  const domains = createDomainService({
    db,
    engine,
    stamps,
    clock,
    secretBox,
    dns,
    events,
    settings: domainSettingsFromConfig(config),
  });

  const projects = createProjectService({ repo: createProjectRepo(db, stamps), clock });
  const emails = createEmailService({
    repo: createEmailRepo(db, engine),
    templates: templateRepo,
    renderer,
    clock,
    dailyLimit: config.sendDailyLimit,
    notifier: notifiers.send,
    events,
    metrics,
    suppressions: suppressionRepo,
    db,
    sendGroups:
      config.sendGroups === false ? undefined : { ...config.sendGroups, inFlight: GROUPS_IN_FLIGHT[engine] },
    senders: domains,
    engagement: {
      publicUrl: config.publicUrl,
      defaults: config.engagement,
      repo: createTrackingRepo(db),
    },
  });

  const contactPropertyRepo = createContactPropertyRepo(db);

  // Attachments are read out of received messages on parse threads, never on the API's event loop.
  const receivedReader = createReceivedReader(config.reportParsing);

  return {
    config,
    database,
    clock,
    secretBox,
    resolver: infra.resolver,
    dns,
    notifiers,
    renderer,
    runningWorkers,
    metrics,
    events,
    deliveries,
    domains,
    projects,
    webhooks: createWebhookService({
      repo: webhookRepo,
      clock,
      secretBox,
      resolver: infra.resolver,
      allowPrivateUrls: config.allowPrivateUrls,
      secretRotationWindowMs: config.webhookSecretRotationWindowMs,
    }),
    webhookOperations: createWebhookOperations({
      repo: webhookRepo,
      clock,
      events,
      deliveries,
      testWaitMs: config.webhookTimeoutMs + config.webhookTestMarginMs,
    }),
    templates: createTemplateService({
      repo: templateRepo,
      clock,
      renderer,
    }),
    emails,
    submission: createSubmissionService({ projects, emails }),
    engagement: createEngagementService({ db, clock, tokens: createEngagementTokens(secretBox), events }),
    suppressions: createSuppressionService({ repo: suppressionRepo, clock }),
    contacts: createContactService({
      repo: createContactRepo(db, engine),
      properties: contactPropertyRepo,
      events,
      clock,
    }),
    contactProperties: createContactPropertyService({ repo: contactPropertyRepo, clock }),
    inbound: createInboundService({ repo: createInboundRepo(db, engine) }),
    received: createReceivedService({
      repo: createReceivedRepo(db),
      inbound: createInboundRepo(db, engine),
      reader: receivedReader,
    }),
    inboundRoutes: createInboundRouteService({
      repo: createInboundRouteRepo(db),
      domains: createDomainRepo(db, engine),
      clock,
    }),
    stats: createStatsService({ db, clock }),
    dmarc: createDmarcService({ db, clock, domains }),
    health: createHealthService({
      db,
      clock,
      workers: runningWorkers,
      timeoutMs: config.readinessTimeoutMs,
      workerDeadAfterMs: config.workerDeadAfterMs,
    }),
    metricsEndpoint: createMetricsService({
      metrics,
      repo: createMetricsRepo(db),
      clock,
      token: config.metricsToken,
      queueDepthLimit: config.metricsQueueDepthLimit,
    }),
    /** Ends what the services hold besides the database (the render threads); the database is the caller's. */
    close: async () => {
      await Promise.all([renderer.close(), receivedReader.close()]);
    },
  };
}
