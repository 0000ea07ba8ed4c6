import { SMTPServer, type SMTPServerAddress, type SMTPServerSession } from 'smtp-server';
import { DEFAULTS, INBOUND_MAX_CONNECTIONS, type InboundConfig } from '../../config.ts';
import { createRateLimiter } from '../../http/rate-limit.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import {
  gatherData,
  type SmtpBodyMemory,
  smtpError,
  UNBOUNDED_SMTP_BODY_MEMORY,
} from '../../lib/smtp-data.ts';
import { createSessionBounds } from '../../lib/smtp-sessions.ts';
import type { Clock } from '../../lib/clock.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';
import type { NewInboundMessage, RoutedRecipient, SpamVerdict } from './inbound.repo.ts';

// The SMTP listener: what mail systems send back to our return paths (bounce, delay and success reports,
// complaints, and the auto-replies that land there too), and mail for the addresses of projects' inbound
// routes. Every byte is hostile. Each recipient is decided at RCPT: a return path, or a route's address, or
// refused (550) there and then, so nothing is accepted that would have to be bounced later (no backscatter,
// no relay: no recipient outside those is ever taken). What is too large is refused before anything is
// stored, and the 250 comes only once the message is stored: reading it comes after (the inbound worker), so
// a crash loses nothing.
// No one holds it for long: a session ends at its time limit whatever it is doing (a client that trickles a
// byte every few seconds never trips the idle timeout), and one client address holds a few sessions at most
// (lib/smtp-sessions.ts, as for submission).

/** What the listener does with one recipient, decided at RCPT. */
export type RecipientDecision =
  /** A return path of ours (BOUNCE_DOMAIN, a verified domain's `bounces.<domain>`): a report. */
  | { take: 'report' }
  /** An address an inbound route takes. */
  | { take: 'route'; route: RoutedRecipient }
  /** Refused with this 550 text (`5.1.1 …`); `refuse: undefined`, the default. */
  | { take: 'refuse'; message?: string };

export interface InboundListenerOptions
  extends
    Omit<InboundConfig, 'sessionTimeoutMs' | 'maxConnectionsPerClient' | 'messagesPerMinutePerClient'>,
    Partial<
      Pick<InboundConfig, 'sessionTimeoutMs' | 'maxConnectionsPerClient' | 'messagesPerMinutePerClient'>
    > {
  /** Decides a recipient (its address as given in RCPT TO); a rejection is a 451 (try again later). */
  decide(address: string): Promise<RecipientDecision>;
  /** For the log line: what it takes mail for. */
  takes: string;
  /**
   * Scores a message that has routed recipients, before its 250 (SPAMD_URL): a route with a
   * `spam_reject_score` at or below the score refuses its recipients. Absent: nothing is scored.
   */
  scoreSpam?: ((raw: ByteChunks) => Promise<SpamVerdict | null>) | undefined;
  /** The name in the greeting and EHLO; the machine's when absent. */
  hostname?: string | undefined;
  /** Stores a message durably (and wakes whoever reads it); the 250 waits for it. */
  store(message: NewInboundMessage): Promise<string>;
  clock: Clock;
  logger: WorkerLogger;
  /** The process's bound on message bytes held at once (SMTP_BODY_MEMORY_LIMIT); none when absent. */
  memory?: SmtpBodyMemory | undefined;
}

export interface InboundListener {
  /** The port it listens on (the configured one, or the one picked for port 0). */
  port: number;
  /** Stops taking connections; open ones get a moment to finish, then are cut. */
  close(): Promise<void>;
}

/** Recipients one message may have (a report goes to one return path; a received mail to a few). */
export const MAX_RECIPIENTS = 50;
/** A connection silent this long is closed (one that never sends DATA holds nothing for longer). */
const SOCKET_TIMEOUT_MS = 60_000;

