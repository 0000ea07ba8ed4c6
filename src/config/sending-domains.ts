// Which From domains a project may use, and what a sending domain's DNS records must say.
import { custom, duration, fixed, section } from '../lib/settings.ts';
import { DOMAIN_NAME } from './readers.ts';
import { requestedTransport } from './sending.ts';

export type SenderDomainsPolicy = 'verified' | 'any';

export const SENDING_DOMAIN_SETTINGS = section('Sending domains', {
  senderDomains: custom('SENDER_DOMAINS', {
    default: '`verified` in direct mode, else `any`',
    description: 'which From domains a project may send as: `verified` (its verified domains) or `any`',
    details:
      '`verified`: a From domain must be a verified sending domain of the project (or a subdomain of one), ' +
      'else 422; `any`: other From domains are signed with the `DKIM_*` key and are not DMARC-aligned. A ' +
      'domain another project has verified is refused either way',
    read(context): SenderDomainsPolicy {
      const requested = context.env.SENDER_DOMAINS?.toLowerCase();
      if (requested === 'verified' || requested === 'any') return requested;
      if (requested) {
        context.problems.push(`SENDER_DOMAINS must be verified or any, got '${context.env.SENDER_DOMAINS}'.`);
      }
      // Direct delivery is the one mode where any From domain would be sent unauthenticated to the world's
      // servers as if it were ours; through a relay or into capture the relay (or nobody) decides.
      return requestedTransport(context.env) === 'direct' ? 'verified' : 'any';
    },
  }),
  testDomainsWithoutDns: custom('TEST_DOMAINS_WITHOUT_DNS', {
    default: '`true` in capture mode without `DNS_SERVERS`, else `false`',
    description:
      'whether domains under the reserved test names `.test`, `.example` and `.localhost` verify without DNS',
    details:
      'so sending and receiving can be tried on one machine (docs/api/receiving.md). Capture mode only: ' +
      'no one can register those names, so a server whose mail leaves never takes them as verified',
    read(context): boolean {
      const requested = context.env.TEST_DOMAINS_WITHOUT_DNS?.toLowerCase();
      const capture = requestedTransport(context.env) === 'capture';
      if (requested === 'true' && !capture) {
        context.problems.push('TEST_DOMAINS_WITHOUT_DNS=true needs capture mode (MAIL_TRANSPORT=capture).');
      } else if (requested !== undefined && requested !== 'true' && requested !== 'false') {
        context.problems.push(
          `TEST_DOMAINS_WITHOUT_DNS must be true or false, got '${context.env.TEST_DOMAINS_WITHOUT_DNS}'.`,
        );
      }
      if (requested === 'true' || requested === 'false') return requested === 'true' && capture;
      // Whoever points DNS_SERVERS somewhere wants its answers, test names included.
      return capture && !context.env.DNS_SERVERS?.trim();
    },
  }),
  inboundMxHost: custom('INBOUND_MX_HOST', {
    default: 'unset',
    description: "the host a sending domain's return-path subdomain points its MX at (our inbound listener)",
    details: 'with `BOUNCE_DOMAIN`, each sending domain gets a return-path subdomain `bounces.<domain>`',
    read(context) {
      const host = context.env.INBOUND_MX_HOST?.toLowerCase().replace(/\.$/, '') || undefined;
      if (host !== undefined && !DOMAIN_NAME.test(host)) {
        context.problems.push(`INBOUND_MX_HOST must be a host name such as mx.example.com, got '${host}'.`);
      }
      return host;
    },
  }),
  sendingSpf: custom('SENDING_SPF', {
    default: 'unset',
    description: 'the SPF record each return-path subdomain must publish, so SPF passes aligned',
    details: '`v=spf1 ip4:192.0.2.10 -all`: the addresses mail leaves from',
    read(context) {
      const spf = context.env.SENDING_SPF?.trim() || undefined;
      if (spf !== undefined && !/^v=spf1( [\x21-\x7e]+)*$/i.test(spf)) {
        context.problems.push(
          `SENDING_SPF must be an SPF record such as 'v=spf1 ip4:192.0.2.1 -all', got '${spf}'.`,
        );
      }
      return spf;
    },
  }),
  domainRecheckMs: duration('DOMAIN_RECHECK', {
    default: '6h',
    min: '1s',
    max: '30d',
    description: "how often every sending domain's records are looked up again",
    details: 'a change of status emits `domain.verified` or `domain.failed`',
  }),
  domainChecks: fixed(
    { concurrency: 4, timeoutMs: 30_000 },
    'domain checks in flight per worker process, and how long one may take',
  ),
});
