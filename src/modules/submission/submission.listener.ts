import { isIPv4, isIPv6 } from 'node:net';
import { SMTPServer, type SMTPServerAuthentication, type SMTPServerSession } from 'smtp-server';
import type { RateLimiter } from '../../http/rate-limit.ts';
import { parseAddress } from '../../lib/addresses.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import { DEFAULTS, SUBMISSION_MAX_CONNECTIONS } from '../../config.ts';
import {
  gatherData,
  type SmtpBodyMemory,
  smtpError,
  UNBOUNDED_SMTP_BODY_MEMORY,
} from '../../lib/smtp-data.ts';
import { createSessionBounds } from '../../lib/smtp-sessions.ts';
import { DomainError, RetryLaterError } from '../../lib/errors.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';
import { MAX_RECIPIENTS } from '../emails/emails.service.ts';
import { SubmissionRefusal } from './submitted-message.ts';

// SMTP submission (RFC 6409): applications that speak only SMTP send through Postwire. AUTH PLAIN or LOGIN
// with an API key as the password (the username is free text, kept with the email); only over TLS, except
// from loopback when the operator allows it for development. Each message becomes an email in one
// transaction before the 250 (`submit`), under the same rules as the API; a failing store is a 451, so the
// client keeps the message and tries again. Sessions are bounded as the inbound listener's: a few per client
// address, and a time limit (SUBMISSION_MAX_CONNECTIONS_PER_CLIENT, SUBMISSION_SESSION_TIMEOUT).

/** Who authenticated a session: the key's project, and the key (checked again at each message). */
export interface SubmissionCaller {
  projectId: string;
  keyId: string;
  /** The one domain the key may send from (a domain-limited sending key); null: any. */
  domainId: string | null;
  username: string;
}

export interface SubmissionListenerOptions {
  host: string;
  /** STARTTLS submission (587); undefined: not opened. */
  port: number | undefined;
  /** Implicit TLS submission (465); undefined: not opened. */
  tlsPort: number | undefined;
  tls: { cert: string; key: string } | undefined;
  allowPlainLoopback: boolean;
  maxBytes: number;
  /** The process's bound on message bytes held at once (SMTP_BODY_MEMORY_LIMIT), shared with the inbound listener; none when absent. */
  memory?: SmtpBodyMemory | undefined;
  /** A session still open this long is ended with a 421; DEFAULTS.submission's when absent. */
  sessionTimeoutMs?: number | undefined;
  /** Sessions one client address may hold at once, both ports together; DEFAULTS.submission's when absent. */
  maxConnectionsPerClient?: number | undefined;
  hostname?: string | undefined;
  /**
   * The caller behind an API key; undefined for a key that is unknown or revoked. Rejects with a
   * SubmissionRefusal for a key that exists but may not send (its reply says why).
   */
  authenticate(username: string, password: string): Promise<SubmissionCaller | undefined>;
  /** Whether the session's key may still send: asked at MAIL and again at the end of DATA, before the store. */
  stillValid(caller: SubmissionCaller): Promise<boolean>;
  /**
   * Whether a message to these recipients (those accepted so far and the next) fits the daily limit: the
   * early answer at RCPT, so the client delivers to the recipients that fit; the store checks again.
   */
  withinDailyLimit(caller: SubmissionCaller, recipients: readonly string[]): Promise<boolean>;
  /** Stores the message as an email (before the 250); resolves to the reply's text. */
  submit(
    caller: SubmissionCaller,
    envelope: { from: string; to: string[] },
    raw: ByteChunks,
  ): Promise<string>;
  /** Failed AUTHs per client address; past the limit the address is refused before its key is checked. */
  failedAuthLimiter: RateLimiter;
  logger: WorkerLogger;
}

export interface SubmissionListener {
  /** The ports it listens on (the configured ones, or those picked for port 0). */
  port: number | undefined;
  tlsPort: number | undefined;
  close(): Promise<void>;
}

