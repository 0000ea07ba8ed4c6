// Every service of a process, built once from the database, the configuration and the process's infrastructure.
// The HTTP app (app.ts), the background workers (workers.ts) and the CLI take them from here, so a service
// has the same dependencies whichever of them uses it.
import type { Config } from './config.ts';
import type { DatabaseHandle } from './db/connection.ts';
import type { Clock } from './lib/clock.ts';
import type { SecretBox } from './lib/crypto.ts';
import { createDns, type Dns } from './lib/dns.ts';
import type { Resolver } from './lib/network-policy.ts';
import { createContactPropertyService } from './modules/contacts/contact-properties.service.ts';
import { createContactActivity } from './modules/contacts/contact-activity.ts';
import { createContactService } from './modules/contacts/contacts.service.ts';
import { createContactImportService } from './modules/contacts/contact-imports.service.ts';
import { createImportJob } from './modules/contacts/contact-imports.job.ts';
import { createSegmentService } from './modules/segments/segments.service.ts';
import { createTopicService } from './modules/topics/topics.service.ts';
import { createBroadcastService } from './modules/broadcasts/broadcasts.service.ts';
import { createFanOut, type FanOutDeps } from './modules/broadcasts/fan-out.ts';
import { createBroadcastTests } from './modules/broadcasts/broadcast-tests.ts';
import { createCustomEventService } from './modules/custom-events/custom-events.service.ts';
import { createAutomationService } from './modules/automations/automations.service.ts';
import { createRunService } from './modules/automations/runs.service.ts';
import { createRunner } from './modules/automations/runner.ts';
import { createStepPlanner } from './modules/automations/steps.ts';
import { createDeliveryService } from './modules/deliveries/deliveries.service.ts';
import { createDestinationsService } from './modules/destinations/destinations.service.ts';
import { createWarmupService } from './modules/destinations/warmup.service.ts';
import { createDmarcService } from './modules/dmarc/dmarc.service.ts';
import { createReputationService } from './modules/reputation/reputation.service.ts';
import { createDomainService, domainSettingsFromConfig } from './modules/domains/domains.service.ts';
import { createEmailService } from './modules/emails/emails.service.ts';
import { GROUPS_IN_FLIGHT } from './modules/emails/send-groups.ts';
import { createEngagementService } from './modules/engagement/engagement.service.ts';
import {
  createEngagementTokens,
  createPreferenceTokens,
  preferenceUrl,
} from './modules/engagement/tokens.ts';
import { createPreferenceService } from './modules/preferences/preferences.service.ts';
import { createEventService } from './modules/events/events.service.ts';
import { createInboundService } from './modules/inbound/inbound.service.ts';
import { createProjectService } from './modules/projects/projects.service.ts';
import { createStatsService } from './modules/stats/stats.service.ts';
import { createReceivedService } from './modules/inbound/received.service.ts';
import { createReceivedReader } from './modules/inbound/received-reader.ts';
import { createInboundRouteService } from './modules/inbound-routes/inbound-routes.service.ts';
import { createSubmissionService } from './modules/submission/submission.service.ts';
import { createSuppressionService } from './modules/suppressions/suppressions.service.ts';
import { createRenderPool } from './modules/templates/render-pool.ts';
import { createTemplateService } from './modules/templates/templates.service.ts';
import { createWebhookOperations } from './modules/webhook-operations/webhook-operations.service.ts';
import { createWebhookService } from './modules/webhooks/webhooks.service.ts';
import { createNotifier, type Notifier } from './queue/notifier.ts';
import { createRunningQueueWorkers } from './queue/running-workers.ts';
import { createRepositories } from './repositories.ts';
import { createHealthService } from './modules/health/health.service.ts';
import { createProcessMetrics } from './modules/metrics/instruments.ts';
import { createMetricsService } from './modules/metrics/metrics.service.ts';
import { createRetention, type RetentionDeps } from './modules/retention/retention.ts';
import { createApiLogRecorder } from './modules/logs/log-recorder.ts';
import { createApiLogService } from './modules/logs/logs.service.ts';
import { createUsageService } from './modules/usage/usage.service.ts';

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
  /** A contact import was accepted: its job is due. */
  contactImports: Notifier;
  /** A broadcast is to be sent now: its fan-out is due. */
  broadcast: Notifier;
  /** Automation runs were started or resumed: they are due. */
  automationRuns: Notifier;
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
  const { db, engine } = database;
  const repositories = createRepositories(database, { directDelivery: config.mailTransport === 'direct' });
  const { clock, secretBox } = infra;
  const dns = infra.dns ?? createDns({ servers: config.dnsServers });
  const notifiers: Notifiers = {
    delivery: infra.notifiers?.delivery ?? createNotifier(),
    send: infra.notifiers?.send ?? createNotifier(),
    inbound: infra.notifiers?.inbound ?? createNotifier(),
    contactImports: infra.notifiers?.contactImports ?? createNotifier(),
    broadcast: infra.notifiers?.broadcast ?? createNotifier(),
    automationRuns: infra.notifiers?.automationRuns ?? createNotifier(),
  };

  // The queue workers this process runs (workers.ts adds them), and what it counts for /metrics: both per
  // process, like the services, so that tests building many apps in one process keep theirs apart.
  const runningWorkers = createRunningQueueWorkers();
  const metrics = createProcessMetrics({
    latencyBuckets: config.metricsLatencyBuckets,
    runningWorkers,
    poolUse: database.poolUse,
  });

  // Threads start as renders need them: a process that renders nothing (a worker) starts none.
  const renderer = createRenderPool(config.templateRendering);

  const deliveries = createDeliveryService({
    repo: repositories.deliveries,
    engine,
    notifier: notifiers.delivery,
  });
  const events = createEventService({
    db,
    engine,
    clock,
    notifier: notifiers.delivery,
    repo: repositories.events,
    deliveryRepo: repositories.deliveries,
    deliveries,
    webhooks: repositories.webhooks,
    stats: repositories.stats,
    metrics,
  });
  const domains = createDomainService({
    db,
    repo: repositories.domains,
    clock,
    secretBox,
    dns,
    events,
    settings: domainSettingsFromConfig(config),
  });

  const projects = createProjectService({ db, repo: repositories.projects, clock });
  const reputation = createReputationService({
    db,
    repo: repositories.reputation,
    events,
    clock,
    settings: config.reputation,
  });
  const emails = createEmailService({
    repo: repositories.emails,
    templates: repositories.templates,
    renderer,
    clock,
    dailyLimit: config.sendDailyLimit,
    notifier: notifiers.send,
    events,
    metrics,
    suppressions: repositories.suppressions,
    db,
    sendGroups:
      config.sendGroups === false ? undefined : { ...config.sendGroups, inFlight: GROUPS_IN_FLIGHT[engine] },
    senders: domains,
    reputation,
    engagement: {
      publicUrl: config.publicUrl,
      defaults: config.engagement,
      repo: repositories.tracking,
    },
  });

  // Built before the audience's services: what their writes do to automations (runs started, runs ended) is
  // written in their transactions through it, and it calls none of them back (only the runs' repositories).
  const automationRuns = createRunService({
    automations: repositories.automations,
    repo: repositories.automationRuns,
    clock,
    notifier: notifiers.automationRuns,
  });
  const contactTriggers = automationRuns.contactTriggers;
  const contacts = createContactService({
    repo: repositories.contacts,
    properties: repositories.contactProperties,
    events,
    clock,
    segments: repositories.segments,
    topics: repositories.topics,
    triggers: contactTriggers,
  });

  const topics = createTopicService({
    repo: repositories.topics,
    contacts,
    events,
    clock,
    triggers: contactTriggers,
  });
  const broadcasts = createBroadcastService({
    db,
    engine,
    repo: repositories.broadcasts,
    segments: repositories.segments,
    topics: repositories.topics,
    templates: repositories.templates,
    senders: domains,
    contacts,
    topicChoices: topics,
    clock,
    notifier: notifiers.broadcast,
    engagement: { publicUrl: config.publicUrl, defaults: config.engagement },
    reputation,
  });
  const preferenceTokens = createPreferenceTokens(secretBox);
  const { publicUrl } = config;
  /** What the broadcast worker's fan-out is built on (tests build variants of it with a part replaced). */
  const fanOutDeps: FanOutDeps = {
    preferenceUrl:
      publicUrl === undefined
        ? undefined
        : (contactId) => preferenceUrl(publicUrl, preferenceTokens, contactId, clock.now()),
    db,
    repo: repositories.broadcasts,
    segments: repositories.segments,
    topics: repositories.topics,
    suppressions: repositories.suppressions,
    properties: repositories.contactProperties,
    templates: repositories.templates,
    renderer,
    emails: repositories.emails,
    tracking: repositories.tracking,
    senders: domains,
    events,
    clock,
    sendNotifier: notifiers.send,
    reputation,
  };
  /** The broadcast worker's fan-out (workers.ts): copies written as the emails module writes sends. */
  const fanOut = createFanOut(fanOutDeps);

  const segments = createSegmentService({
    repo: repositories.segments,
    contacts,
    properties: repositories.contactProperties,
    topics: repositories.topics,
    clock,
    triggers: contactTriggers,
  });
  /** The automation runs worker's runner (workers.ts): each step written with what it does. */
  const automationRunner = createRunner({
    db,
    runs: repositories.automationRuns,
    automations: repositories.automations,
    contacts: repositories.contacts,
    properties: repositories.contactProperties,
    planner: createStepPlanner({
      contacts,
      segments,
      topics: repositories.topics,
      suppressions: repositories.suppressions,
      emails,
      engagement: repositories.tracking,
    }),
    clock,
  });
  // Attachments are read out of received messages on parse threads, never on the API's event loop.
  const receivedReader = createReceivedReader(config.reportParsing);
  // The API's requests, logged in batches after their answers; what is still buffered is written on close.
  const apiLogRecorder = createApiLogRecorder({
    repo: repositories.apiLogs,
    enabled: config.apiLogMaxRows > 0,
    writing: { maxBatch: repositories.apiLogs.rowsPerBatch },
  });

  return {
    config,
    database,
    clock,
    secretBox,
    resolver: infra.resolver,
    dns,
    notifiers,
    repositories,
    renderer,
    runningWorkers,
    metrics,
    events,
    deliveries,
    domains,
    projects,
    reputation,
    webhooks: createWebhookService({
      repo: repositories.webhooks,
      clock,
      secretBox,
      resolver: infra.resolver,
      allowPrivateUrls: config.allowPrivateUrls,
      secretRotationWindowMs: config.webhookSecretRotationWindowMs,
    }),
    webhookOperations: createWebhookOperations({
      repo: repositories.webhooks,
      clock,
      events,
      deliveries,
      testWaitMs: config.webhookTimeoutMs + config.webhookTestMarginMs,
    }),
    templates: createTemplateService({
      repo: repositories.templates,
      clock,
      renderer,
    }),
    emails,
    submission: createSubmissionService({ projects, emails }),
    engagement: createEngagementService({
      db,
      repo: repositories.engagement,
      tracking: repositories.tracking,
      stats: repositories.stats,
      suppressions: repositories.suppressions,
      clock,
      tokens: createEngagementTokens(secretBox),
      events,
      audience: broadcasts.audienceUnsubscribe,
      preferenceToken: (contactId) => preferenceTokens.make(contactId, clock.now()),
    }),
    suppressions: createSuppressionService({ repo: repositories.suppressions, clock }),
    contacts,
    segments,
    topics,
    broadcasts,
    broadcastTests: createBroadcastTests({
      broadcasts,
      contacts,
      properties: repositories.contactProperties,
      templates: repositories.templates,
      renderer,
      emails,
    }),
    fanOut,
    fanOutDeps,
    preferences: createPreferenceService({
      db,
      tokens: preferenceTokens,
      contactsRepo: repositories.contacts,
      contacts,
      topicsRepo: repositories.topics,
      topics,
      clock,
    }),
    customEvents: createCustomEventService({
      repo: repositories.customEvents,
      contacts,
      clock,
      triggers: automationRuns.triggers,
    }),
    automations: createAutomationService({
      repo: repositories.automations,
      runs: repositories.automationRuns,
      templates: repositories.templates,
      segments: repositories.segments,
      topics: repositories.topics,
      clock,
    }),
    automationRuns,
    automationRunner,
    contactProperties: createContactPropertyService({ repo: repositories.contactProperties, clock }),
    contactActivity: createContactActivity({
      contacts,
      recipients: repositories.recipients,
      events: repositories.events,
    }),
    contactImports: createContactImportService({
      repo: repositories.contactImports,
      properties: repositories.contactProperties,
      clock,
      segments: repositories.segments,
      topics: repositories.topics,
      wake: () => notifiers.contactImports.notify(),
    }),
    /** What the contact import worker runs (workers.ts). */
    importJob: createImportJob({
      db,
      repo: repositories.contactImports,
      contacts: repositories.contacts,
      properties: repositories.contactProperties,
      segments: repositories.segments,
      topics: repositories.topics,
      events,
      triggers: contactTriggers,
      clock,
    }),
    inbound: createInboundService({ db, repo: repositories.inbound }),
    received: createReceivedService({
      repo: repositories.received,
      inbound: repositories.inbound,
      reader: receivedReader,
    }),
    inboundRoutes: createInboundRouteService({
      repo: repositories.inboundRoutes,
      domains: repositories.domains,
      clock,
    }),
    stats: createStatsService({ repo: repositories.stats, clock }),
    dmarc: createDmarcService({ db, repo: repositories.dmarc, clock, domains }),
    destinations: createDestinationsService({
      repo: repositories.destinations,
      clock,
      overrides: config.destinationLimits,
    }),
    warmup: createWarmupService({
      repo: repositories.warmups,
      domains,
      clock,
      defaultSchedule: config.warmupSchedule,
    }),
    health: createHealthService({
      db,
      clock,
      workers: runningWorkers,
      timeoutMs: config.readinessTimeoutMs,
      workerDeadAfterMs: config.workerDeadAfterMs,
    }),
    metricsEndpoint: createMetricsService({
      metrics,
      repo: repositories.metrics,
      clock,
      token: config.metricsToken,
      queueDepthLimit: config.metricsQueueDepthLimit,
    }),
    apiLogs: createApiLogService({ repo: repositories.apiLogs, recorder: apiLogRecorder }),
    usage: createUsageService({
      repo: repositories.usage,
      stats: repositories.stats,
      clock,
      dailyLimit: config.sendDailyLimit,
      rateLimit: config.rateLimit,
      rateLimitWindowMs: config.rateLimitWindowMs,
    }),
    /** Retention over this process's repositories: the workers' pruner and `postwire prune`. */
    retention: (options: Omit<RetentionDeps, 'repositories' | 'clock' | 'apiLogs'>) =>
      createRetention({
        repositories,
        clock,
        apiLogs: { retentionMs: config.apiLogRetentionMs, maxRows: config.apiLogMaxRows },
        ...options,
      }),
    /**
     * Ends what the services hold besides the database (the render threads) and writes the API logs still
     * buffered; the database is the caller's.
     */
    close: async () => {
      await Promise.all([renderer.close(), receivedReader.close(), apiLogRecorder.flush()]);
    },
  };
}
