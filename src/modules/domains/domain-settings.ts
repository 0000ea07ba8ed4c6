import type { Config, DkimConfig, SenderDomainsPolicy } from '../../config.ts';
import { hostname } from 'node:os';
import type { RecordSettings } from './records.ts';

// What the sending domains need of the configuration.

export interface DomainSettings {
  /** The return-path records (MX to INBOUND_MX_HOST, SPF) when per-recipient return paths are on. */
  returnPath?: RecordSettings['returnPath'];
  /** How often the background check looks at each domain again (DOMAIN_RECHECK). */
  recheckMs: number;
  /** SENDER_DOMAINS. */
  senderDomains: SenderDomainsPolicy;
  /** The global DKIM key (DKIM_*), signing what no verified domain of the project covers. */
  fallbackDkim?: DkimConfig | undefined;
  /** BOUNCE_DOMAIN: the envelope-sender domain of mail that has no verified return path of its own. */
  bounceDomain?: string | undefined;
  /** INBOUND_MX_HOST: the MX a receiving domain publishes; absent, no domain can receive. */
  receivingMxHost?: string | undefined;
  /** TEST_DOMAINS_WITHOUT_DNS (capture mode only): names under `.test`, `.example`, `.localhost` verify without DNS. */
  testNamesWithoutDns?: boolean;
  /** What the compliance checks read of how mail leaves (compliance.ts); absent: no compliance checks. */
  compliance?: ComplianceSettings | undefined;
}

export interface ComplianceSettings {
  transport: 'relay' | 'direct' | 'capture';
  /** The HELO name (MAIL_HOSTNAME, else the machine's): its addresses are the sending host's in direct mode. */
  sendingHost?: string | undefined;
  /** SMTP_URL is smtps:// (TLS from the first byte). */
  relayTls: boolean;
  returnPath: boolean;
  bounceDomain?: string | undefined;
  publicUrl?: string | undefined;
  /** LIST_UNSUBSCRIBE: sends carry one-click unsubscribe unless they say otherwise. */
  listUnsubscribe: boolean;
}

/**
 * The sending-domain settings the configuration gives: return-path records only when per-recipient return
 * paths are on (BOUNCE_DOMAIN) and INBOUND_MX_HOST says where their MX points.
 */
export function domainSettingsFromConfig(
  config: Pick<
    Config,
    | 'bounceDomain'
    | 'inboundMxHost'
    | 'sendingSpf'
    | 'domainRecheckMs'
    | 'senderDomains'
    | 'dkim'
    | 'testDomainsWithoutDns'
    | 'mailTransport'
    | 'mailHostname'
    | 'smtpUrl'
    | 'publicUrl'
    | 'engagement'
  >,
): DomainSettings {
  return {
    returnPath:
      config.bounceDomain && config.inboundMxHost
        ? { mxHost: config.inboundMxHost, spf: config.sendingSpf }
        : undefined,
    recheckMs: config.domainRecheckMs,
    senderDomains: config.senderDomains,
    fallbackDkim: config.dkim,
    bounceDomain: config.bounceDomain,
    receivingMxHost: config.inboundMxHost,
    testNamesWithoutDns: config.testDomainsWithoutDns,
    compliance: {
      transport: config.mailTransport,
      sendingHost: config.mailHostname ?? hostname(),
      relayTls: config.smtpUrl?.startsWith('smtps:') ?? false,
      returnPath: Boolean(config.bounceDomain && config.inboundMxHost),
      bounceDomain: config.bounceDomain,
      publicUrl: config.publicUrl,
      listUnsubscribe: config.engagement.listUnsubscribe,
    },
  };
}
