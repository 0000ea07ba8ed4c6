import { connect, type Socket } from 'node:net';
import { type ByteChunks, chunksOf, firstBytes, totalBytes } from '../../lib/byte-chunks.ts';
import { parseSpamdUrl } from '../../lib/spamd-url.ts';
import type { WorkerLogger } from '../../lib/worker-logger.ts';

// An optional spam verdict on received mail from SpamAssassin's spamd, over its own protocol (SPAMC/1.5, as
// spamc speaks it: https://svn.apache.org/repos/asf/spamassassin/trunk/spamd/PROTOCOL). One connection per
// message: `SYMBOLS SPAMC/1.5`, a Content-length, the message; spamd answers `SPAMD/1.1 0 EX_OK`, a
// `Spam: True ; 15.2 / 5.0` header and the names of the rules that hit, then closes.
//
// The verdict is advice, never a gate: receiving mail must not wait on spamd or fail with it. Every failure
// (refused, reset, timed out, an error status, an answer that is not the protocol) is null and one warning,
// never a throw. What spamd sends is read like any other hostile input: bounded in bytes, parsed strictly,
// and the whole exchange ends at a deadline with the socket destroyed, however slowly bytes keep coming.
//
// A message larger than maxBytes is cut to its first maxBytes (at the last line break within them) and that
// part is scored; the verdict says `truncated`. spamc instead skips a message over its limit (500 KB) and
// calls it not spam, which is exactly how spam padded past the limit gets through; the start of a message
// holds what SpamAssassin weighs (the headers, and the first text parts: SpamAssassin itself reads only the
// first 50 KB of each text part, body_part_scan_size), and what makes a message large is mostly its
// attachments, which no rule reads. amavisd-new truncates the same way. A cut MIME message lacks its closing
// boundaries; SpamAssassin's parser takes that as the end of the message.

export interface SpamVerdict {
  /** SpamAssassin's score. */
  score: number;
  /** The score at which spamd calls a message spam (its required_score). */
  threshold: number;
  /** Whether spamd called it spam (score ≥ threshold). */
  flagged: boolean;
  /** The rules that hit (`GTUBE`, `HTML_MESSAGE`, …), as spamd named them; bounded in number. */
  rules: string[];
  /** Only the first maxBytes of the message were scored (it was larger). */
  truncated: boolean;
}

export interface SpamChecker {
  /** The verdict on one message; null when it could not be scored (the log says why). Never rejects. */
  /** The message, or its chunks as they arrived (lib/byte-chunks.ts): only the first SPAMD_MAX_BYTES are joined. */
  check(raw: Buffer | ByteChunks): Promise<SpamVerdict | null>;
}

export interface SpamCheckerOptions {
  /** SPAMD_URL: `spamd://host[:port]` or `tcp://host[:port]`. */
  url: string;
  /** SPAMD_TIMEOUT: the whole exchange, connect to last byte, in ms. */
  timeoutMs: number;
  /** SPAMD_MAX_BYTES: a larger message is scored on its first maxBytes. */
  maxBytes: number;
  logger: WorkerLogger;
}

/**
 * The most spamd's answer may take, headers and rule names together: a real one is a few hundred bytes (a
 * status line, two headers, a few dozen rule names of at most 22 characters each).
 */
export const MAX_RESPONSE_BYTES = 16 * 1024;
/** Rule names kept from one answer at most. */
const MAX_RULES = 200;
/** What of spamd's own words goes into a log line at most. */
const MAX_LOGGED = 200;

const STATUS_LINE = /^SPAMD\/(\d{1,2}\.\d{1,2}) (\d{1,3}) ([\x20-\x7e]*)$/;
const NUMBER = '(-?\\d{1,9}(?:\\.\\d{1,9})?)';
const SPAM_HEADER = new RegExp(`^(True|False|Yes|No) ; ${NUMBER} / ${NUMBER}$`, 'i');
const RULE_NAME = /^[A-Za-z0-9_]{1,64}$/;

/** Why a message was not scored: a warning's message and what goes with it. */
class NotScored extends Error {
  readonly details: Record<string, unknown>;
  constructor(message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.details = details;
  }
}

export function createSpamChecker(options: SpamCheckerOptions): SpamChecker {
  const address = parseSpamdUrl(options.url);
  if (!address) throw new Error(`not a spamd URL (spamd://host:port): ${options.url}`);
  const { logger, timeoutMs, maxBytes } = options;
  return {
    async check(raw) {
      const chunks = chunksOf(raw);
      const size = totalBytes(chunks);
      const head = firstBytes(chunks, maxBytes);
      const message = size > maxBytes ? cut(head, maxBytes) : head;
      const truncated = message.length < size;
      const started = Date.now();
      try {
        const answer = await exchange(address.host, address.port, message, timeoutMs);
        return { ...parseAnswer(answer), truncated };
      } catch (error) {
        const { details, reason } =
          error instanceof NotScored
            ? { details: error.details, reason: error.message }
            : { details: { code: (error as { code?: unknown }).code }, reason: String(error) };
        logger.warn(
          {
            spamd: `${address.host}:${address.port}`,
            bytes: message.length,
            elapsedMs: Date.now() - started,
            reason: reason.slice(0, MAX_LOGGED),
            ...details,
          },
          'spam check: no verdict from spamd, the message goes on unscored',
        );
        return null;
      }
    },
  };
}

