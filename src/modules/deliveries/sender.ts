import http, { type IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
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
}

export interface Sender {
  send(request: SendRequest): Promise<SendResult>;
  /** Closes the pooled connections. */
  close(): void;
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
  // Keep-alive pools: most deliveries go to a few hosts again and again. Idle sockets are closed after 4 s,
  // before Node's default 5 s server keep-alive timeout, so a reused socket is rarely one the peer has
  // just closed.
  const agentOptions = { keepAlive: true, timeout: 4000, maxFreeSockets: 256, scheduling: 'lifo' as const };
  const httpAgent = new http.Agent(agentOptions);
  const httpsAgent = new https.Agent(agentOptions);

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

  function send(request: SendRequest): Promise<SendResult> {
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    const failed = (error: string): SendResult => ({
      statusCode: null,
      headers: {},
      responseExcerpt: null,
      durationMs: elapsed(),
      error,
    });

    let url: URL;
    try {
      url = new URL(request.url);
    } catch {
      return Promise.resolve(failed('invalid url'));
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') {
      return Promise.resolve(failed(`unsupported protocol ${url.protocol}`));
    }
    // An IP literal never goes through lookup, so it is judged here.
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (!options.allowPrivateUrls && isIP(host) && isBlockedAddress(host)) {
      return Promise.resolve(
        failed(`refused to connect: ${host} is a loopback, private or link-local address`),
      );
    }
    if (request.signal?.aborted) return Promise.resolve(failed('aborted: the worker is stopping'));

    return new Promise<SendResult>((resolve) => {
      let settled = false;
      let statusCode: number | null = null;
      let responseHeaders: IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      let received = 0;
      let timedOut = false;

      const finish = (error: string | null) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        request.signal?.removeEventListener('abort', onAbort);
        resolve({
          statusCode,
          headers: responseHeaders,
          responseExcerpt: statusCode === null ? null : Buffer.concat(chunks).toString('utf8'),
          durationMs: elapsed(),
          // Once the status line has arrived, the status decides; a body cut short changes nothing.
          error: statusCode === null ? error : null,
        });
      };

      const transport = url.protocol === 'https:' ? https : http;
      const req = transport.request(
        url,
        {
          method: 'POST',
          headers: { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) },
          agent: url.protocol === 'https:' ? httpsAgent : httpAgent,
          lookup,
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

      const timer = setTimeout(() => {
        timedOut = true;
        req.destroy(new Error(`timed out after ${options.timeoutMs} ms`));
      }, options.timeoutMs);
      const onAbort = () => req.destroy(new Error('aborted: the worker is stopping'));
      request.signal?.addEventListener('abort', onAbort, { once: true });

      req.on('error', (error: NodeJS.ErrnoException) => {
        if (timedOut) finish(`timed out after ${options.timeoutMs} ms`);
        else finish(describeError(error));
      });
      req.end(request.body);
    });
  }

  return {
    send,
    close() {
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
