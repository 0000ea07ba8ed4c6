import { SMTPServer, type SMTPServerAddress, type SMTPServerSession } from 'smtp-server';
import { DEFAULTS, INBOUND_MAX_CONNECTIONS, type InboundConfig } from '../../config.ts';
import type { Clock } from '../../lib/clock.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';
import type { NewInboundMessage } from './inbound.repo.ts';

// The SMTP listener that receives what mail systems send back to our return paths: bounce, delay and
// success reports, complaints, and the auto-replies that land there too. Every byte is hostile. It takes
// mail for the bounce domain only, refuses what is too large before storing anything, and answers 250
// only once the message is stored: reading it comes after (the inbound worker), so a crash loses nothing.
// No one holds it for long: a session ends at its time limit whatever it is doing (a client that trickles a
// byte every few seconds never trips the idle timeout), and one client address holds a few sessions at most.

export interface InboundListenerOptions
  extends
    Omit<InboundConfig, 'sessionTimeoutMs' | 'maxConnectionsPerClient'>,
    Partial<Pick<InboundConfig, 'sessionTimeoutMs' | 'maxConnectionsPerClient'>> {
  /**
   * Whether mail for this domain (lowercased) is ours to take: BOUNCE_DOMAIN, and the return-path domains
   * of the sending domains we hold (`bounces.<domain>`). Recipients elsewhere are refused (550).
   */
  acceptsDomain(domain: string): boolean | Promise<boolean>;
  /** For the log line: BOUNCE_DOMAIN. */
  bounceDomain: string;
  /** The name in the greeting and EHLO; the machine's when absent. */
  hostname?: string | undefined;
  /** Stores a message durably (and wakes whoever reads it); the 250 waits for it. */
  store(message: NewInboundMessage): Promise<string>;
  clock: Clock;
  logger: WorkerLogger;
}

export interface InboundListener {
  /** The port it listens on (the configured one, or the one picked for port 0). */
  port: number;
  /** Stops taking connections; open ones get a moment to finish, then are cut. */
  close(): Promise<void>;
}

/** Recipients one message may have: a report goes to one return path. */
const MAX_RECIPIENTS = 50;
/** A connection silent this long is closed (one that never sends DATA holds nothing for longer). */
const SOCKET_TIMEOUT_MS = 60_000;

const smtpError = (code: number, message: string) =>
  Object.assign(new Error(message), { responseCode: code });

export async function startInboundListener(options: InboundListenerOptions): Promise<InboundListener> {
  const { logger, clock } = options;
  const domain = options.bounceDomain.toLowerCase();
  const sessionTimeoutMs = options.sessionTimeoutMs ?? DEFAULTS.inbound.sessionTimeoutMs;
  const maxPerClient = options.maxConnectionsPerClient ?? DEFAULTS.inbound.maxConnectionsPerClient;
  // Sessions admitted (onConnect said yes), until onClose: their address, for the per-address count, and the
  // timer of their time limit. A connection refused, or closed before it was greeted, is in neither.
  const admitted = new Map<SMTPServerSession, { address: string; limit: NodeJS.Timeout }>();
  const openPerAddress = new Map<string, number>();
  const endSession = (session: SMTPServerSession) => {
    for (const connection of server.connections) {
      if (connection.session !== session) continue;
      logger.info(
        { remoteAddress: session.remoteAddress, timeoutMs: sessionTimeoutMs },
        'inbound listener: a session reached its time limit and was closed',
      );
      // A 421 closes the connection (smtp-server ends it, and destroys it if the client does not close its side).
      connection.send(421, `${options.hostname ?? 'Postwire'} Session time limit reached, closing`);
    }
  };
  const accepts = async (address: string): Promise<boolean> => {
    const at = address.lastIndexOf('@');
    return at >= 0 && (await options.acceptsDomain(address.slice(at + 1).toLowerCase()));
  };
  const server = new SMTPServer({
    logger: false,
    banner: 'Postwire report receiver',
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
    onConnect(session, callback) {
      const address = session.remoteAddress ?? '';
      const open = openPerAddress.get(address) ?? 0;
      if (open >= maxPerClient) {
        callback(smtpError(421, '4.7.0 Too many connections from your address; try again later'));
        return;
      }
      openPerAddress.set(address, open + 1);
      const limit = setTimeout(() => endSession(session), sessionTimeoutMs);
      limit.unref();
      admitted.set(session, { address, limit });
      callback();
    },
    onClose(session) {
      const entry = admitted.get(session);
      if (!entry) return;
      admitted.delete(session);
      clearTimeout(entry.limit);
      const left = (openPerAddress.get(entry.address) ?? 1) - 1;
      if (left > 0) openPerAddress.set(entry.address, left);
      else openPerAddress.delete(entry.address);
    },
    onRcptTo(address: SMTPServerAddress, session, callback) {
      if (session.envelope.rcptTo.length >= MAX_RECIPIENTS) {
        callback(smtpError(452, '4.5.3 Too many recipients'));
        return;
      }
      accepts(address.address).then(
        (ours) =>
          callback(
            ours ? undefined : smtpError(550, '5.1.1 This server takes mail for its bounce domains only'),
          ),
        (error: unknown) => {
          logger.error({ err: error }, 'inbound listener: could not check a recipient domain');
          callback(smtpError(451, '4.3.0 Try again later'));
        },
      );
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      let size = 0;
      stream.on('data', (chunk: Buffer) => {
        size += chunk.length;
        // Past the limit nothing more is kept: the rest is read and dropped so the client gets its 552.
        if (size <= options.maxBytes) chunks.push(chunk);
      });
      stream.on('error', (error: Error) => callback(error));
      stream.on('end', () => {
        if (stream.sizeExceeded || size > options.maxBytes) {
          callback(smtpError(552, `5.3.4 Message too big: the limit is ${options.maxBytes} bytes`));
          return;
        }
        const message: NewInboundMessage = {
          receivedAt: clock.now().toISOString(),
          mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address.toLowerCase() : '',
          rcptTo: session.envelope.rcptTo.map((rcpt) => rcpt.address.toLowerCase()),
          remoteAddress: session.remoteAddress ?? null,
          raw: Buffer.concat(chunks),
        };
        options.store(message).then(
          (id) => callback(null, `2.0.0 Ok: stored as ${id}`),
          (error: unknown) => {
            logger.error({ err: error }, 'inbound listener: could not store a received message');
            // Temporary: the sending MTA keeps the report and tries again later.
            callback(smtpError(451, '4.3.0 Could not store the message now; try again later'));
          },
        );
      });
    },
  });
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
  logger.info(
    { host: options.host, port, domain },
    `Receiving reports for ${domain} by SMTP on ${options.host}:${port}`,
  );
  let closing: Promise<void> | undefined;
  return {
    port,
    close: () => (closing ??= new Promise<void>((resolve) => server.close(() => resolve()))),
  };
}
