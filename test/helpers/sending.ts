// The sending worker as the suites start it beside a test app: on the app's database, services and send
// notifier (so an accepted email goes out at once), with a relay to a test SMTP server or another transport.
import type { Config, DkimConfig } from '../../src/config.ts';
import type { Dns } from '../../src/lib/dns.ts';
import { createDomainService, domainSettingsFromConfig } from '../../src/modules/domains/domains.service.ts';
import { type Clock, systemClock } from '../../src/lib/clock.ts';
import { createSecretBox } from '../../src/lib/crypto.ts';
import type { ReturnPath } from '../../src/modules/emails/return-path.ts';
import type { DestinationSync } from '../../src/modules/destinations/destinations.sync.ts';
import type { SourceChooser } from '../../src/modules/destinations/source-ips.ts';
import { createEngagementLinks } from '../../src/modules/engagement/tokens.ts';
import { createSendingWorkerFromConfig } from '../../src/modules/sending/sending.from-config.ts';
import {
  createSendingWorker,
  type SendingSettings,
  type SendingWorker,
} from '../../src/modules/sending/sending.worker.ts';
import { createCaptureTransport } from '../../src/modules/sending/transports/capture.ts';
import { createRelayTransport } from '../../src/modules/sending/transports/relay.ts';
import { createDirectTransport } from '../../src/modules/sending/transports/direct.ts';
import { createDns } from '../../src/lib/dns.ts';
import type { MailTransport } from '../../src/modules/sending/transports/transport.ts';
import { TEST_ENCRYPTION_KEY, TEST_SENDING_SETTINGS, type TestApp } from './app.ts';

export interface TestSendingOptions {
  /** Sends go through a relay to the test SMTP server on this port (two connections). */
  relayPort?: number;
  /** The relay's timeout (default 3 s). */
  relayTimeoutMs?: number;
  /** The relay's DKIM key. */
  dkim?: DkimConfig;
  /** Any other transport; the capture transport when neither this nor relayPort is given. */
  transport?: MailTransport;
  /** Default: the system clock. */
  clock?: Clock;
  /** Default: TEST_SENDING_SETTINGS. */
  settings?: SendingSettings;
  /** Tracking and unsubscribe links on this PUBLIC_URL (signed with the test encryption key). */
  publicUrl?: string;
  returnPath?: ReturnPath;
  /** Direct delivery's source IPs (DIRECT_SOURCE_IPS's chooser). */
  sources?: SourceChooser;
  /** Direct delivery's destinations: a worker started again with the same one knows what it learned. */
  destinations?: DestinationSync;
}

/**
 * Direct delivery as in production (MX lookups, port 25), through the test DNS server at `dnsAddress`, to mail
 * servers on loopback addresses. The timeout only guards a hang: a loaded machine must not turn a slow
 * delivery into a retry.
 */
export function testDirectTransport(dnsAddress: string): MailTransport {
  const resolver = createDns({ servers: [dnsAddress] });
  return createDirectTransport({
    timeoutMs: 15_000,
    resolveMx: resolver.resolveMx,
    lookup: resolver.resolveAddresses,
    allowPrivateTargets: true,
    port: 25,
  });
}

/** Builds the sending worker on `api` and starts it; the caller stops it. */
export async function startSendingWorker(
  api: TestApp,
  options: TestSendingOptions = {},
): Promise<SendingWorker> {
  const transport =
    options.transport ??
    (options.relayPort === undefined
      ? createCaptureTransport()
      : createRelayTransport({
          url: `smtp://127.0.0.1:${options.relayPort}`,
          connections: 2,
          timeoutMs: options.relayTimeoutMs ?? 3000,
          dkim: options.dkim,
        }));
  const worker = createSendingWorker({
    database: api.database.handle,
    clock: options.clock ?? systemClock,
    events: api.events,
    repositories: api.services.repositories,
    transport,
    settings: options.settings ?? TEST_SENDING_SETTINGS,
    notifier: api.app.sendNotifier,
    returnPath: options.returnPath,
    sources: options.sources,
    destinations: options.destinations,
    engagementLinks:
      options.publicUrl === undefined
        ? undefined
        : createEngagementLinks({
            publicUrl: options.publicUrl,
            secretBox: createSecretBox(TEST_ENCRYPTION_KEY),
          }),
  });
  await worker.start();
  return worker;
}

/**
 * The sending worker as a worker process builds it from `config` (src/workers.ts), on `api`; with `dns`, the
 * projects' verified sending domains sign (a domain service on that resolver). The caller stops it.
 */
export async function startConfiguredSendingWorker(
  api: TestApp,
  config: Config,
  dns?: Dns,
): Promise<SendingWorker> {
  const secretBox = createSecretBox(TEST_ENCRYPTION_KEY);
  const worker = createSendingWorkerFromConfig({
    config,
    database: api.database.handle,
    repositories: api.services.repositories,
    clock: systemClock,
    events: api.events,
    notifier: api.app.sendNotifier,
    secretBox,
    domains:
      dns &&
      createDomainService({
        db: api.database.handle.db,
        repo: api.services.repositories.domains,
        clock: systemClock,
        secretBox,
        dns,
        events: api.events,
        settings: domainSettingsFromConfig(config),
      }),
  });
  await worker.start();
  return worker;
}
