import type { Config } from '../../../config.ts';
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
  >,
  overrides: { resolveMx?: MxResolver } = {},
): MailTransport {
  const common = { timeoutMs: config.sendTimeoutMs, dkim: config.dkim, hostname: config.mailHostname };
  switch (config.mailTransport) {
    case 'relay':
      if (!config.smtpUrl) throw new Error('The relay transport needs SMTP_URL.');
      return createRelayTransport({ ...common, url: config.smtpUrl, connections: config.sendConcurrency });
    case 'direct':
      return createDirectTransport({ ...common, allowPrivateTargets: config.allowPrivateUrls, ...overrides });
    case 'capture':
      return createCaptureTransport({ dkim: config.dkim });
  }
}
