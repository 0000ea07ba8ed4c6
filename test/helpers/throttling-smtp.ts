import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { SMTPServer } from 'smtp-server';
import type { TestApp } from './app.ts';
import type { TestDnsServer } from './dns.ts';
import { ownLoopbackAddress } from './smtp.ts';

/**
 * A mail server on a loopback address of its own, port 25, behaving as a large provider does towards a
 * sender that goes too fast: more than `connections` at once are refused at the greeting ("421 4.7.0 Too
 * many concurrent SMTP connections"), and past `perMinute` messages in a minute of `now` (the test's clock)
 * MAIL FROM is answered `421 4.7.28 … rate limited` (Gmail's text). Without either limit, it takes all.
 */
export interface ThrottlingServer {
  address: string;
  /** Message recipients accepted, in arrival order. */
  received: string[];
  /** The address each accepted message's connection came from, in the same order. */
  receivedFrom: string[];
  /** The address and time (`now`) of each message refused for the rate. */
  refusedFrom: Array<{ from: string; at: number }>;
  /** Connections refused for the cap, and messages refused for the rate, each with the time it happened. */
  refusedConnections: number[];
  refusedMessages: number[];
  /** The most connections open at once. */
  maxOpen: number;
  /**
   * Every connection attempt: when (`now`), and how many were asked for at once counting it (the open ones
   * and itself: above the cap, it was the one refused). What "never more than its cap after the first
   * deferrals" is read from.
   */
  attempts: Array<{ at: number; atOnce: number; from: string }>;
  /** Messages accepted on each connection that took any, in the order the connections closed. */
  messagesPerConnection: number[];
  /** Connections dropped at a message after their first (`dropKept`). */
  dropped: number;
  close(): Promise<void>;
}

export async function startThrottlingServer(options: {
  address: string;
  now: () => number;
  connections?: number;
  perMinute?: number;
  /** Called on each message accepted (a bench times arrivals with it). */
  onReceived?: () => void;
  /**
   * Drops the connection, without a reply, when a message after its first begins on it (MAIL FROM): what a
   * server that timed out an idle connection does to a client that hands it the next message at that moment.
   */
  dropKept?: boolean;
  /**
   * The limits apply only to connections from this address (a provider that throttles one sending IP): the
   * others are taken at any pace (the connection cap still counts every connection open).
   */
  onlyFrom?: string;
}): Promise<ThrottlingServer> {
  const limited = (session: { remoteAddress: string }) =>
    options.onlyFrom === undefined || session.remoteAddress === options.onlyFrom;
  let open = 0;
  const perMinute = new Map<number, number>();
  const state: Omit<ThrottlingServer, 'close'> = {
    address: options.address,
    received: [],
    receivedFrom: [],
    refusedFrom: [],
    refusedConnections: [],
    refusedMessages: [],
    maxOpen: 0,
    attempts: [],
    messagesPerConnection: [],
    dropped: 0,
  };
  const taken = new WeakMap<object, number>();
  const reply = (code: number, message: string) => Object.assign(new Error(message), { responseCode: code });
  const server = new SMTPServer({
    logger: false,
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    closeTimeout: 100,
    onConnect(session, callback) {
      state.attempts.push({ at: options.now(), atOnce: open + 1, from: session.remoteAddress });
      if (options.connections !== undefined && open >= options.connections && limited(session)) {
        state.refusedConnections.push(options.now());
        callback(
          reply(421, '4.7.0 Too many concurrent SMTP connections from this IP address; try again later'),
        );
        return;
      }
      (session as { counted?: boolean }).counted = true;
      open += 1;
      state.maxOpen = Math.max(state.maxOpen, open);
      callback();
    },
    onClose(session) {
      if (!(session as { counted?: boolean }).counted) return;
      open -= 1;
      const messages = taken.get(session) ?? 0;
      if (messages > 0) state.messagesPerConnection.push(messages);
    },
    onMailFrom(_address, session, callback) {
      if (options.dropKept && (session.transaction ?? 1) > 1) {
        const connections = (server as unknown as { connections: Set<{ session: unknown; _socket: Socket }> })
          .connections;
        const connection = [...connections].find((entry) => entry.session === session);
        if (connection) {
          state.dropped += 1;
          connection._socket.destroy();
          return;
        }
      }
      const minute = Math.floor(options.now() / 60_000);
      const count = perMinute.get(minute) ?? 0;
      if (!limited(session)) {
        callback();
        return;
      }
      if (options.perMinute !== undefined && count >= options.perMinute) {
        state.refusedMessages.push(options.now());
        state.refusedFrom.push({ from: session.remoteAddress, at: options.now() });
        callback(
          reply(
            421,
            '4.7.28 [127.0.0.1] Our system has detected an unusual rate of unsolicited mail originating from your IP address. To protect our users from spam, mail sent from your IP address has been temporarily rate limited.',
          ),
        );
        return;
      }
      perMinute.set(minute, count + 1);
      callback();
    },
    onData(stream, session, callback) {
      stream.resume();
      stream.on('end', () => {
        state.received.push(...session.envelope.rcptTo.map((rcpt) => rcpt.address));
        state.receivedFrom.push(...session.envelope.rcptTo.map(() => session.remoteAddress));
        taken.set(session, (taken.get(session) ?? 0) + 1);
        callback(null, 'Ok: queued');
        options.onReceived?.();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(25, options.address, () => resolve());
    server.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'ECONNRESET' && error.code !== 'EPIPE') throw error;
    });
  });
  return Object.assign(state, {
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }) as ThrottlingServer;
}

/** `u<from>@domain` … `u<from + count - 1>@domain`: a batch of recipients at one destination. */
export const numberedAddresses = (domain: string, from: number, count: number): string[] =>
  Array.from({ length: count }, (_, i) => `u${from + i}@${domain}`);

/** One short email to each address, accepted in one batch request; their ids. */
export async function sendEach(app: TestApp, to: readonly string[]): Promise<string[]> {
  const response = await app.request('POST', '/v1/emails/batch', {
    body: to.map((address) => ({ from: 'ada@example.com', to: address, subject: 's', text: 't' })),
  });
  assert.equal(response.status, 202, JSON.stringify(response.body));
  return response.body.data.map((entry: { id: string }) => entry.id);
}

/**
 * Each domain's MX, `mx.<domain>`, on a loopback address of its own (distinct), published on the test DNS
 * server; the addresses, in the domains' order, for the servers to listen on.
 */
export function publishOwnMx<const Domains extends string[]>(
  dns: TestDnsServer,
  ...domains: Domains
): { [K in keyof Domains]: string } {
  const addresses: string[] = [];
  for (const domain of domains) {
    let address = ownLoopbackAddress();
    while (addresses.includes(address)) address = ownLoopbackAddress();
    addresses.push(address);
    dns.add(domain, { type: 'MX', exchange: `mx.${domain}`, priority: 10 });
    dns.add(`mx.${domain}`, { type: 'A', address });
  }
  return addresses as { [K in keyof Domains]: string };
}
