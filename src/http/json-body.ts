import { errorCodes, type FastifyInstance, type FastifyRequest } from 'fastify';
import type { DecodedFields } from '../lib/base64.ts';
import { bufferOver, HANDOVER_BYTES, PieceCopies } from '../lib/byte-chunks.ts';
import { invalidParam } from '../lib/errors.ts';
import { createThreadPool, type ThreadPool } from '../lib/thread-pool.ts';
import { bodyIsOptional } from './validation.ts';
import type { JsonBodyAnswer, JsonBodyRequest } from './json-body-worker.ts';
import { BODY_NOT_UTF8, BODY_TOO_DEEP, type JsonBodyFault, jsonBodyOf } from './json-text.ts';

// JSON request bodies. A send may carry 56 MiB of JSON (40 MiB of files in base64): joined, decoded and parsed
// on the event loop that answers HTTP, it held every other tenant's request for seconds (a fresh 56 MiB Buffer
// alone costs half a second of page faults on the 2-vCPU VM: lib/byte-chunks.ts). So a body is read as the
// chunks it arrives in, and one larger than LARGE_BODY_BYTES is parsed on a thread (json-body-worker.ts, the
// same `jsonBodyOf`), which also decodes the base64 files its route names (`base64Fields`) and hands their
// bytes back without a copy; the body reaches the route with a token in place of each such file
// (lib/base64.ts DecodedFields), and the bytes in `request.decodedFields`. A small body is parsed here, where
// the hop to a thread would cost more than the parse.
//
// Reading the body is Fastify's own rule (content-type-parser.js rawBody): the route's bodyLimit against the
// content-length and the bytes received, and the bytes received against the content-length, with its errors.

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Where the route's body carries files in base64, decoded on the thread with the rest of a large body:
     * `attachments[].content` (a property's array's items' property), `[].attachments[].content` (of each
     * item of a body that is an array).
     */
    base64Fields?: readonly string[];
  }
  interface FastifyRequest {
    /** The files of a large body, decoded on the thread (see `base64Fields`); undefined for a small body. */
    decodedFields?: DecodedFields | undefined;
  }
}

/** A body larger than this is parsed on a thread (only the send routes take bodies this large). */
export const LARGE_BODY_BYTES = 256 * 1024;

/** Threads for large bodies, and how many may wait (the bodies held are bounded by HTTP_BODY_MEMORY_LIMIT). */
const BODY_THREADS = 1;
const BODY_QUEUE_LIMIT = 1_000;
/** CPU time a body's parse may take on its thread: 56 MiB of JSON takes well under a second. */
const BODY_PARSE_BUDGET_MS = 30_000;

/** The error a body's fault is answered with (error-handler.ts knows each code). */
function bodyError(fault: JsonBodyFault): Error {
  switch (fault.fault) {
    case 'empty':
      return new errorCodes.FST_ERR_CTP_EMPTY_JSON_BODY();
    case 'invalid':
      return new errorCodes.FST_ERR_CTP_INVALID_JSON_BODY();
    case 'not_utf8':
      return Object.assign(new Error('not UTF-8'), { code: BODY_NOT_UTF8 });
    case 'too_deep':
      return Object.assign(new Error('nested too deeply'), { code: BODY_TOO_DEEP });
    case 'nul':
      return invalidParam(
        fault.path || 'body',
        `The ${fault.path ? `field '${fault.path}'` : 'body'} must not contain the NUL character (\\u0000).`,
      );
  }
}

/**
 * The body's bytes as they arrive, copied into pieces ready to hand to a thread (so the socket's chunks are let
 * go as they come: the body is held once), checked as Fastify's rawBody checks them; rejects with Fastify's
 * errors. `payload` is the request's stream after the preParsing hooks (body-memory.ts counts it).
 */
