import { SMTPServer, type SMTPServerAddress } from 'smtp-server';

/** A message as the test SMTP server received it. */
export interface ReceivedMessage {
  /** The envelope sender (MAIL FROM). */
  from: string;
  /** The envelope recipients it accepted (RCPT TO). */
  to: string[];
  raw: string;
  /** The message's bytes as they arrived (after the dot-unstuffing of DATA). */
  bytes: Buffer;
  /** The Message-ID header (with its angle brackets). */
  messageId: string | undefined;
  /** The user the client logged in as, if it did. */
  user: string | undefined;
  /** The address the connection came from (the sender's source IP). */
  remoteAddress: string;
  /** The name the client gave in EHLO/HELO. */
  helo: string;
  /** What the client asked to be told (RFC 3461), when the server offers DSN. */
  dsn: {
    ret?: string | null;
    envid?: string | null;
    recipients: Array<{ notify?: string[]; orcpt?: string }>;
  };
}

/** How the server answers: a 2xx/4xx/5xx code and text. */
export interface SmtpReply {
  code: number;
  message: string;
}

export interface TestSmtpServer {
  port: number;
  messages: ReceivedMessage[];
  /** Connections opened so far (a pooled client opens few). */
  connections: number;
  /** Connections open now, and the most open at once so far. */
  concurrency: { current: number; max: number };
  /** Replies to the next DATA commands, in order; after them messages are accepted (250). */
  scriptData(...replies: SmtpReply[]): void;
  /**
   * Runs before the server answers each accepted DATA (the message is already in `messages`): the 250
   * waits for it, so a test can do something between receipt and the client learning it was accepted.
   */
  beforeAccept(hook: ((message: ReceivedMessage) => Promise<void>) | undefined): void;
  /** Answers RCPT TO for an address (a refusal), or undefined to accept it. */
  onRecipient(decide: (address: string) => SmtpReply | undefined): void;
  /** Resolves once `count` messages have arrived; rejects after `timeoutMs` (default 5 s; Infinity: never). */
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedMessage[]>;
  /** Message-IDs received so far, each once. */
  uniqueMessageIds(): Set<string>;
  close(): Promise<void>;
}

export interface TestSmtpOptions {
  /** A fixed port (to bring a server back where a stopped one was); 0 picks a free one. */
  port?: number;
  /** The loopback address to listen on (default 127.0.0.1): a mail server on port 25 takes one of its own. */
  host?: string;
  /** Offer STARTTLS (with smtp-server's self-signed certificate). Default false. */
  starttls?: boolean;
  /** Require this login (AUTH PLAIN/LOGIN, allowed without TLS for the test). */
  auth?: { user: string; pass: string };
  /** Wait this long before answering each DATA (a slow server). */
  dataDelayMs?: number;
  /** Offer the DSN extension (RFC 3461), as Postfix and most relays do. Default false. */
  dsn?: boolean;
  /** The largest message it takes (SIZE). Default 10 MiB. */
  maxBytes?: number;
}

const replyError = (reply: SmtpReply) =>
  Object.assign(new Error(reply.message), { responseCode: reply.code });

/**
 * A loopback address of a test's own (127.x.y.z), where a mail server can listen on port 25 as real MX
 * hosts do, without colliding with another test's or the machine's.
 */