export async function startInboundListener(options: InboundListenerOptions): Promise<InboundListener> {
  const { logger, clock } = options;
  const memory = options.memory ?? UNBOUNDED_SMTP_BODY_MEMORY;
  const sessionTimeoutMs = options.sessionTimeoutMs ?? DEFAULTS.inbound.sessionTimeoutMs;
  // Messages begun per client address, a minute at a time (the HTTP API's fixed-window counter).
  const messageRate = createRateLimiter({
    limit: options.messagesPerMinutePerClient ?? DEFAULTS.inbound.messagesPerMinutePerClient,
    windowMs: 60_000,
    now: () => clock.now().getTime(),
  });
  // The routed recipients of each session's current message (RSET and a new MAIL FROM start it again).
  const routed = new Map<SMTPServerSession, RoutedRecipient[]>();
  const bounds = createSessionBounds({
    maxPerClient: options.maxConnectionsPerClient ?? DEFAULTS.inbound.maxConnectionsPerClient,
    sessionTimeoutMs,
    servers: () => [server],
    hostname: options.hostname ?? 'Postwire',
    ended: (session) =>
      logger.info(
        { remoteAddress: session.remoteAddress, timeoutMs: sessionTimeoutMs },
        'inbound listener: a session reached its time limit and was closed',
      ),
  });
  const server = new SMTPServer({
    logger: false,
    banner: 'Postwire',
    ...(options.hostname ? { name: options.hostname } : {}),
    authOptional: true,
    disabledCommands: options.tls ? ['AUTH'] : ['AUTH', 'STARTTLS'],
    ...(options.tls ? { key: options.tls.key, cert: options.tls.cert } : {}),
    size: options.maxBytes,
    maxClients: INBOUND_MAX_CONNECTIONS,
    socketTimeout: SOCKET_TIMEOUT_MS,
    closeTimeout: 2000,
    // A DNS lookup per connection would let anyone who connects make us wait on DNS.
    disableReverseLookup: true,
    onConnect: bounds.admit,
    onClose(session) {
      routed.delete(session);
      bounds.release(session);
    },
    onMailFrom(_address, session, callback) {
      routed.set(session, []);
      // Counted per message begun: a client that pipelines messages as fast as it can is slowed to the limit.
      if ((messageRate.take(session.remoteAddress ?? '')?.remaining ?? 0) < 0) {
        callback(smtpError(450, '4.7.1 Too many messages from your address; try again later'));
        return;
      }
      callback();
    },
    onRcptTo(address: SMTPServerAddress, session, callback) {
      if (session.envelope.rcptTo.length >= MAX_RECIPIENTS) {
        callback(smtpError(452, '4.5.3 Too many recipients'));
        return;
      }
      options.decide(address.address).then(
        (decision) => {
          if (decision.take === 'refuse') {
            callback(smtpError(550, decision.message ?? '5.1.1 No such recipient here'));
            return;
          }
          if (decision.take === 'route') {
            const list = routed.get(session) ?? [];
            list.push(decision.route);
            routed.set(session, list);
          }
          callback();
        },
        (error: unknown) => {
          logger.error({ err: error }, 'inbound listener: could not check a recipient domain');
          callback(smtpError(451, '4.3.0 Try again later'));
        },
      );
    },
    onData(stream, session, callback) {
      gatherData(stream, { maxBytes: options.maxBytes, memory }, callback, (raw, _size, answer) => {
        const routes = routed.get(session) ?? [];
        const reports = session.envelope.rcptTo.length - routes.length;
        scored(raw, routes).then((spam) => {
          // Recipients whose route refuses mail scored this high are dropped; with none left, the message is.
          const kept = routes.filter(
            (route) => !spam || route.spamRejectScore === null || spam.score < route.spamRejectScore,
          );
          if (reports === 0 && kept.length === 0) {
            answer(smtpError(550, '5.7.1 Message refused as spam'));
            return;
          }
          const keptAddresses = new Set(kept.map((route) => route.address));
          const message: NewInboundMessage = {
            receivedAt: clock.now().toISOString(),
            mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address.toLowerCase() : '',
            rcptTo: session.envelope.rcptTo
              .map((rcpt) => rcpt.address.toLowerCase())
              .filter(
                (address) => keptAddresses.has(address) || !routes.some((route) => route.address === address),
              ),
            remoteAddress: session.remoteAddress ?? null,
            helo: session.hostNameAppearsAs ?? null,
            routing: routes.length > 0 ? kept : null,
            spam: routes.length > 0 ? spam : null,
            raw,
          };
          store(message, answer);
        });
      });
    },
  });
  const scored = async (raw: ByteChunks, routes: RoutedRecipient[]): Promise<SpamVerdict | null> => {
    if (routes.length === 0 || !options.scoreSpam) return null;
    try {
      return await options.scoreSpam(raw);
    } catch (error) {
      // Scoring is a help, never a gate: a message is taken unscored rather than lost.
      logger.warn({ err: error }, 'inbound listener: a message could not be scored for spam');
      return null;
    }
  };
  const store = (
    message: NewInboundMessage,
    callback: (error: Error | null, message?: string) => void,
  ): void => {
    options.store(message).then(
      // The intake's id (`inb_…`, the one `postwire inbound list --all` shows), said as a queue id: the received
      // emails the API shows (`rcv_…`, one per recipient) are made from it later, when a worker reads it.
      (id) => callback(null, `2.0.0 Ok: queued as ${id}`),
      (error: unknown) => {
        logger.error({ err: error }, 'inbound listener: could not store a received message');
        // Temporary: the sending MTA keeps the report and tries again later.
        callback(smtpError(451, '4.3.0 Could not store the message now; try again later'));
      },
    );
  };
  // A client that resets its connection, or speaks TLS badly, is its own problem: log, never crash.
  server.on('error', (error: NodeJS.ErrnoException) => {
    logger.warn({ err: error }, 'inbound listener: a connection failed');
  });

  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.server.off('error', reject);
      resolve();
    });
  });
  const address = server.server.address();
  const port = address && typeof address === 'object' ? address.port : options.port;
  logger.info({ host: options.host, port }, `Receiving ${options.takes} by SMTP on ${options.host}:${port}`);
  let closing: Promise<void> | undefined;
  return {
    port,
    close: () => (closing ??= new Promise<void>((resolve) => server.close(() => resolve()))),
  };
}