function readBody(request: FastifyRequest, payload: NodeJS.ReadableStream): Promise<PieceCopies> {
  const limit = request.routeOptions.bodyLimit ?? 0;
  const contentLength = Number(request.headers['content-length']);
  if (contentLength > limit) return Promise.reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
  const counted = payload as NodeJS.ReadableStream & { receivedEncodedLength?: number };
  return new Promise((resolve, reject) => {
    // Sized by the content-length when there is one: a 1 KB send otherwise zero-filled a 256 KiB piece, which
    // was 14 % of an accepted send's CPU on SQLite (bench:api --profile) and much of its garbage collection.
    const copies = new PieceCopies(
      HANDOVER_BYTES,
      Number.isSafeInteger(contentLength) && contentLength > 0 ? contentLength : Infinity,
    );
    let received = 0;
    const stop = () => {
      payload.removeListener('data', onData);
      payload.removeListener('end', onEnd);
      payload.removeListener('error', onEnd);
    };
    function onData(chunk: Buffer | string) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      received += bytes.length;
      if (received > limit || (counted.receivedEncodedLength ?? 0) > limit) {
        stop();
        reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
        return;
      }
      copies.add(bytes);
    }
    function onEnd(error?: Error & { statusCode?: number }) {
      stop();
      if (error != null) {
        if (!(typeof error.statusCode === 'number' && error.statusCode >= 400)) error.statusCode = 400;
        reject(error);
        return;
      }
      if (!Number.isNaN(contentLength) && (counted.receivedEncodedLength || received) !== contentLength) {
        reject(new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH());
        return;
      }
      resolve(copies);
    }
    payload.on('data', onData);
    payload.on('end', onEnd);
    payload.on('error', onEnd);
    payload.resume();
  });
}

/**
 * JSON bodies, read and parsed as above: an empty body on a route whose body may be left out is none (SDKs
 * that label every request JSON send one: the Resend SDK's emails.cancel does; see installOptionalBodies).
 */
export function installJsonBody(app: FastifyInstance): void {
  let pool: ThreadPool<JsonBodyRequest, JsonBodyAnswer> | undefined;
  const threads = () =>
    (pool ??= createThreadPool<JsonBodyRequest, JsonBodyAnswer>({
      name: 'request body',
      script: new URL('./json-body-worker.ts', import.meta.url),
      threads: BODY_THREADS,
      queueLimit: BODY_QUEUE_LIMIT,
      timeoutMs: BODY_PARSE_BUDGET_MS,
      overBudget: () => new Error(`parsing a request body took longer than ${BODY_PARSE_BUDGET_MS} ms`),
      queueFull: () => new Error('too many large request bodies are waiting to be parsed'),
    }));
  app.addHook('onClose', async () => {
    await pool?.close();
  });

  /** A large body, parsed on the thread; its files' bytes come back handed over, in `decodedFields`. */
  async function parsedOnThread(request: FastifyRequest, pieces: Uint8Array[], transfer: ArrayBuffer[]) {
    const answer = await threads().run(
      { chunks: pieces, base64Fields: request.routeOptions.config.base64Fields ?? [] },
      transfer,
    );
    if ('fault' in answer) throw bodyError(answer);
    request.decodedFields = new Map(
      answer.decoded.map((bytes, index) => [answer.tokens[index]!, bytes ? [bufferOver(bytes)] : undefined]),
    );
    return answer.value;
  }

  app.removeContentTypeParser('application/json');
  app.addContentTypeParser(
    'application/json',
    async (request: FastifyRequest, payload: NodeJS.ReadableStream) => {
      const { pieces, transfer } = (await readBody(request, payload)).finish();
      const size = pieces.reduce((sum, piece) => sum + piece.length, 0);
      if (size === 0 && bodyIsOptional(request.routeOptions)) return undefined;
      if (size > LARGE_BODY_BYTES) return parsedOnThread(request, pieces, transfer);
      const parsed = jsonBodyOf(Buffer.concat(pieces, size));
      if ('fault' in parsed) throw bodyError(parsed);
      return parsed.value;
    },
  );
}
