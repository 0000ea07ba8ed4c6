import type { Config } from '../../../config.ts';
import { createDns, type Dns } from '../../../lib/dns.ts';
import { createCaptureTransport } from './capture.ts';
import { createDirectTransport, type MxResolver } from './direct.ts';
import { createRelayTransport } from './relay.ts';
import type { MailTransport } from './transport.ts';

/** The transport the configuration chooses: relay (SMTP_URL), direct (MX) or capture (the default). */
export function createTransportFromConfig(
  config: Pick<
    Config,
    | 'mailTransport'
    | 'smtpUrl'
    | 'sendConcurrency'
    | 'sendTimeoutMs'
    | 'dkim'
    | 'mailHostname'
    | 'allowPrivateUrls'
    | 'dnsServers'
    | 'directMxPort'
  >,
  overrides: { resolveMx?: MxResolver; dns?: Dns } = {},
): MailTransport {
  const common = { timeoutMs: config.sendTimeoutMs, dkim: config.dkim, hostname: config.mailHostname };
  switch (config.mailTransport) {
    case 'relay':
      if (!config.smtpUrl) throw new Error('The relay transport needs SMTP_URL.');
      return createRelayTransport({ ...common, url: config.smtpUrl, connections: config.sendConcurrency });
    case 'direct': {
      // MX and address lookups go to DNS_SERVERS (the system's resolvers when unset).
      const dns = overrides.dns ?? createDns({ servers: config.dnsServers });
      return createDirectTransport({
        ...common,
        allowPrivateTargets: config.allowPrivateUrls,
        resolveMx: overrides.resolveMx ?? dns.resolveMx,
        lookup: dns.resolveAddresses,
        port: config.directMxPort,
      });
    }
    case 'capture':
      return createCaptureTransport({ dkim: config.dkim, timeoutMs: config.sendTimeoutMs });
  }
}
