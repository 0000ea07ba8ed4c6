import type { Config } from '../../config.ts';
import type { DatabaseHandle } from '../../db/connection.ts';
import type { Clock } from '../../lib/clock.ts';
import type { SecretBox } from '../../lib/crypto.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';
import type { Notifier } from '../../queue/notifier.ts';
import { createDestinationSync } from '../destinations/destinations.sync.ts';
import { DEFAULT_SOURCE } from '../destinations/shaping.ts';
import { createSourcedShaping } from '../destinations/source-shaping.ts';
import { createWarmupGate } from '../destinations/warmup.ts';
import { createSourceChooser } from '../destinations/source-ips.ts';
import { returnPathFromConfig } from '../emails/return-path.ts';
import { createEngagementLinks } from '../engagement/tokens.ts';
import type { EventService } from '../events/events.service.ts';
import {
  createSendingWorker,
  type SendingSettings,
  type SendingWorker,
  type SendingWorkerDeps,
} from './sending.worker.ts';
import { createTransportFromConfig } from './transports/from-config.ts';

// The sending worker built from the configuration (workers.ts, the tests' helpers): the transport, the
// destinations' shaping and warm-up in direct mode, SEND_* settings, return paths and engagement links.

/**
 * The sending worker of a process, as the configuration sets it up: the transport (SMTP_URL relay, direct
 * MX delivery or capture), SEND_* settings and DKIM. Share `notifier` with the app (AppDeps.sendNotifier) so
 * accepted emails go out at once, and give it an event service whose notifier wakes the delivery worker.
 */
export function createSendingWorkerFromConfig(deps: {
  config: Config;
  database: DatabaseHandle;
  clock: Clock;
  events: Pick<EventService, 'emitIn' | 'emitWith' | 'beforeEmitting'>;
  notifier?: Notifier | undefined;
  logger?: WorkerLogger | undefined;
  /** Signs the return paths when the configuration names a BOUNCE_DOMAIN. */
  secretBox: SecretBox;
  /** The keys and return paths of the projects' verified sending domains. */
  domains?: SendingWorkerDeps['signing'];
  /** The process's repositories: what each email asked to track, the suppression list, the destinations' state. */
  repositories: SendingWorkerDeps['repositories'];
  onThrottle?: SendingWorkerDeps['onThrottle'];
}): SendingWorker {
  const transport = createTransportFromConfig(deps.config);
  return createSendingWorker({
    database: deps.database,
    clock: deps.clock,
    events: deps.events,
    repositories: deps.repositories,
    transport,
    destinations: transport.perDomain
      ? createDestinationSync({
          repo: deps.repositories.destinations,
          // A state per (destination, source address) when DIRECT_SOURCE_IPS lists some (source-shaping.ts).
          shaping: createSourcedShaping({
            sources: deps.config.sourceIps.map((source) => source.address),
            overrides: deps.config.destinationLimits,
          }),
          overrides: deps.config.destinationLimits,
        })
      : undefined,
    warmup: transport.perDomain
      ? createWarmupGate({
          repo: deps.repositories.warmups,
          source: DEFAULT_SOURCE,
          defaultSchedule: deps.config.warmupSchedule,
        })
      : undefined,
    sources:
      transport.perDomain && deps.config.sourceIps.length > 0
        ? createSourceChooser({
            sources: deps.config.sourceIps,
            repo: deps.repositories.warmups,
            defaultSchedule: deps.config.warmupSchedule,
          })
        : undefined,
    onThrottle: deps.onThrottle,
    settings: sendingSettingsFromConfig(deps.config),
    notifier: deps.notifier,
    logger: deps.logger,
    deadAfterMs: deps.config.workerDeadAfterMs,
    returnPath: returnPathFromConfig(deps.config, deps.secretBox),
    signing: deps.domains,
    engagementLinks: deps.config.publicUrl
      ? createEngagementLinks({
          publicUrl: deps.config.publicUrl,
          secretBox: deps.secretBox,
          bounceDomain: deps.config.bounceDomain,
        })
      : undefined,
  });
}

export function sendingSettingsFromConfig(config: Config): SendingSettings {
  return {
    schedule: config.sendRetrySchedule,
    concurrency: config.sendConcurrency,
    concurrencyPerHost: config.sendConcurrencyPerHost,
    timeoutMs: config.sendTimeoutMs,
    jitter: config.sendRetryJitter,
    dsn: config.smtpDsn,
  };
}
