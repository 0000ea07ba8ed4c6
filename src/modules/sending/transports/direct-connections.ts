// Connections kept between messages in direct delivery (issue 38, "messages per connection"). Opening an SMTP
// connection to a recipient's MX costs a TCP handshake, the greeting, EHLO, STARTTLS with its own handshake
// and EHLO again: more than the transaction it carries for a short message, and large providers count
// connections as well as messages (a connection per message looks like a bulk sender that does not know
// better). So a connection that delivered is kept for the next message to the same server, as Postfix's
// connection cache does, and closed:
//  - after the destination's messages per connection (its limits, shaping.ts), or 5 minutes of use;
//  - when idle for 2 s (Postfix's smtp_connection_cache_time_limit): a paced destination gets no idle
//    connection held open between messages, and a server is never left with one it did not use;
//  - when it would make more connections to the server than the destination's connections at once now (a
//    destination that said "too many connections" has its count lowered: the kept ones over it go);
//  - on any error or a 4xx/5xx for the whole message (the server may be closing it: 421 says so).
// The worker bounds attempts in flight per destination (its lanes): idle connections are reused before a new
// one is opened, so a server sees no more connections than attempts were in flight at once, plus one that is
// still closing; a new connection waits for the server's closing ones to go when the destination's count is
// reached. A kept connection the server closed in the meantime is found when the next message is handed to it:
// if not a byte of that message was read, it goes again over a new connection, in the same attempt; anything
// else is the attempt's outcome as without the cache (a retry: at least once, never lost).
import type { Readable } from 'node:stream';
import SMTPConnection, { type SMTPConnectionOptions } from 'nodemailer/lib/smtp-connection';
import type { SmtpError } from './smtp-result.ts';

/** How long a connection is kept idle for its next message. */
export const IDLE_MS = 2000;
/** A connection is not handed another message after this long (Postfix's smtp_connection_reuse_time_limit). */
export const REUSE_MS = 5 * 60_000;

export interface ConnectionLimits {
  /** Connections to the destination at once, now (shaping's count, under the worker's per-host bound). */
  connections: number;
  /** Messages on one connection; 0 or less: no limit but REUSE_MS. */
  messagesPerConnection: number;
}

/** One message as SMTPConnection.send takes it: the envelope (with its DSN request) and the bytes, as a stream. */
export interface ConnectionMessage {
  envelope: SMTPConnection.Envelope;
  stream(): Readable;
}

interface Kept {
  connection: SMTPConnection;
  openedAt: number;
  messages: number;
  /** Idle in the cache (not in use, not closing). */
  idle: boolean;
  closing: boolean;
  timer: NodeJS.Timeout | undefined;
}

export interface DirectConnections {
  /**
   * Sends one message over a kept connection to `key`'s server, or a new one made with `options`. Resolves with
   * what the server said (SMTPConnection's info), or rejects with its error (an abort when `signal` ends it).
   */
  send(
    key: string,
    options: SMTPConnectionOptions,
    limits: ConnectionLimits,
    message: ConnectionMessage,
    signal: AbortSignal,
  ): Promise<SMTPConnection.SentMessageInfo>;
  /** Closes the idle connections; those in use close when their message is done. */
  close(): void;
}

const abortError = () =>
  Object.assign(new Error('the attempt was aborted'), { name: 'AbortError', code: 'EABORT' }) as SmtpError;

