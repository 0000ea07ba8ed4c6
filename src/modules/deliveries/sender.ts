import http, { type IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction, type Socket } from 'node:net';
import { createBoundedMemo } from '../../lib/memo.ts';
import { isBlockedAddress, type Resolver } from '../../lib/network-policy.ts';

export const RESPONSE_EXCERPT_BYTES = 4096;

export interface SendRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
  /** Aborts the attempt (the worker stopping). */
  signal?: AbortSignal | undefined;
}

export interface SendResult {
  /** The response status; null when no response came (refused, timed out, blocked…). */
  statusCode: number | null;
  headers: IncomingHttpHeaders;
  /** Up to 4 KiB of the response body, as text; null when there was no response. */
  responseExcerpt: string | null;
  durationMs: number;
  /** Why no response came; null when one did (the status then says how it went). */
  error: string | null;
}

export interface SenderOptions {
  resolver: Resolver;
  /** Allow loopback, private and link-local targets (local development and tests). */
  allowPrivateUrls: boolean;
  /** The whole attempt, from connecting to the response headers, must fit in this. */
  timeoutMs: number;
  maxResponseBytes?: number;
  /** Keep-alive sockets idle this long are closed (default IDLE_SOCKET_MS; tests shorten it). */
  idleSocketMs?: number;
}

export interface Sender {
  send(request: SendRequest): Promise<SendResult>;
  /** Closes the pooled connections. */
  close(): void;
}

/** Idle keep-alive sockets are closed after this: under Node's default 5 s server keep-alive timeout. */
const IDLE_SOCKET_MS = 4000;
/** URLs whose request options a sender keeps (see targetOf). */
const TARGET_CACHE_SIZE = 1000;

interface Target {
  transport: typeof http | typeof https;
  options: http.RequestOptions & https.RequestOptions;
}

/** An attempt in flight: when it runs out, and how to cut it short. */
interface InFlight {
  deadline: number;
  signal: AbortSignal | undefined;
  stop(reason: string): void;
}

class BlockedAddressError extends Error {
  readonly code = 'ERR_BLOCKED_ADDRESS';
}

/**
 * POSTs webhook payloads. Name resolution goes through the injected resolver and every address is checked
 * against the private-network policy right before connecting: a name that resolved to a public address
 * when the webhook was saved may resolve to 127.0.0.1 or the metadata address now (DNS rebinding).
 */
