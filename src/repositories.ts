// Every repository of a process, built once on the root database (the repository convention of
// docs/architecture.md). services.ts wires the services on top of them; the workers take them from there.
import type { DatabaseHandle } from './db/connection.ts';
import { createApiLogRepo } from './modules/logs/logs.repo.ts';
import { createAutomationRepo } from './modules/automations/automations.repo.ts';
import { createBroadcastRepo } from './modules/broadcasts/broadcasts.repo.ts';
import { createContactImportRepo } from './modules/contacts/contact-imports.repo.ts';
import { createContactPropertyRepo } from './modules/contacts/contact-properties.repo.ts';
import { createContactRepo } from './modules/contacts/contacts.repo.ts';
import { createCustomEventRepo } from './modules/custom-events/custom-events.repo.ts';
import { createDeliveryRepo } from './modules/deliveries/deliveries.repo.ts';
import { createDestinationsRepo } from './modules/destinations/destinations.repo.ts';
import { createDmarcRepo } from './modules/dmarc/dmarc.repo.ts';
import { createDomainRepo } from './modules/domains/domains.repo.ts';
import { createEmailRepo } from './modules/emails/emails.repo.ts';
import { createEngagementRepo } from './modules/engagement/engagement.repo.ts';
import { createEventRepo } from './modules/events/events.repo.ts';
import { createInboundRepo } from './modules/inbound/inbound.repo.ts';
import { createInboundRouteRepo } from './modules/inbound-routes/inbound-routes.repo.ts';
import { createMetricsRepo } from './modules/metrics/metrics.repo.ts';
import { createProjectRepo } from './modules/projects/projects.repo.ts';
import { createReceivedRepo } from './modules/inbound/received.repo.ts';
import { createRecipientRepo } from './modules/emails/recipients.repo.ts';
import { createReputationRepo } from './modules/reputation/reputation.repo.ts';
import { createRunRepo } from './modules/automations/runs.repo.ts';
import { createSegmentRepo } from './modules/segments/segments.repo.ts';
import { createStatsRepo } from './modules/stats/stats.repo.ts';
import { createSuppressionRepo } from './modules/suppressions/suppressions.repo.ts';
import { createTemplateRepo } from './modules/templates/templates.repo.ts';
import { createTopicRepo } from './modules/topics/topics.repo.ts';
import { createTrackingRepo } from './modules/emails/tracking.repo.ts';
import { createUsageRepo } from './modules/usage/usage.repo.ts';
import { createWarmupsRepo } from './modules/destinations/warmups.repo.ts';
import { createWebhookRepo } from './modules/webhooks/webhooks.repo.ts';

/**
 * Every repository of a process, built once on the root database: the services get theirs from here, and so
 * do the workers (workers.ts). Routes, the CLI and src/ops never use them: they call services.
 */
export function createRepositories(
  { db, engine, stamps }: DatabaseHandle,
  /** The configured transport is direct (MAIL_TRANSPORT=direct): createRecipientRepo says what that writes. */
  options: { directDelivery?: boolean } = {},
) {
  const recipients = createRecipientRepo(db, engine, options);
  return {
    projects: createProjectRepo(db, stamps),
    webhooks: createWebhookRepo(db, stamps),
    templates: createTemplateRepo(db, stamps),
    domains: createDomainRepo(db, engine, stamps),
    suppressions: createSuppressionRepo(db, engine),
    emails: createEmailRepo(db, engine, recipients),
    recipients,
    tracking: createTrackingRepo(db, engine),
    events: createEventRepo(db),
    deliveries: createDeliveryRepo(db),
    engagement: createEngagementRepo(db),
    stats: createStatsRepo(db),
    inbound: createInboundRepo(db, engine),
    received: createReceivedRepo(db),
    inboundRoutes: createInboundRouteRepo(db),
    contacts: createContactRepo(db, engine),
    contactProperties: createContactPropertyRepo(db),
    contactImports: createContactImportRepo(db),
    segments: createSegmentRepo(db, engine),
    topics: createTopicRepo(db),
    broadcasts: createBroadcastRepo(db),
    customEvents: createCustomEventRepo(db),
    automations: createAutomationRepo(db),
    automationRuns: createRunRepo(db),
    dmarc: createDmarcRepo(db),
    destinations: createDestinationsRepo(db),
    warmups: createWarmupsRepo(db),
    reputation: createReputationRepo(db),
    metrics: createMetricsRepo(db),
    apiLogs: createApiLogRepo(db, engine),
    usage: createUsageRepo(db),
  };
}

export type Repositories = ReturnType<typeof createRepositories>;
