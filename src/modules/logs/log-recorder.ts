import { createHash } from 'node:crypto';
import { newId } from '../../lib/ids.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';
import { excerptOf, excerptOfAnswer, LARGE_BODY_CHARS } from './log-excerpt.ts';
import type { ApiLogAnswerRow, ApiLogRepo, ApiLogRow } from './logs.repo.ts';

// The API logs are written off the request path: a request's log is a small object pushed onto a buffer
// after its answer is serialized; the buffer is written in one multi-row INSERT every FLUSH_MS or every
// MAX_BATCH logs, whichever comes first (in a turn of the event loop of its own, not the request's that
// filled it), and on close. Under load only full batches are written: the logs that arrive while one is
// written wait for their batch to fill (or for the timer), not for the write to end. Writing whatever had
// arrived at once made one statement per round trip, ~30 logs each on PostgreSQL at 2,000 reads a second,
// and a statement's fixed cost (~1 ms of CPU on each side of the socket) was most of what a log cost. A
// process that dies loses what it had not written yet (at most FLUSH_MS of logs): logs are an account of
// the traffic, not a ledger, and a statement per request inside the sends' transactions would cost every
// send a write (docs/api/logs.md).

/** A body already excerpted when it was logged, so that the batch holds the excerpt, not the body. */
export class Excerpt {
  readonly text: string | null;
  constructor(text: string | null) {
    this.text = text;
  }
}

/** What a request leaves for its log; excerpts and ids are made when the batch is written. */
export interface ApiLogEntry {
  projectId: string;
  keyId: string;
  method: string;
  /** The path without its query. */
  path: string;
  status: number;
  durationMs: number;
  at: Date;
  userAgent: string | undefined;
  /** The parsed request body (undefined without one). */
  requestBody: unknown;
  /** Its size as sent (`content-length`), when known. */
  requestBytes?: number | undefined;
  /** The answer as sent, when it was text or bytes of JSON (undefined for a stream or other bytes). */
  responseBody: string | Buffer | Excerpt | undefined;
}

export const API_LOG_WRITING = {
  /** How long a log may wait in memory before its batch is written. */
  flushMs: 250,
  /**
   * Logs per INSERT; a full batch is written at once. The app takes its repository's figure for its engine
   * (`rowsPerBatch`, services.ts).
   */
  maxBatch: 100,
  /** Logs held while the database does not take them; past this, new ones are dropped (and counted). */
  maxPending: 20_000,
  /** A request body's excerpt, in bytes of JSON. */
  bodyBytes: 2048,
  /**
   * An answer's excerpt, in bytes of JSON. Less than a body's so that a read's log (an answer, no body, ~200
   * bytes of the rest) fits in half of SQLite's 4 KiB page, two logs a page, and under PostgreSQL's 2 KB
   * threshold for compressing a row (TOAST): a 2 KiB excerpt made each row a page of its own, and the INSERT
   * of a read's log cost 20-31 µs of CPU against 14-21 µs at 1.5 KiB (bench/api-logs.ts, bench/README.md).
   */
  answerBytes: 1536,
  /**
   * An answer's excerpt at least this long that more than one log of a batch holds (a page read again) is
   * stored once for them (api_log_answers): the logs of a read of 20 webhooks were each 1.5 KiB of the same
   * answer, most of what writing them cost (bench/README.md, issue 43, third session).
   */
  sharedAnswerChars: 256,
  /** A path or user agent longer than this is cut. */
  maxPathChars: 1024,
  maxUserAgentChars: 512,
};

export interface ApiLogRecorderDeps {
  repo: Pick<ApiLogRepo, 'insertMany'>;
  logger?: WorkerLogger;
  /** False: nothing is recorded (API_LOG_MAX_ROWS=0). */
  enabled?: boolean;
  writing?: Partial<typeof API_LOG_WRITING>;
}

/**
 * After an answer longer than this, the batch's excerpts go on in a turn of the event loop of their own: the
 * scan of an answer stops at the bound, but steps over a long secret or a long string to its end.
 */
const YIELD_AFTER_CHARS = 64 * 1024;

const cutText = (text: string, max: number) => (text.length > max ? text.slice(0, max) : text);

const textOf = (body: string | Buffer | undefined) => (Buffer.isBuffer(body) ? body.toString() : body);