export function createDirectConnections(): DirectConnections {
  /** Every connection to a server (key) from its opening until its socket ended. */
  const servers = new Map<string, Set<Kept>>();
  /** Called when a connection of a server ends (waiters for room to open a new one). */
  const ended = new Map<string, Set<() => void>>();
  let closed = false;

  const keptOf = (key: string) => servers.get(key) ?? new Set<Kept>();

  function quit(kept: Kept): void {
    if (kept.closing) return;
    kept.closing = true;
    kept.idle = false;
    clearTimeout(kept.timer);
    try {
      kept.connection.quit();
    } catch {
      kept.connection.close();
    }
  }

  function open(key: string, options: SMTPConnectionOptions): Kept {
    const connection = new SMTPConnection(options);
    const kept: Kept = {
      connection,
      openedAt: Date.now(),
      messages: 0,
      idle: false,
      closing: false,
      timer: undefined,
    };
    const set = servers.get(key) ?? new Set<Kept>();
    set.add(kept);
    servers.set(key, set);
    // An idle connection's error (the server timed it out) has no message to report to: the end follows.
    connection.on('error', () => {
      kept.closing = true;
      kept.idle = false;
    });
    connection.once('end', () => {
      clearTimeout(kept.timer);
      kept.closing = true;
      kept.idle = false;
      set.delete(kept);
      if (set.size === 0 && servers.get(key) === set) servers.delete(key);
      for (const wake of [...(ended.get(key) ?? [])]) wake();
    });
    return kept;
  }

  /** Waits while the server's connections (open, or still closing) fill the destination's count and some are closing. */
  async function room(key: string, limits: ConnectionLimits, signal: AbortSignal): Promise<void> {
    for (;;) {
      const all = [...keptOf(key)];
      if (all.length < limits.connections || !all.some((kept) => kept.closing)) return;
      if (signal.aborted) throw abortError();
      await new Promise<void>((resolve) => {
        const waiters = ended.get(key) ?? new Set<() => void>();
        ended.set(key, waiters);
        const done = () => {
          waiters.delete(done);
          signal.removeEventListener('abort', done);
          resolve();
        };
        waiters.add(done);
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  function connect(kept: Kept, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        kept.connection.close();
        reject(abortError());
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const fail = (error: SmtpError) => {
        signal.removeEventListener('abort', onAbort);
        kept.connection.close();
        reject(error);
      };
      kept.connection.once('error', fail);
      kept.connection.connect((error?: Error) => {
        signal.removeEventListener('abort', onAbort);
        kept.connection.off('error', fail);
        if (error) fail(error as SmtpError);
        else resolve();
      });
    });
  }

  /** One message over a connection: its info, or its error and whether any of the message was read. */
  function transact(
    kept: Kept,
    message: ConnectionMessage,
    signal: AbortSignal,
  ): Promise<{ info: SMTPConnection.SentMessageInfo } | { error: SmtpError; read: boolean }> {
    return new Promise((resolve) => {
      const stream = message.stream();
      let settled = false;
      const settle = (
        result: { info: SMTPConnection.SentMessageInfo } | { error: SmtpError; read: boolean },
      ) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener('abort', onAbort);
        kept.connection.off('error', onError);
        resolve(result);
      };
      const onAbort = () => {
        kept.connection.close();
        settle({ error: abortError(), read: true });
      };
      // A connection that fails mid-send reports it as an error event as well as (or instead of) the callback.
      const onError = (error: SmtpError) => settle({ error, read: stream.readableDidRead });
      signal.addEventListener('abort', onAbort, { once: true });
      kept.connection.on('error', onError);
      // Fresh each time: SMTPConnection adds to the envelope it is given.
      const envelope = { ...message.envelope, to: [...[message.envelope.to ?? []].flat()] };
      kept.connection.send(envelope, stream, (error, info) => {
        if (error) settle({ error: error as SmtpError, read: stream.readableDidRead });
        else settle({ info });
      });
    });
  }

  /** After a message: kept for the next one, or closed. */
  function release(key: string, kept: Kept, ok: boolean, limits: ConnectionLimits): void {
    kept.messages += 1;
    const perConnection = limits.messagesPerConnection > 0 ? limits.messagesPerConnection : Infinity;
    const keep =
      ok &&
      !closed &&
      !kept.closing &&
      kept.messages < perConnection &&
      Date.now() - kept.openedAt < REUSE_MS &&
      keptOf(key).size <= limits.connections;
    if (!keep) {
      if (ok && !kept.closing) quit(kept);
      else kept.connection.close();
      return;
    }
    kept.idle = true;
    kept.timer = setTimeout(() => quit(kept), IDLE_MS);
    kept.timer.unref();
  }

  function takeIdle(key: string): Kept | undefined {
    for (const kept of keptOf(key)) {
      if (!kept.idle || kept.closing) continue;
      kept.idle = false;
      clearTimeout(kept.timer);
      return kept;
    }
    return undefined;
  }

  return {
    async send(key, options, limits, message, signal) {
      if (signal.aborted) throw abortError();
      const reused = takeIdle(key);
      if (reused) {
        const result = await transact(reused, message, signal);
        if ('info' in result) {
          release(key, reused, true, limits);
          return result.info;
        }
        release(key, reused, false, limits);
        // The server closed it while it was kept, before this message began: a new connection takes it.
        const closedBefore = result.error.responseCode === undefined && !result.read;
        if (!closedBefore || signal.aborted) throw result.error;
      }
      await room(key, limits, signal);
      const kept = open(key, options);
      await connect(kept, signal);
      const result = await transact(kept, message, signal);
      release(key, kept, 'info' in result, limits);
      if ('info' in result) return result.info;
      throw result.error;
    },
    close() {
      closed = true;
      for (const set of servers.values()) for (const kept of set) if (kept.idle) quit(kept);
    },
  };
}
