// How mail leaves: the transport (relay, direct, capture), retries, concurrency, limits, DSN and DKIM.
import { createPrivateKey } from 'node:crypto';
import { parseDnsServer } from '../lib/dns.ts';
import {
  custom,
  duration,
  type Env,
  fixed,
  integer,
  rawValue,
  type ReadContext,
  schedule,
  section,
  text,
} from '../lib/settings.ts';
import { DOMAIN_NAME, pemSetting } from './readers.ts';
import { type DestinationOverride, parseDestinationOverrides } from '../lib/destination-limits.ts';
import { parseWarmupSchedule } from '../lib/warmup-schedule.ts';
import { parseSourceIps, type SourceIp } from '../lib/source-ips.ts';

/** The built-in warm-up: 50 a day per large provider, ×1.5 a day, for 16 days (docs/guides/warm-up.md). */
const WARMUP_DEFAULT = '50x1.5/16';

/** The outcomes a DSN request asks to hear about (`NOTIFY=SUCCESS,FAILURE,DELAY`). */
export type DsnNotify = 'success' | 'failure' | 'delay';
const DSN_NOTIFY: readonly DsnNotify[] = ['success', 'failure', 'delay'];

export type MailTransportKind = 'relay' | 'direct' | 'capture';

export interface DkimConfig {
  domain: string;
  selector: string;
  /** The private key as PEM. */
  privateKey: string;
}

/** Given here rather than inline: the reference shows them inside other settings' text. */
const SEND_RETRY_JITTER = 0.2;

/** The transport MAIL_TRANSPORT names, else the one SMTP_URL implies; what SENDER_DOMAINS's default follows. */
export function requestedTransport(env: Env): MailTransportKind {
  const requested = env.MAIL_TRANSPORT?.toLowerCase();
  if (requested === 'relay' || requested === 'direct' || requested === 'capture') return requested;
  return env.SMTP_URL ? 'relay' : 'capture';
}

/** A list setting read by `parse` (the list, or why the value is not one: a problem); unset or bad, empty. */
function listOrProblem<T>(context: ReadContext, name: string, parse: (raw: string) => T[] | string): T[] {
  const raw = rawValue(context, name);
  if (raw === undefined) return [];
  const parsed = parse(raw);
  if (typeof parsed !== 'string') return parsed;
  context.problems.push(`${name}: ${parsed}.`);
  return [];
}