export function createApiLogRecorder(deps: ApiLogRecorderDeps) {
  const writing = { ...API_LOG_WRITING, ...deps.writing };
  const enabled = deps.enabled ?? true;
  let logger = deps.logger;
  let pending: ApiLogEntry[] = [];
  let timer: NodeJS.Timeout | undefined;
  let immediate: NodeJS.Immediate | undefined;
  let inFlight: Promise<void> | undefined;
  /** Everything pending is to be written once the write in flight ends (the timer fired during it). */
  let allAfter = false;
  let dropped = 0;

  // The last answer excerpted, and its excerpt: a page served again unchanged is the same text (the routes
  // keep a page's serialized answer, src/http/list.ts), excerpted once.
  let lastAnswer: string | Buffer | undefined;
  let lastExcerpt: string | null = null;
  const excerptOfResponse = (body: string | Buffer | undefined): string | null => {
    if (body === undefined || body !== lastAnswer) {
      lastExcerpt = excerptOfAnswer(textOf(body), writing.answerBytes);
      lastAnswer = body;
    }
    return lastExcerpt;
  };

  const toRow = (entry: ApiLogEntry): ApiLogRow => ({
    id: newId('log'),
    project_id: entry.projectId,
    api_key_id: entry.keyId,
    method: entry.method,
    path: cutText(entry.path, writing.maxPathChars),
    status: entry.status,
    duration_us: Math.round(entry.durationMs * 1000),
    user_agent: entry.userAgent === undefined ? null : cutText(entry.userAgent, writing.maxUserAgentChars),
    request_body:
      entry.requestBody instanceof Excerpt
        ? entry.requestBody.text
        : excerptOf(entry.requestBody, writing.bodyBytes),
    response_body:
      entry.responseBody instanceof Excerpt ? entry.responseBody.text : excerptOfResponse(entry.responseBody),
    created_at: entry.at.toISOString(),
    response_answer_id: null,
  });

  /**
   * The answers the batch's logs hold more than once (the same excerpt of the same project, long enough to be
   * worth a row of its own), taken out of those logs, which name them instead.
   */
  const sharedAnswers = (rows: ApiLogRow[]): ApiLogAnswerRow[] => {
    const byProject = new Map<string, Map<string, ApiLogRow[]>>();
    for (const row of rows) {
      const body = row.response_body;
      if (body === null || body.length < writing.sharedAnswerChars) continue;
      let bodies = byProject.get(row.project_id);
      if (!bodies) byProject.set(row.project_id, (bodies = new Map()));
      const holders = bodies.get(body);
      if (holders) holders.push(row);
      else bodies.set(body, [row]);
    }
    const answers: ApiLogAnswerRow[] = [];
    for (const [projectId, bodies] of byProject) {
      for (const [body, holders] of bodies) {
        if (holders.length < 2) continue;
        const id = createHash('sha256').update(`${projectId}\n${body}`).digest('base64url');
        let usedAt = '';
        for (const row of holders) {
          row.response_body = null;
          row.response_answer_id = id;
          if (row.created_at > usedAt) usedAt = row.created_at;
        }
        answers.push({ id, project_id: projectId, body, used_at: usedAt });
      }
    }
    return answers;
  };

  /**
   * Writes what is pending, a batch at a time; one write at a time. `all`: every log pending now (the timer,
   * flush), else full batches only; the logs that arrive meanwhile wait for their batch to fill, or for the
   * timer.
   */
  async function writeAll(all: boolean): Promise<void> {
    let owed = all ? pending.length : 0;
    while (owed > 0 || pending.length >= writing.maxBatch) {
      const batch = pending.slice(0, writing.maxBatch);
      pending = pending.slice(batch.length);
      owed -= batch.length;
      try {
        const rows: ApiLogRow[] = [];
        for (const entry of batch) {
          rows.push(toRow(entry));
          // A batch of long answers is not one turn of the event loop, which answers every other request
          // meanwhile.
          if (
            !(entry.responseBody instanceof Excerpt) &&
            (entry.responseBody?.length ?? 0) > YIELD_AFTER_CHARS
          ) {
            await new Promise((resolve) => setImmediate(resolve));
          }
        }
        await deps.repo.insertMany(rows, sharedAnswers(rows));
      } catch (error) {
        logger?.error({ err: error, logs: batch.length }, 'API logs: a batch could not be written');
      }
    }
    if (dropped > 0) {
      logger?.warn({ dropped }, 'API logs: dropped logs while the database was behind');
      dropped = 0;
    }
  }

  function flush(all = true): Promise<void> {
    if (all) {
      clearTimeout(timer);
      timer = undefined;
    }
    clearImmediate(immediate);
    immediate = undefined;
    if (inFlight) {
      // The timer (or flush) came during a write of full batches: the rest goes when it ends, not a timer later.
      allAfter ||= all;
      return inFlight;
    }
    inFlight = writeAll(all).finally(() => {
      inFlight = undefined;
      if (allAfter) {
        allAfter = false;
        void flush(true);
      } else if (pending.length > 0) {
        // Logs that arrived during the write wait for the next timer, as any other.
        schedule();
      }
    });
    return inFlight;
  }

  function schedule(): void {
    if (timer !== undefined || inFlight !== undefined) return;
    timer = setTimeout(flush, writing.flushMs).unref();
  }

  /**
   * A full batch: written as soon as the request that filled it is answered (during a write, the write's
   * loop takes it). The timer stays for the logs after it.
   */
  function scheduleNow(): void {
    if (immediate !== undefined || inFlight !== undefined) return;
    immediate = setImmediate(() => void flush(false));
  }

  return {
    enabled,

    /** Where a batch that could not be written is told of (the app's logger). */
    logTo(to: WorkerLogger): void {
      logger = to;
    },

    /** Takes a request's log; written within FLUSH_MS (or with its batch, when the batch fills). */
    record(entry: ApiLogEntry): void {
      if (!enabled) return;
      if (pending.length >= writing.maxPending) {
        dropped += 1;
        return;
      }
      // A large body (a send of megabytes, a long answer) is not held until the batch: its excerpt is made
      // now, which costs what the excerpt's size allows, not the body's (long strings are sliced, the walk and
      // the scan stop at the bound).
      if ((entry.requestBytes ?? 0) > LARGE_BODY_CHARS) {
        entry.requestBody = new Excerpt(excerptOf(entry.requestBody, writing.bodyBytes));
      }
      const answer = entry.responseBody;
      if (answer !== undefined && !(answer instanceof Excerpt) && answer.length > LARGE_BODY_CHARS) {
        entry.responseBody = new Excerpt(excerptOfAnswer(textOf(answer), writing.answerBytes));
      }
      pending.push(entry);
      if (pending.length >= writing.maxBatch) scheduleNow();
      else schedule();
    },

    /** Writes every log taken so far (a read of the logs, and close). */
    async flush(): Promise<void> {
      while (pending.length > 0 || inFlight !== undefined) await flush();
    },
  };
}

export type ApiLogRecorder = ReturnType<typeof createApiLogRecorder>;