export function createSender(options: SenderOptions): Sender {
  const maxBytes = options.maxResponseBytes ?? RESPONSE_EXCERPT_BYTES;
  // Keep-alive pools: most deliveries go to a few hosts again and again.
  const httpAgent = new http.Agent({ keepAlive: true });
  const httpsAgent = new https.Agent({ keepAlive: true });
  const idleSocketMs = options.idleSocketMs ?? IDLE_SOCKET_MS;
  const idleSweepMs = Math.max(1, Math.floor(idleSocketMs / 4));
  /**
   * Idle sockets are closed after idleSocketMs (within a quarter of it), before Node's default 5 s server
   * keep-alive timeout, so a reused socket is rarely one the peer has just closed. A sweep does it rather
   * than the agents' own `timeout`, which re-armed a socket timer twice per request (about a sixth of the
   * sender's CPU per request). A socket counts as idle since the sweep that first saw it free with the
   * bytes it has written so far: any request in between writes more.
   */
  const idleSince = new WeakMap<Socket, { at: number; written: number }>();
  const idleSweep = setInterval(() => {
    const now = performance.now();
    for (const agent of [httpAgent, httpsAgent]) {
      for (const sockets of Object.values(agent.freeSockets)) {
        for (const socket of sockets ?? []) {
          const seen = idleSince.get(socket);
          if (seen === undefined || seen.written !== socket.bytesWritten) {
            idleSince.set(socket, { at: now, written: socket.bytesWritten });
          } else if (now - seen.at >= idleSocketMs - idleSweepMs) {
            socket.destroy();
          }
        }
      }
    }
  }, idleSweepMs).unref();

  const lookup: LookupFunction = (hostname, lookupOptions, callback) => {
    options.resolver(hostname).then(
      (resolved) => {
        let addresses = resolved.filter((address) => isIP(address) !== 0);
        if (addresses.length === 0) {
          const error = Object.assign(new Error(`could not resolve '${hostname}'`), { code: 'ENOTFOUND' });
          callback(error, '', 0);
          return;
        }
        if (!options.allowPrivateUrls) {
          const bad = addresses.find(isBlockedAddress);
          if (bad) {
            callback(
              new BlockedAddressError(
                `refused to connect: '${hostname}' resolves to ${bad}, a loopback, private or link-local address`,
              ),
              '',
              0,
            );
            return;
          }
        }
        if (lookupOptions.family === 4 || lookupOptions.family === 6) {
          const family = lookupOptions.family;
          const matching = addresses.filter((address) => isIP(address) === family);
          if (matching.length > 0) addresses = matching;
        }
        if (lookupOptions.all) {
          callback(
            null,
            addresses.map((address) => ({ address, family: isIP(address) })),
          );
        } else {
          callback(null, addresses[0]!, isIP(addresses[0]!));
        }
      },
      (error: unknown) => callback(error as NodeJS.ErrnoException, '', 0),
    );
  };

  /**
   * Where each URL goes, worked out once: most deliveries go to a few URLs again and again, and parsing the
   * URL into request options cost about as much as the rest of the request's own JavaScript. A URL that
   * cannot be attempted is kept as the reason why (the policy is fixed for the sender's life).
   */
  const targetOf = createBoundedMemo<string, Target | string>(TARGET_CACHE_SIZE);
  function resolveTarget(href: string): Target | string {
    let url: URL;
    try {
      url = new URL(href);
    } catch {
      return 'invalid url';
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') return `unsupported protocol ${url.protocol}`;
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const literal = isIP(host) !== 0;
    // An IP literal never goes through lookup, so it is judged here.
    if (literal && !options.allowPrivateUrls && isBlockedAddress(host)) {
      return `refused to connect: ${host} is a loopback, private or link-local address`;
    }
    const secure = url.protocol === 'https:';
    return {
      transport: secure ? https : http,
      options: {
        method: 'POST',
        host,
        port: url.port === '' ? (secure ? 443 : 80) : Number(url.port),
        path: `${url.pathname}${url.search}`,
        agent: secure ? httpsAgent : httpAgent,
        ...(literal ? {} : { lookup }),
        // What the URL's own credentials say, as node:http would have sent them from a URL.
        ...(url.username || url.password
          ? { auth: `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}` }
          : {}),
      },
    };
  }

  /**
   * Attempts in flight, oldest first. They all share one timeout, so they run out in the order they started:
   * one timer, armed for the oldest, serves them all (a timer per attempt cost more than the attempt's own
   * bookkeeping).
   */
  const inFlight = new Set<InFlight>();
  let deadlineTimer: NodeJS.Timeout | undefined;
  function armDeadline(): void {
    if (deadlineTimer !== undefined) return;
    const oldest = inFlight.values().next().value;
    if (oldest === undefined) return;
    // Unreferenced: the attempts' own sockets keep the process alive, not the timer of one that has ended.
    deadlineTimer = setTimeout(expire, Math.max(1, oldest.deadline - performance.now())).unref();
  }
  function expire(): void {
    deadlineTimer = undefined;
    const now = performance.now();
    for (const attempt of inFlight) {
      if (attempt.deadline > now) break;
      attempt.stop(`timed out after ${options.timeoutMs} ms`);
    }
    armDeadline();
  }

  /** The worker passes one stop signal for all its attempts: one listener per signal, not per attempt. */
  const watchedSignals = new WeakSet<AbortSignal>();
  function watch(signal: AbortSignal): void {
    if (watchedSignals.has(signal)) return;
    watchedSignals.add(signal);
    signal.addEventListener(
      'abort',
      () => {
        for (const attempt of inFlight) {
          if (attempt.signal === signal) attempt.stop('aborted: the worker is stopping');
        }
      },
      { once: true },
    );
  }

  function send(request: SendRequest): Promise<SendResult> {
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    const target = targetOf(request.url, () => resolveTarget(request.url));
    if (typeof target === 'string' || request.signal?.aborted) {
      const error = typeof target === 'string' ? target : 'aborted: the worker is stopping';
      return Promise.resolve({
        statusCode: null,
        headers: {},
        responseExcerpt: null,
        durationMs: elapsed(),
        error,
      });
    }
    if (request.signal) watch(request.signal);

    return new Promise<SendResult>((resolve) => {
      let statusCode: number | null = null;
      let responseHeaders: IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      let received = 0;
      /** Why the attempt was cut short by this side (timed out, stopping): it outranks the socket's error. */
      let stoppedWith: string | undefined;

      const attempt: InFlight = {
        deadline: started + options.timeoutMs,
        signal: request.signal,
        stop(reason) {
          stoppedWith ??= reason;
          req.destroy(new Error(reason));
        },
      };
      const finish = (error: string | null) => {
        if (!inFlight.delete(attempt)) return;
        resolve({
          statusCode,
          headers: responseHeaders,
          responseExcerpt:
            statusCode === null ? null : chunks.length === 0 ? '' : Buffer.concat(chunks).toString('utf8'),
          durationMs: elapsed(),
          // Once the status line has arrived, the status decides; a body cut short changes nothing.
          error: statusCode === null ? error : null,
        });
      };

      const req = target.transport.request(
        {
          ...target.options,
          headers: { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) },
        },
        (response) => {
          statusCode = response.statusCode ?? null;
          responseHeaders = response.headers;
          response.on('data', (chunk: Buffer) => {
            const room = maxBytes - received;
            if (room > 0) {
              const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
              chunks.push(part);
              received += part.length;
            }
            // Stop reading once the excerpt is full: the rest of a large body is of no use.
            if (received >= maxBytes) {
              response.destroy();
              finish(null);
            }
          });
          response.on('end', () => finish(null));
          response.on('close', () => finish(null));
          response.on('error', () => finish(null));
        },
      );
      inFlight.add(attempt);
      armDeadline();
      req.on('error', (error: NodeJS.ErrnoException) => finish(stoppedWith ?? describeError(error)));
      req.end(request.body);
    });
  }

  return {
    send,
    close() {
      clearTimeout(deadlineTimer);
      clearInterval(idleSweep);
      httpAgent.destroy();
      httpsAgent.destroy();
    },
  };
}

function describeError(error: NodeJS.ErrnoException): string {
  if (error instanceof BlockedAddressError) return error.message;
  switch (error.code) {
    case 'ECONNREFUSED':
      return 'connection refused (ECONNREFUSED)';
    case 'ECONNRESET':
      return 'connection reset by the receiver (ECONNRESET)';
    case 'ENOTFOUND':
      return error.message.startsWith('could not resolve') ? error.message : 'could not resolve the host';
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `host unreachable (${error.code})`;
    default:
      return error.code ? `${error.message} (${error.code})` : error.message;
  }
}