/** The reply to a message whose session's key was revoked since AUTH (at MAIL, and at the end of DATA). */
const KEY_REVOKED = '5.7.8 The API key was revoked';
/** A connection silent this long is closed. */
const SOCKET_TIMEOUT_MS = 60_000;

const isLoopback = (address: string | undefined) =>
  address !== undefined &&
  ((isIPv4(address) && address.startsWith('127.')) ||
    (isIPv6(address) && (address === '::1' || address.startsWith('::ffff:127.'))));

/** What a refused message is answered with: the client's fault 5xx with why, ours 451. */
function replyFor(error: unknown, logger: WorkerLogger): Error {
  if (error instanceof SubmissionRefusal) return smtpError(error.responseCode, error.message);
  if (error instanceof RetryLaterError) return smtpError(452, `4.5.3 ${error.message}`);
  if (error instanceof DomainError) {
    // A From domain the project (or a domain-limited key) may not send as is a policy refusal (5.7.1); anything else is the message's.
    const status =
      error.code.startsWith('sender_domain_') || error.kind === 'conflict' || error.kind === 'forbidden'
        ? '5.7.1'
        : '5.6.0';
    return smtpError(550, `${status} ${error.message}${error.param ? ` (${error.param})` : ''}`);
  }
  logger.error({ err: error }, 'submission: could not store a submitted message');
  return smtpError(451, '4.3.0 Could not store the message now; try again later');
}

