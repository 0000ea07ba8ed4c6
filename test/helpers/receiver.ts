import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';

/** How the receiver answers one request. */
export interface ScriptedResponse {
  status?: number;
  headers?: Record<string, string>;
  body?: string;
  /** Wait this long before answering. */
  delayMs?: number;
  /** Never answer (until the client gives up or the receiver closes). */
  hang?: boolean;
}

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The raw body as received, for signature checks. */
  body: string;
  /** performance.now() when the request arrived. */
  at: number;
}

/** Counts requests in flight; share one among receivers to see the overall concurrency. */
export interface ConcurrencyTracker {
  current: number;
  max: number;
}

export const createTracker = (): ConcurrencyTracker => ({ current: 0, max: 0 });

export interface Receiver {
  url: string;
  requests: ReceivedRequest[];
  /** Requests in flight now, and the most at once so far. */
  concurrency: ConcurrencyTracker;
  /** Queues answers for the next requests, in order; after them the fallback answers. */
  script(...responses: ScriptedResponse[]): void;
  /** The answer once the script is used up (default 200 `ok`). */
  setFallback(response: ScriptedResponse): void;
  /** Resolves with the requests once `count` have arrived; rejects after `timeoutMs`. */
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

/** A real HTTP server on 127.0.0.1, port 0, that records requests and answers as scripted. */
export async function startReceiver(
  options: { fallback?: ScriptedResponse; tracker?: ConcurrencyTracker } = {},
): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const queue: ScriptedResponse[] = [];
  let fallback: ScriptedResponse = options.fallback ?? { status: 200, body: 'ok' };
  const own = createTracker();
  const trackers = options.tracker ? [own, options.tracker] : [own];
  const waiters = new Set<() => void>();
  const pending = new Set<ServerResponse>();

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    for (const tracker of trackers) {
      tracker.current += 1;
      tracker.max = Math.max(tracker.max, tracker.current);
    }
    let counted = true;
    const release = () => {
      if (!counted) return;
      counted = false;
      for (const tracker of trackers) tracker.current -= 1;
    };
    res.on('close', release);
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      requests.push({
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        at: performance.now(),
      });
      for (const waiter of waiters) waiter();
      const answer = queue.shift() ?? fallback;
      if (answer.hang) {
        pending.add(res);
        return;
      }
      const respond = () => {
        if (res.destroyed) return;
        res.writeHead(answer.status ?? 200, answer.headers ?? {});
        res.end(answer.body ?? '');
        release();
      };
      if (answer.delayMs) setTimeout(respond, answer.delayMs);
      else respond();
    });
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');

  return {
    url: `http://127.0.0.1:${address.port}/hook`,
    requests,
    concurrency: own,
    script(...responses) {
      queue.push(...responses);
    },
    setFallback(response) {
      fallback = response;
    },
    waitFor(count, timeoutMs = 5000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (requests.length >= count) {
            waiters.delete(check);
            clearTimeout(timer);
            resolve(requests.slice());
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`expected ${count} requests within ${timeoutMs} ms, got ${requests.length}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    async close() {
      for (const res of pending) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
