// The SMTP listeners a process runs besides its HTTP API: the inbound one (reports, and mail for inbound
// routes), with the decision at RCPT of what an address is, and submission.
import type { ByteChunks } from '../lib/byte-chunks.ts';
import { createRateLimiter } from '../http/rate-limit.ts';
import { describeError } from '../lib/operator-output.ts';
import type { SmtpBodyMemory } from '../lib/smtp-data.ts';
import type { WorkerLogger } from '../lib/worker-logger.ts';
import {
  type InboundListener,
  type RecipientDecision,
  startInboundListener,
} from '../modules/inbound/inbound.listener.ts';
import type { SpamVerdict } from '../modules/inbound/inbound.repo.ts';
import { createSpamChecker } from '../modules/inbound/spam.ts';
import {
  type SubmissionListener,
  startSubmissionListener,
} from '../modules/submission/submission.listener.ts';
import { notifyOtherProcesses, QUEUE_CHANNELS } from '../queue/notifier.ts';
import type { Services } from '../services.ts';

/**
 * The SMTP listener, for reports when BOUNCE_DOMAIN is set and for received mail when INBOUND_MX_HOST is: each
 * message is stored before its 250, then this process's inbound worker (the services' inbound notifier) or
 * another process's (NOTIFY on PostgreSQL, else its poll) reads it.
 */
export async function startInbound(
  services: Services,
  logger: WorkerLogger,
  memory: SmtpBodyMemory,
): Promise<InboundListener | undefined> {
  const { config, clock } = services;
  const bounceDomain = config.bounceDomain;
  if (!bounceDomain && !config.inboundMxHost) return undefined;
  const { db, engine } = services.database;
  try {
    return await startInboundListener({
      ...config.inbound,
      takes: [
        bounceDomain ? `reports for ${bounceDomain}` : undefined,
        config.inboundMxHost ? 'mail for inbound routes' : undefined,
      ]
        .filter(Boolean)
        .join(' and '),
      decide: (address) => decideRecipient(services, address),
      scoreSpam: spamScorer(services, logger),
      hostname: config.mailHostname,
      clock,
      logger,
      memory,
      async store(message) {
        const id = await services.inbound.store(message);
        await notifyOtherProcesses(db, engine, QUEUE_CHANNELS.inbound);
        services.notifiers.inbound.notify();
        return id;
      },
    });
  } catch (error) {
    const { host, port } = config.inbound;
    throw new Error(
      `the inbound SMTP listener for bounce reports could not listen on ${host}:${port} (${describeError(error)}); ` +
        'set INBOUND_SMTP_PORT, or start this process with --no-inbound when another one listens',
      { cause: error },
    );
  }
}

/** A recipient at RCPT: one of our return paths (a report), an address a route takes, or refused. */
async function decideRecipient(services: Services, address: string): Promise<RecipientDecision> {
  const domain = address.slice(address.lastIndexOf('@') + 1).toLowerCase();
  const bounceDomain = services.config.bounceDomain;
  if (bounceDomain && (domain === bounceDomain || (await services.domains.isReturnPathDomain(domain)))) {
    return { take: 'report' };
  }
  // A verified domain's own dmarc@ address, when its project reads the aggregate reports mailed there.
  if (await services.domains.dmarcReportsReader(address)) return { take: 'report' };
  const decision = await services.inboundRoutes.resolve(address);
  if (!decision) return { take: 'refuse' };
  if (!decision.accept) return { take: 'refuse', message: `5.7.1 ${decision.message}` };
  return {
    take: 'route',
    route: {
      address: address.toLowerCase(),
      projectId: decision.projectId,
      routeId: decision.routeId,
      action: decision.action,
      mailboxHash: decision.mailboxHash,
      spamRejectScore: decision.spamRejectScore,
    },
  };
}

/**
 * SpamAssassin's verdict on received mail before its 250 (SPAMD_URL), kept as the API shows it; absent when
 * SPAMD_URL is unset. The checker never rejects: spamd away, a message is taken unscored.
 */
function spamScorer(services: Services, logger: WorkerLogger) {
  const { url, timeoutMs, maxBytes } = services.config.spamd;
  if (url === undefined) return undefined;
  const checker = createSpamChecker({ url, timeoutMs, maxBytes, logger });
  return async (raw: ByteChunks): Promise<SpamVerdict | null> => {
    const verdict = await checker.check(raw);
    return verdict && { score: verdict.score, threshold: verdict.threshold, flagged: verdict.flagged };
  };
}

/** SMTP submission, when a submission port is configured: each message an email, stored before its 250. */
export async function startSubmission(
  services: Services,
  logger: WorkerLogger,
  memory: SmtpBodyMemory,
): Promise<SubmissionListener | undefined> {
  const { config } = services;
  const settings = config.submission;
  if (settings.port === undefined && settings.tlsPort === undefined) return undefined;
  const { submission } = services;
  try {
    return await startSubmissionListener({
      ...settings,
      hostname: config.mailHostname,
      authenticate: submission.authenticate,
      stillValid: submission.stillValid,
      withinDailyLimit: submission.withinDailyLimit,
      submit: submission.submit,
      memory,
      failedAuthLimiter: createRateLimiter({
        limit: config.authFailureLimit,
        windowMs: config.authFailureWindowMs,
        now: () => services.clock.now().getTime(),
      }),
      logger,
    });
  } catch (error) {
    throw new Error(
      `the SMTP submission server could not listen on ${settings.host} (${describeError(error)}); ` +
        'set SUBMISSION_PORT and SUBMISSION_TLS_PORT to free ports',
      { cause: error },
    );
  }
}