export const SENDING_SETTINGS = section('Sending', {
  smtpUrl: custom('SMTP_URL', {
    default: 'unset',
    description: 'relay all mail through this SMTP server, over pooled connections',
    details:
      '`smtp://user:pass@host:587` (STARTTLS when offered) or `smtps://user:pass@host:465`; any provider',
    read(context) {
      const url = rawValue(context, 'SMTP_URL');
      if (url === undefined) return undefined;
      const parsed = URL.parse(url);
      if (!parsed || !['smtp:', 'smtps:'].includes(parsed.protocol) || !parsed.hostname) {
        // The value may hold a password: the message names the variable, never repeats it.
        context.problems.push(
          'SMTP_URL must look like smtp://user:pass@host:587 or smtps://user:pass@host:465.',
        );
      }
      return url;
    },
  }),
  mailTransport: custom('MAIL_TRANSPORT', {
    default: '`relay` with `SMTP_URL`, else `capture`',
    description: 'how mail leaves: `relay` through `SMTP_URL`, `direct` to each MX, or `capture` (kept)',
    details:
      "`direct` delivers to each recipient domain's MX with opportunistic STARTTLS (it needs outbound port " +
      '25 and a sending IP with reverse DNS); `capture` keeps messages in the database, and nothing leaves ' +
      'the machine',
    read(context): MailTransportKind {
      const requested = context.env.MAIL_TRANSPORT?.toLowerCase();
      if (requested && requestedTransport(context.env) !== requested) {
        context.problems.push(
          `MAIL_TRANSPORT must be relay, direct or capture, got '${context.env.MAIL_TRANSPORT}'.`,
        );
      }
      return requestedTransport(context.env);
    },
  }),
  sendRetrySchedule: schedule('SEND_RETRY_SCHEDULE', {
    default: '0,1m,5m,15m,1h,3h,6h,12h,24h,24h',
    description:
      'delay before each attempt of a recipient after a 4xx or no connection; after the last, `email.failed`',
    details: `each delay moves by up to ± ${SEND_RETRY_JITTER * 100} %, so retries of many recipients spread out`,
  }),
  sendRetryJitter: fixed(SEND_RETRY_JITTER, 'each send retry delay moves by up to ± this fraction'),
  sendConcurrency: integer('SEND_CONCURRENCY', {
    default: 16,
    min: 1,
    max: 10_000,
    description:
      'SMTP transactions in flight per worker process (relay mode: pooled connections to the relay)',
  }),
  sendConcurrencyPerHost: integer('SEND_CONCURRENCY_PER_HOST', {
    default: 4,
    min: 1,
    max: 1000,
    description:
      'SMTP transactions in flight per destination from each source address (`DIRECT_SOURCE_IPS`), per worker process (direct mode)',
  }),
  destinationLimits: custom('DESTINATION_LIMITS', {
    default: 'the built-in table',
    description:
      "direct mode: overrides of destinations' limits, `pattern=connections/per-connection/per-minute/per-hour`",
    details:
      'entries separated by `;`; the pattern is a provider (`google`, `microsoft`, `yahoo`, `apple`, `gmx`, ' +
      '`mailru`, `yandex`, `comcast`), an MX host or recipient domain (`mx.example.net`), or all under one ' +
      '(`*.example.net`); an empty number keeps the default, 0 is no limit (`google=3//300;*.example.net=1`). ' +
      'See docs/api/destinations.md',
    read: (context): DestinationOverride[] =>
      listOrProblem(context, 'DESTINATION_LIMITS', parseDestinationOverrides),
  }),
  warmupSchedule: custom('WARMUP_SCHEDULE', {
    default: WARMUP_DEFAULT,
    description:
      "direct mode: a sending domain's warm-up schedule when it names none, in messages per large-provider destination per UTC day",
    details:
      '`start x growth / days` (`50x1.5/16`: 50 on day 1, ×1.5 a day, for 16 days) or the days listed ' +
      '(`50,100,200`); a domain uses it once its warm-up is on (PUT /v1/domains/{id}/warmup). See docs/guides/warm-up.md',
    read(context): number[] {
      const parsed = parseWarmupSchedule(rawValue(context, 'WARMUP_SCHEDULE') ?? WARMUP_DEFAULT);
      if (typeof parsed === 'string') {
        context.problems.push(`WARMUP_SCHEDULE: ${parsed}.`);
        return parseWarmupSchedule(WARMUP_DEFAULT) as number[];
      }
      return parsed;
    },
  }),
  sourceIps: custom('DIRECT_SOURCE_IPS', {
    default: "unset: the machine's choice",
    description:
      'direct mode: the local addresses mail leaves from, each with its EHLO name and, while new, its warm-up',
    details:
      'entries separated by `;`: an address, then optionally `helo=<its PTR name>` (else `MAIL_HOSTNAME`), ' +
      '`warmup=<YYYY-MM-DD>` (its day 1: nothing leaves from it before), `schedule=` (else `WARMUP_SCHEDULE`): ' +
      "`192.0.2.10 helo=mx1.example.com; 192.0.2.11 warmup=2026-11-28`. Each must be one of the machine's " +
      'addresses: a process that sends mail refuses to start otherwise. See docs/guides/warm-up.md',
    read: (context): SourceIp[] => listOrProblem(context, 'DIRECT_SOURCE_IPS', parseSourceIps),
  }),
  sendTimeoutMs: duration('SEND_TIMEOUT', {
    default: '2m',
    min: '100ms',
    max: '1h',
    description: 'one SMTP attempt (connect to the final reply) must finish within this',
    details: 'leases last 2 × this + 2 s',
  }),
  sendDailyLimit: integer('SEND_DAILY_LIMIT', {
    default: 10_000,
    min: 0,
    max: 1_000_000_000,
    description:
      'recipients a project may send to per UTC day (429 `daily_send_limit` beyond); `0`: no limit',
  }),
  sendGroups: fixed(
    { maxEmails: 100 } as { maxEmails: number } | false,
    'sends arriving while a group of them is written wait and are written together, up to this many ' +
      '(src/modules/emails/send-groups.ts); false: each on its own',
  ),
  mailHostname: text('MAIL_HOSTNAME', {
    shownDefault: "the machine's name",
    description: 'the name this service gives in EHLO',
  }),
  smtpDsn: custom('SMTP_DSN', {
    default: '`success,failure,delay`',
    description: 'what the next hop is asked to report when it offers DSN; `off` asks nothing',
    details: 'RFC 3461 `NOTIFY`, with `RET=HDRS`, `ENVID` = the email id, and `ORCPT`',
    read(context): DsnNotify[] {
      const raw = context.env.SMTP_DSN?.trim().toLowerCase();
      if (!raw) return [...DSN_NOTIFY];
      if (raw === 'off') return [];
      const words = raw.split(',').map((word) => word.trim());
      if (words.some((word) => !(DSN_NOTIFY as readonly string[]).includes(word))) {
        context.problems.push(
          `SMTP_DSN must be off or a list of success, failure and delay, got '${context.env.SMTP_DSN}'.`,
        );
        return [...DSN_NOTIFY];
      }
      return [...new Set(words)] as DsnNotify[];
    },
  }),
  dkim: custom(['DKIM_DOMAIN', 'DKIM_SELECTOR', 'DKIM_PRIVATE_KEY'], {
    default: 'unset',
    description: 'all three sign every message (`d=`, `s=`, and the key)',
    details:
      'the key as PEM (`\\n` escapes allowed) or the path of a PEM file. Publish the public key at ' +
      '`<selector>._domainkey.<domain>`. Mail from a verified sending domain is signed with its own key',
    read: dkimConfig,
  }),
  dnsServers: custom('DNS_SERVERS', {
    default: "the system's",
    description:
      "the DNS servers for direct mode's lookups and domain verification: `ip` or `ip:port`, comma-separated",
    details: 'IPv6 as `[v6]:port`',
    read(context) {
      const servers: string[] = [];
      for (const entry of (context.env.DNS_SERVERS ?? '').split(',')) {
        if (entry.trim() === '') continue;
        const server = parseDnsServer(entry);
        if (server) servers.push(server);
        else {
          context.problems.push(
            `DNS_SERVERS must be comma-separated ip or ip:port ([v6]:port), got '${entry.trim()}'.`,
          );
        }
      }
      return servers;
    },
  }),
  directMxPort: integer('DIRECT_MX_PORT', {
    default: 25,
    min: 1,
    max: 65535,
    description: 'the port direct mode connects to on each mail server: 25, except in a test network',
    details: 'DNS has no port for MX',
  }),
});