/** The first maxBytes of a message, cut after the last line break within them when there is one. */
function cut(raw: Buffer, maxBytes: number): Buffer {
  const lineEnd = raw.lastIndexOf(0x0a, maxBytes - 1);
  return raw.subarray(0, lineEnd >= 0 ? lineEnd + 1 : maxBytes);
}

/**
 * Sends the request and resolves with spamd's whole answer (headers and body), once its Content-length is
 * in or spamd has closed; rejects with NotScored or a socket error. The socket is destroyed in every case.
 */
function exchange(host: string, port: number, message: Buffer, timeoutMs: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    let settled = false;
    const socket: Socket = connect({ host, port });
    const finish = (error: Error | undefined, answer?: Buffer) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      socket.destroy();
      if (error) reject(error);
      else resolve(answer!);
    };
    // One deadline for everything: an idle timeout would let a byte every few seconds hold the check open.
    const deadline = setTimeout(
      () => finish(new NotScored(`no complete answer within ${timeoutMs} ms`, { received })),
      timeoutMs,
    );
    socket.on('connect', () => {
      socket.write(`SYMBOLS SPAMC/1.5\r\nContent-length: ${message.length}\r\n\r\n`);
      // Half-closed after the message, as spamc does: spamd reads Content-length bytes either way.
      socket.end(message);
    });
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length;
      if (received > MAX_RESPONSE_BYTES) {
        finish(new NotScored(`spamd's answer passed ${MAX_RESPONSE_BYTES} bytes`, { received }));
        return;
      }
      chunks.push(chunk);
      const answer = Buffer.concat(chunks);
      if (isComplete(answer)) finish(undefined, answer);
    });
    socket.on('end', () => finish(undefined, Buffer.concat(chunks)));
    socket.on('error', (error) => {
      // spamd may answer an error and close before reading all we send (EPIPE, ECONNRESET): its answer wins.
      const answer = Buffer.concat(chunks);
      if (answer.length > 0 && headerEnd(answer) >= 0) finish(undefined, answer);
      else finish(error);
    });
  });
}

const headerEnd = (answer: Buffer) => answer.indexOf('\r\n\r\n');

/** Whether the answer's headers and as many body bytes as its Content-length says have arrived. */
function isComplete(answer: Buffer): boolean {
  const end = headerEnd(answer);
  if (end < 0) return false;
  const length = /^Content-length: *(\d{1,6})\r$/im.exec(answer.subarray(0, end).toString('latin1'))?.[1];
  return length !== undefined && answer.length - (end + 4) >= Number(length);
}

const quoted = (text: string) => JSON.stringify(text.slice(0, MAX_LOGGED));

/** spamd's answer as a verdict (without `truncated`), or NotScored saying what is wrong with it. */
function parseAnswer(answer: Buffer): Omit<SpamVerdict, 'truncated'> {
  const end = headerEnd(answer);
  const head = (end >= 0 ? answer.subarray(0, end) : answer).toString('latin1');
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const status = STATUS_LINE.exec(statusLine);
  if (!status) {
    throw new NotScored(
      answer.length === 0 ? 'spamd closed without answering' : 'not a spamd answer',
      answer.length === 0 ? {} : { answer: quoted(statusLine) },
    );
  }
  if (status[2] !== '0') {
    throw new NotScored(`spamd answered ${status[2]} ${status[3]!.slice(0, MAX_LOGGED)}`, {
      status: Number(status[2]),
    });
  }
  if (end < 0) throw new NotScored('spamd closed before the end of its headers');
  let spam: RegExpExecArray | null = null;
  let contentLength: number | undefined;
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (colon <= 0) throw new NotScored('a malformed header in the answer', { line: quoted(line) });
    if (name === 'spam') spam = SPAM_HEADER.exec(value);
    if (name === 'content-length') {
      if (!/^\d{1,6}$/.test(value)) throw new NotScored('a malformed Content-length', { line: quoted(line) });
      contentLength = Number(value);
    }
  }
  if (!spam) throw new NotScored('no Spam header in the answer', { headers: quoted(head) });
  // + 0: spamd writes a score that rounds to nothing as -0.0, which is no reason to carry a negative zero.
  const score = Number(spam[2]) + 0;
  const threshold = Number(spam[3]) + 0;
  const body = answer.subarray(end + 4);
  if (contentLength !== undefined && body.length < contentLength) {
    throw new NotScored('spamd closed before the end of its answer', {
      contentLength,
      received: body.length,
    });
  }
  const rules = body
    .subarray(0, contentLength ?? body.length)
    .toString('latin1')
    .split(',')
    .map((name) => name.trim())
    .filter((name) => RULE_NAME.test(name))
    .slice(0, MAX_RULES);
  return { score, threshold, flagged: /^(true|yes)$/i.test(spam[1]!), rules };
}
