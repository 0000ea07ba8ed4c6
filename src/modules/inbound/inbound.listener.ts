import { SMTPServer, type SMTPServerAddress } from 'smtp-server';
import type { InboundConfig } from '../../config.ts';
import type { Clock } from '../../lib/clock.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';
import type { NewInboundMessage } from './inbound.repo.ts';

// The SMTP listener that receives what mail systems send back to our return paths: bounce, delay and
// success reports, complaints, and the auto-replies that land there too. Every byte is hostile. It takes
// mail for the bounce domain only, refuses what is too large before storing anything, and answers 250
// only once the message is stored: reading it comes after (the inbound worker), so a crash loses nothing.

export interface InboundListenerOptions extends InboundConfig {
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

/** Connections open at once at most: far above what reports need, far below the process's file limit. */
const MAX_CLIENTS = 5000;
/** Recipients one message may have: a report goes to one return path. */
const MAX_RECIPIENTS = 50;
/** A connection silent this long is closed (one that never sends DATA holds nothing for longer). */
const SOCKET_TIMEOUT_MS = 60_000;

const smtpError = (code: number, message: string) =>
  Object.assign(new Error(message), { responseCode: code });

export async function startInboundListener(options: InboundListenerOptions): Promise<InboundListener> {
  const { logger, clock } = options;
  const domain = options.bounceDomain.toLowerCase();
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
    maxClients: MAX_CLIENTS,
    socketTimeout: SOCKET_TIMEOUT_MS,
    closeTimeout: 2000,
    // A DNS lookup per connection would let anyone who connects make us wait on DNS.
    disableReverseLookup: true,
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