function dkimConfig(context: ReadContext): DkimConfig | undefined {
  const domain = rawValue(context, 'DKIM_DOMAIN');
  const selector = rawValue(context, 'DKIM_SELECTOR');
  const key = rawValue(context, 'DKIM_PRIVATE_KEY');
  if (!domain && !selector && !key) return undefined;
  if (!domain || !selector || !key) {
    context.problems.push('DKIM signing needs all of DKIM_DOMAIN, DKIM_SELECTOR and DKIM_PRIVATE_KEY.');
    return undefined;
  }
  if (!DOMAIN_NAME.test(domain)) {
    context.problems.push(`DKIM_DOMAIN must be a domain name such as example.com, got '${domain}'.`);
  }
  if (!/^[a-z0-9]([a-z0-9_-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9_-]*[a-z0-9])?)*$/i.test(selector)) {
    context.problems.push(`DKIM_SELECTOR must be a DNS label such as mail2026, got '${selector}'.`);
  }
  const pem = pemSetting(context, 'DKIM_PRIVATE_KEY');
  if (pem === undefined) return undefined;
  try {
    createPrivateKey(pem);
  } catch {
    // Never echo key material into a log line.
    context.problems.push('DKIM_PRIVATE_KEY does not hold a valid PEM private key.');
    return undefined;
  }
  return { domain: domain.toLowerCase(), selector, privateKey: pem };
}