export async function startSubmissionListener(
  options: SubmissionListenerOptions,
): Promise<SubmissionListener> {
  const { logger } = options;
  const callers = new WeakMap<SMTPServerSession, SubmissionCaller>();
  const sessionTimeoutMs = options.sessionTimeoutMs ?? DEFAULTS.submission.sessionTimeoutMs;
  // Bounded as the inbound listener's are: a client address holds a few sessions (on both ports together), and
  // no session, authenticated or not, outlives its time limit.
  const bounds = createSessionBounds({
    maxPerClient: options.maxConnectionsPerClient ?? DEFAULTS.submission.maxConnectionsPerClient,
    sessionTimeoutMs,
    servers: () => servers,
    hostname: options.hostname ?? 'Postwire',
    ended: (session) =>
      logger.info(
        { remoteAddress: session.remoteAddress, timeoutMs: sessionTimeoutMs },
        'submission: a session reached its time limit and was closed',
      ),
  });

  const handlers = (secure: boolean) => ({
    logger: false as const,
    banner: 'Postwire submission',
    ...(options.hostname ? { name: options.hostname } : {}),
    secure,
    ...(options.tls ? { key: options.tls.key, cert: options.tls.cert } : {}),
    disabledCommands: options.tls ? [] : ['STARTTLS'],
    authMethods: ['PLAIN', 'LOGIN'],
    authRequiredMessage: '5.7.0 Authentication required: AUTH with an API key as the password',
    // Whether AUTH may go in the clear is decided per connection below (loopback, when allowed).
    allowInsecureAuth: true,
    size: options.maxBytes,
    maxClients: SUBMISSION_MAX_CONNECTIONS,
    socketTimeout: SOCKET_TIMEOUT_MS,
    closeTimeout: 2000,
    disableReverseLookup: true,
    onConnect: bounds.admit,
    onClose: bounds.release,
    onAuth(
      auth: SMTPServerAuthentication,
      session: SMTPServerSession,
      callback: (error: Error | null | undefined, response?: { user: unknown }) => void,
    ) {
      const address = session.remoteAddress ?? '';
      if (!session.secure && !(options.allowPlainLoopback && isLoopback(address))) {
        callback(smtpError(538, '5.7.11 Encryption required: use STARTTLS (or port 465) before AUTH'));
        return;
      }
      if (options.failedAuthLimiter.exhausted(address)) {
        callback(smtpError(454, '4.7.0 Too many failed authentications from your address; try again later'));
        return;
      }
      options.authenticate(auth.username ?? '', auth.password ?? '').then(
        (caller) => {
          if (!caller) {
            options.failedAuthLimiter.take(address);
            callback(
              smtpError(535, '5.7.8 Authentication failed: the password must be an API key that may send'),
            );
            return;
          }
          callers.set(session, caller);
          callback(null, { user: caller.keyId });
        },
        (error: unknown) => {
          if (error instanceof SubmissionRefusal) {
            callback(smtpError(error.responseCode, error.message));
            return;
          }
          logger.error({ err: error }, 'submission: could not check a key');
          callback(smtpError(454, '4.7.0 Temporary authentication failure'));
        },
      );
    },
    onMailFrom(_address: unknown, session: SMTPServerSession, callback: (error?: Error | null) => void) {
      const caller = callers.get(session);
      if (!caller) {
        callback(smtpError(530, '5.7.0 Authentication required'));
        return;
      }
      options.stillValid(caller).then(
        (valid) => callback(valid ? undefined : smtpError(535, KEY_REVOKED)),
        (error: unknown) => callback(replyFor(error, logger)),
      );
    },
    onRcptTo(
      address: { address: string },
      session: SMTPServerSession,
      callback: (error?: Error | null) => void,
    ) {
      if (session.envelope.rcptTo.length >= MAX_RECIPIENTS) {
        callback(smtpError(452, `4.5.3 At most ${MAX_RECIPIENTS} recipients per message`));
        return;
      }
      const parsed = parseAddress(address.address);
      if (!parsed.ok || parsed.value.name !== null) {
        callback(smtpError(553, `5.1.3 ${address.address} is not an address Postwire can send to`));
        return;
      }
      const accepted = session.envelope.rcptTo.map((rcpt) => rcpt.address);
      options.withinDailyLimit(callers.get(session)!, [...accepted, address.address]).then(
        (fits) =>
          callback(
            fits
              ? undefined
              : smtpError(
                  452,
                  '4.5.3 The daily sending limit is reached for this recipient; it resets at midnight UTC',
                ),
          ),
        (error: unknown) => callback(replyFor(error, logger)),
      );
    },
    onData(
      stream: NodeJS.ReadableStream & { sizeExceeded?: boolean },
      session: SMTPServerSession,
      callback: (error: Error | null, message?: string) => void,
    ) {
      const limits = { maxBytes: options.maxBytes, memory: options.memory ?? UNBOUNDED_SMTP_BODY_MEMORY };
      gatherData(stream, limits, callback, (raw, _size, answer) => {
        const caller = callers.get(session)!;
        const envelope = {
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((rcpt) => rcpt.address),
        };
        // The key again, now the message is in (MAIL's check may be minutes old): revoked meanwhile, nothing is stored.
        options
          .stillValid(caller)
          .then((valid) => {
            if (!valid) throw new SubmissionRefusal(535, KEY_REVOKED);
            return options.submit(caller, envelope, raw);
          })
          .then(
            (reply) => answer(null, reply),
            (error: unknown) => answer(replyFor(error, logger)),
          );
      });
    },
  });

  const servers: SMTPServer[] = [];
  const listen = async (secure: boolean, port: number): Promise<number> => {
    const server = new SMTPServer(handlers(secure));
    server.on('error', (error: Error) => logger.warn({ err: error }, 'submission: a connection failed'));
    await new Promise<void>((resolve, reject) => {
      server.server.once('error', reject);
      server.listen(port, options.host, () => {
        server.server.off('error', reject);
        resolve();
      });
    });
    servers.push(server);
    const address = server.server.address();
    return address && typeof address === 'object' ? address.port : port;
  };
  const port = options.port === undefined ? undefined : await listen(false, options.port);
  const tlsPort = options.tlsPort === undefined ? undefined : await listen(true, options.tlsPort);
  logger.info(
    { host: options.host, port, tlsPort },
    `SMTP submission on ${options.host}:${[port && `${port} (${options.tls ? 'STARTTLS' : 'no TLS: AUTH from loopback only'})`, tlsPort && `${tlsPort} (TLS)`].filter(Boolean).join(' and ')}`,
  );
  let closing: Promise<void> | undefined;
  return {
    port,
    tlsPort,
    close: () =>
      (closing ??= Promise.all(
        servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))),
      ).then(() => undefined)),
  };
}
