// Receiving: bounce return paths, feedback loops, the inbound SMTP listener, parsing received mail, spamd.
import { parseSpamdUrl } from '../lib/spamd-url.ts';
import { custom, duration, integer, rawValue, type ReadContext, section, text } from '../lib/settings.ts';
import { DOMAIN_NAME, tlsPair } from './readers.ts';

/**
 * Connections the inbound SMTP listener holds at once, from all clients together: far above what reports
 * need, far below the process's file limit.
 */
export const INBOUND_MAX_CONNECTIONS = 5000;

export const INBOUND_SETTINGS = section('Bounces and reports', {
  bounceDomain: custom('BOUNCE_DOMAIN', {
    default: 'unset',
    description: 'the domain of per-recipient return paths (VERP), so bounce reports come back to Postwire',
    details:
      'each recipient goes in its own SMTP transaction with the envelope sender `bounce+<recipient id><HMAC ' +
      'tag>@BOUNCE_DOMAIN`, so a report mailed back names its recipient and a forged one does not verify. Point ' +
      "the domain's MX at the inbound listener. Unset: the envelope sender is the From address, bounce reports " +
      'go there and late bounces stay invisible, and no listener runs. Mail from a verified sending domain ' +
      'with a verified return path uses `bounces.<that domain>` instead',
    read(context) {
      const domain = rawValue(context, 'BOUNCE_DOMAIN');
      if (domain !== undefined && !DOMAIN_NAME.test(domain)) {
        context.problems.push(
          `BOUNCE_DOMAIN must be a domain name such as bounces.example.com, got '${domain}'.`,
        );
      }
      return domain?.toLowerCase();
    },
  }),
  reportFeedbackLoops: custom('REPORT_FEEDBACK_LOOPS', {
    default: 'unset',
    description:
      'feedback loops trusted to report for recipient domains: `reporter=domain|domain`, comma-separated',
    details:
      "for example `fbl.example.net=example.net|example.org`. A report not sent to a recipient's own return path " +
      "changes it only when DKIM-signed by one of these, or by the recipient's own domain from a role address",
    read: feedbackLoops,
  }),
  inbound: {
    host: text('INBOUND_SMTP_HOST', {
      default: '127.0.0.1',
      description:
        'where the SMTP listener for reports and received mail listens (with `BOUNCE_DOMAIN` or `INBOUND_MX_HOST` set)',
      details: 'in `postwire serve` and `postwire worker` unless started with `--no-inbound`',
    }),
    port: integer('INBOUND_SMTP_PORT', {
      default: 2525,
      min: 0,
      max: 65535,
      description: 'its port: 25 on a public address in production, behind the MX of `BOUNCE_DOMAIN`',
    }),
    maxBytes: integer('INBOUND_MAX_BYTES', {
      default: 10 * 1024 * 1024,
      min: 1024,
      max: 1024 * 1024 * 1024,
      description: 'a larger message is refused (552) and not stored; a real report is a few kilobytes',
    }),
    sessionTimeoutMs: duration('INBOUND_SESSION_TIMEOUT', {
      default: '5m',
      min: '1s',
      max: '1h',
      description:
        'an SMTP session still open this long is ended with a 421, however busy the client keeps it',
      details:
        'the 60 s idle timeout alone lets a byte every few seconds hold a connection for ever; a message cut ' +
        'off is not stored, and the sending MTA tries again. A report takes seconds; 10 MiB over a slow link, ' +
        'a minute or two',
    }),
    maxConnectionsPerClient: integer('INBOUND_MAX_CONNECTIONS_PER_CLIENT', {
      default: 20,
      min: 1,
      max: INBOUND_MAX_CONNECTIONS,
      description: 'SMTP sessions one client address may hold at once; the next is refused with a 421',
      details: `all clients together hold ${INBOUND_MAX_CONNECTIONS} at most`,
    }),
    messagesPerMinutePerClient: integer('INBOUND_MESSAGES_PER_MINUTE', {
      default: 120,
      min: 1,
      max: 1_000_000,
      description:
        'messages one client address may begin (MAIL FROM) per minute; past it, 450 and the client tries later',
    }),
    tls: custom(['INBOUND_TLS_CERT', 'INBOUND_TLS_KEY'], {
      default: 'unset',
      description: 'PEM text or file paths: with both, the listener offers STARTTLS',
      read: inboundTls,
    }),
  },
  reportParsing: {
    timeoutMs: duration('REPORT_PARSE_TIMEOUT', {
      default: '2s',
      min: '10ms',
      max: '1m',
      description:
        'reading one received message that has used this much CPU time is stopped: it is `unreadable`',
      details:
        "on a parse thread, never on the API's event loop; the thread is ended and the message kept, with why. " +
        'A report takes milliseconds, a 10 MB message about 0.4 s',
    }),
    threads: integer('REPORT_PARSE_THREADS', {
      default: 1,
      min: 1,
      max: 64,
      description: 'threads that read received messages: one leaves the other cores to the API',
    }),
    memoryMb: integer('REPORT_PARSE_MEMORY', {
      default: 64,
      min: 16,
      max: 4096,
      description: 'the heap of each parse thread, in MiB; a message that needs more is kept as `unreadable`',
    }),
  },
  spamd: {
    url: custom('SPAMD_URL', {
      default: 'unset',
      description:
        "SpamAssassin's spamd (`spamd://host:783` or `tcp://host:port`) that gives received mail a spam verdict; unset: none",
      details:
        'the verdict (score, threshold, whether spamd calls it spam) is advice: when spamd is down, slow or ' +
        'answers nonsense, the message is received unscored and a warning logged. Whether spamd runs network ' +
        'tests is its own setting (`spamd -L`: local rules only)',
      read(context) {
        const raw = rawValue(context, 'SPAMD_URL');
        if (raw !== undefined && !parseSpamdUrl(raw)) {
          context.problems.push(
            `SPAMD_URL must be spamd://host:port or tcp://host:port (port 783 when left out), got '${raw}'.`,
          );
          return undefined;
        }
        return raw?.trim();
      },
    }),
    timeoutMs: duration('SPAMD_TIMEOUT', {
      default: '10s',
      min: '100ms',
      max: '5m',
      description:
        'one check, connection to last byte, takes at most this; past it the message goes unscored',
      details:
        'SpamAssassin takes about a second for a message with local rules only, more with network tests',
    }),
    maxBytes: integer('SPAMD_MAX_BYTES', {
      default: 512 * 1024,
      shownDefault: '`524288` (512 KiB)',
      min: 1024,
      max: 64 * 1024 * 1024,
      description: 'a larger message is scored on its first this many bytes, cut at a line break',
      details:
        'the verdict says `truncated: true`. spamc instead passes a message over its 500 KB limit unscored, ' +
        'which lets spam padded past the limit through; what makes mail large is attachments, which no rule reads',
    }),
  },
});

function inboundTls(context: ReadContext): { cert: string; key: string } | undefined {
  return tlsPair(context, 'INBOUND_TLS_CERT', 'INBOUND_TLS_KEY', 'STARTTLS on the inbound listener');
}

/** REPORT_FEEDBACK_LOOPS: `reporter=domain|domain,reporter=domain`; empty when unset. */
function feedbackLoops(context: ReadContext): ReadonlyMap<string, readonly string[]> {
  const loops = new Map<string, string[]>();
  for (const entry of (context.env.REPORT_FEEDBACK_LOOPS ?? '').split(',')) {
    if (entry.trim() === '') continue;
    const [reporter = '', covered = ''] = entry.split('=').map((part) => part.trim().toLowerCase());
    const domains = covered.split('|').map((domain) => domain.trim());
    if (!DOMAIN_NAME.test(reporter) || domains.some((domain) => !DOMAIN_NAME.test(domain))) {
      context.problems.push(
        `REPORT_FEEDBACK_LOOPS takes reporter=domain|domain entries separated by commas (fbl.example.net=example.net|example.org), got '${entry.trim()}'.`,
      );
      continue;
    }
    loops.set(reporter, [...(loops.get(reporter) ?? []), ...domains]);
  }
  return loops;
}
