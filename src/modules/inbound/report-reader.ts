import type { Worker } from 'node:worker_threads';
import { type ByteChunks, chunksOf, copiedForTransfer, HANDOVER_BYTES } from '../../lib/byte-chunks.ts';
import { DEFAULTS } from '../../config.ts';
import { createThreadPool, STARVED_WALL_FACTOR } from '../../lib/thread-pool.ts';
import type { ReadMessage } from './report-parser.ts';

// Where received messages are read: on worker threads (lib/thread-pool.ts), never on the event loop that
// answers HTTP in the same process (`postwire serve` runs the listener and the inbound worker beside the
// API). The parser's caps bound the work a message can ask for; the thread's CPU budget and heap cap bound
// whatever they miss. A message stopped by either is unreadable, with why, like any other that breaks a cap.

export interface ReportReaderOptions {
  /** Threads at most (REPORT_PARSE_THREADS). */
  threads: number;
  /** CPU time one message may take to read (REPORT_PARSE_TIMEOUT). */
  timeoutMs: number;
  /** A thread's heap (its old generation), in MiB (REPORT_PARSE_MEMORY). */
  memoryMb: number;
  /** The CPU time a thread has used so far, in ms: the thread's own clock unless a test gives one. */
  threadCpuMs?: (worker: Worker) => Promise<number>;
  /** The wall clock of the starved limit, in ms: `performance.now()` unless a test gives one. */
  wallMs?: () => number;
}

export interface ReportReader {
  /** Reads a message; rejects only when it could not be read for a reason of ours (then it is read again). */
  /** The message in its chunks (lib/byte-chunks.ts): handed to a parse thread, never joined here. */
  read(raw: Buffer | ByteChunks): Promise<ReadMessage>;
  close(): Promise<void>;
}

/**
 * Reads waiting for a thread at most: the inbound worker has a few reads in flight (its concurrency), so
 * this is only a backstop; past it a read fails and its message is read again when its lease runs out.
 */
const QUEUE_LIMIT = 64;
/** The young generation of a parse thread's heap, in MiB: the old generation (memoryMb) is the cap that matters. */
const YOUNG_GENERATION_MB = 16;

class OverBudget extends Error {}

/**
 * Parse threads with the REPORT_PARSE_* budget (CPU time, heap), and why a read that budget stopped was
 * stopped: undefined when the failure is ours (the caller rethrows it, and the message is read again).
 */
export function createParsePool<Request, Answer>(
  name: string,
  script: URL,
  options: ReportReaderOptions,
  waiting: string,
) {
  const pool = createThreadPool<Request, Answer>({
    name,
    script,
    threads: options.threads,
    queueLimit: QUEUE_LIMIT,
    timeoutMs: options.timeoutMs,
    resourceLimits: {
      maxOldGenerationSizeMb: options.memoryMb,
      maxYoungGenerationSizeMb: YOUNG_GENERATION_MB,
    },
    threadCpuMs: options.threadCpuMs,
    wallMs: options.wallMs,
    overBudget: () => new OverBudget(),
    queueFull: () => new Error(`too many ${waiting} are waiting to be read`),
  });
  const budgetReason = (error: unknown): string | undefined => {
    if (error instanceof OverBudget) {
      return (
        `reading it took more than ${options.timeoutMs} ms of CPU time ` +
        `(or ${options.timeoutMs * STARVED_WALL_FACTOR} ms in all)`
      );
    }
    if ((error as { code?: string }).code === 'ERR_WORKER_OUT_OF_MEMORY') {
      return `reading it needed more than ${options.memoryMb} MiB`;
    }
    return undefined;
  };
  return { pool, budgetReason };
}

/**
 * A reader on parse threads (`script`) with the REPORT_PARSE_* budget: what a thread answers, or, when the
 * budget stopped it, `stopped(why)`. Every reader of received mail is one (reports, DMARC reports).
 */
export function createBudgetedReader<Answer>(
  name: string,
  script: URL,
  options: ReportReaderOptions,
  waiting: string,
  stopped: (reason: string) => Answer,
) {
  const { pool, budgetReason } = createParsePool<Uint8Array[], Answer>(name, script, options, waiting);
  return {
    async read(raw: Buffer | ByteChunks): Promise<Answer> {
      try {
        const transfer: ArrayBuffer[] = [];
        return await pool.run(await copiedForTransfer(chunksOf(raw), HANDOVER_BYTES, transfer), transfer);
      } catch (error) {
        const reason = budgetReason(error);
        if (reason === undefined) throw error;
        return stopped(reason);
      }
    },
    close: () => pool.close(),
  };
}

export function createReportReader(options: ReportReaderOptions = DEFAULTS.reportParsing): ReportReader {
  return createBudgetedReader<ReadMessage>(
    'report read',
    new URL('./report-read-worker.ts', import.meta.url),
    options,
    'received messages',
    unreadable,
  );
}

const unreadable = (reason: string): ReadMessage => ({
  report: { kind: 'unreadable', reason },
  subject: null,
});
