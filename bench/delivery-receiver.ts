// The webhook receiver of bench/delivery.ts, in a process of its own so it never shares an event loop (or,
// pinned, a CPU) with the sender being measured: a bare node:http server on 127.0.0.1 that answers 204 at
// once, counts what arrives and tells the parent when a phase's target is reached.
import { createServer } from 'node:http';

/** Parent → receiver. */
export type ReceiverCommand =
  /** Starts a phase: counters reset; `reached` is sent when `target` requests have arrived. */
  | { type: 'phase'; target: number; record: boolean }
  /** The phase's figures (and, when `record` was set, every arrival's webhook-id and time). */
  | { type: 'collect' }
  | { type: 'cpu' }
  /** Answers with this process's clock, so the parent can line up the two clocks. */
  | { type: 'clock' }
  | { type: 'stop' };

export interface ReceivedSample {
  headers: Record<string, string>;
  body: string;
}

/** Receiver → parent. */
export type ReceiverReport =
  | { type: 'ready'; port: number }
  | { type: 'reached'; at: number; count: number }
  | {
      type: 'collected';
      count: number;
      distinct: number;
      /** The most connections open at once during the phase: a sender opens one per request in flight. */
      peakConnections: number;
      /** [webhook-id, arrival time] per request, when the phase recorded them. */
      arrivals: Array<[string, number]>;
      /** The phase's first request, to check that both senders send the same headers. */
      sample: ReceivedSample | null;
    }
  | { type: 'cpu'; micros: number }
  | { type: 'clock'; now: number };

// Wall-clock milliseconds with sub-millisecond precision, comparable across processes on one machine (the
// parent still measures the offset between the two clocks before using arrival times). This module has side
// effects, so bench/delivery.ts imports its types only and keeps its own copy of this line.
const wallNow = () => performance.timeOrigin + performance.now();

const send = (report: ReceiverReport) => process.send!(report);

let target = Infinity;
let count = 0;
let open = 0;
let peakConnections = 0;
let record = false;
let seen = new Set<string>();
let arrivals: Array<[string, number]> = [];
let sample: ReceivedSample | null = null;
let sampling = false;

const server = createServer((req, res) => {
  const at = wallNow();
  const id = req.headers['webhook-id'];
  const key = `${req.url} ${typeof id === 'string' ? id : ''}`;
  count += 1;
  seen.add(key);
  if (record) arrivals.push([typeof id === 'string' ? id : '', at]);
  if (!sample && !sampling) {
    // The first request of the phase is read whole (headers and body) for the parent's checks.
    sampling = true;
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(req.headers)) headers[name] = String(value);
      sample = { headers, body: Buffer.concat(chunks).toString('utf8') };
    });
  } else {
    req.resume();
  }
  res.writeHead(204);
  res.end();
  if (count === target) send({ type: 'reached', at, count });
});
server.on('connection', (socket) => {
  open += 1;
  peakConnections = Math.max(peakConnections, open);
  socket.on('close', () => {
    open -= 1;
  });
});
server.keepAliveTimeout = 5000;

server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  send({ type: 'ready', port: typeof address === 'object' && address ? address.port : 0 });
});

// The parent went away (finished or gave up): nothing is left to receive for.
process.on('disconnect', () => process.exit(0));

process.on('message', (command: ReceiverCommand) => {
  switch (command.type) {
    case 'phase':
      target = command.target;
      record = command.record;
      count = 0;
      peakConnections = open;
      seen = new Set();
      arrivals = [];
      sample = null;
      sampling = false;
      break;
    case 'collect':
      send({ type: 'collected', count, distinct: seen.size, peakConnections, arrivals, sample });
      break;
    case 'cpu': {
      const usage = process.cpuUsage();
      send({ type: 'cpu', micros: usage.user + usage.system });
      break;
    }
    case 'clock':
      send({ type: 'clock', now: wallNow() });
      break;
    case 'stop':
      server.closeAllConnections();
      server.close(() => process.exit(0));
      break;
  }
});