export const ownLoopbackAddress = (): string =>
  `127.${1 + Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;

/** `count` distinct loopback addresses of the test's own, none of them `taken`. */
export function ownLoopbackAddresses(count: number, taken: readonly string[] = []): string[] {
  const chosen: string[] = [];
  while (chosen.length < count) {
    const address = ownLoopbackAddress();
    if (!taken.includes(address) && !chosen.includes(address)) chosen.push(address);
  }
  return chosen;
}

/** A real SMTP server (smtp-server) on 127.0.0.1 that records what it receives and answers as scripted. */
export async function startSmtpServer(options: TestSmtpOptions = {}): Promise<TestSmtpServer> {
  const messages: ReceivedMessage[] = [];
  const dataReplies: SmtpReply[] = [];
  let decideRecipient: (address: string) => SmtpReply | undefined = () => undefined;
  let acceptHook: ((message: ReceivedMessage) => Promise<void>) | undefined;
  const waiters = new Set<() => void>();
  let connections = 0;
  const concurrency = { current: 0, max: 0 };

  const server = new SMTPServer({
    logger: false,
    banner: 'postwire test server',
    authOptional: !options.auth,
    allowInsecureAuth: true,
    disabledCommands: options.starttls ? [] : ['STARTTLS'],
    // Closing waits this long for clients that keep pooled connections open, then cuts them.
    closeTimeout: 100,
    size: options.maxBytes ?? 10 * 1024 * 1024,
    hideDSN: !options.dsn,
    onConnect(_session, callback) {
      connections += 1;
      concurrency.current += 1;
      concurrency.max = Math.max(concurrency.max, concurrency.current);
      callback();
    },
    onClose() {
      concurrency.current -= 1;
    },
    onAuth(auth, _session, callback) {
      if (options.auth && auth.username === options.auth.user && auth.password === options.auth.pass) {
        callback(null, { user: auth.username });
      } else {
        callback(Object.assign(new Error('Invalid username or password'), { responseCode: 535 }));
      }
    },
    onRcptTo(address: SMTPServerAddress, _session, callback) {
      const reply = decideRecipient(address.address);
      callback(reply ? replyError(reply) : null);
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', async () => {
        if (options.dataDelayMs) await new Promise((resolve) => setTimeout(resolve, options.dataDelayMs));
        const reply = dataReplies.shift();
        if (reply && reply.code >= 400) {
          callback(replyError(reply));
          return;
        }
        const bytes = Buffer.concat(chunks);
        const raw = bytes.toString('utf8');
        const header = raw.split(/\r?\n\r?\n/, 1)[0] ?? '';
        const message: ReceivedMessage = {
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((rcpt) => rcpt.address),
          raw,
          bytes,
          messageId: /^Message-ID:\s*(<[^>]+>)/im.exec(header)?.[1],
          user: typeof session.user === 'string' ? session.user : undefined,
          remoteAddress: session.remoteAddress,
          helo: session.hostNameAppearsAs,
          dsn: {
            ...(session.envelope.dsn ?? {}),
            recipients: session.envelope.rcptTo.map((rcpt) => ({ ...(rcpt.dsn ?? {}) })),
          },
        };
        messages.push(message);
        for (const waiter of waiters) waiter();
        await acceptHook?.(message);
        callback(null, reply?.message ?? 'Ok: queued');
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
    // A client killed mid-transaction (the crash tests SIGKILL the worker) resets its connection; the
    // server reports that as an 'error' event, which without a listener would crash the test process.
    server.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'ECONNRESET' && error.code !== 'EPIPE') throw error;
    });
  });
  const address = server.server.address();
  if (!address || typeof address === 'string') throw new Error('no port');

  return {
    port: address.port,
    messages,
    get connections() {
      return connections;
    },
    concurrency,
    scriptData(...replies) {
      dataReplies.push(...replies);
    },
    beforeAccept(hook) {
      acceptHook = hook;
    },
    onRecipient(decide) {
      decideRecipient = decide;
    },
    waitFor(count, timeoutMs = 5000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (messages.length >= count) {
            waiters.delete(check);
            clearTimeout(timer);
            resolve(messages.slice());
          }
        };
        // Infinity: no deadline of its own (a test run by another process waits for it, bounded by the test's).
        const timer = Number.isFinite(timeoutMs)
          ? setTimeout(() => {
              waiters.delete(check);
              reject(new Error(`expected ${count} messages within ${timeoutMs} ms, got ${messages.length}`));
            }, timeoutMs)
          : undefined;
        waiters.add(check);
        check();
      });
    },
    uniqueMessageIds() {
      return new Set(messages.map((message) => message.messageId ?? ''));
    },
    close() {
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
