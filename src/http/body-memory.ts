import { Transform, type TransformCallback } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { RetryLaterError } from '../lib/errors.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route reads its body as a stream, never whole (a contact import's CSV): it holds a piece at a time,
     * so its body is not counted against HTTP_BODY_MEMORY_LIMIT.
     */
    streamsBody?: boolean;
  }
  interface FastifyInstance {
    /** The request bodies this process holds now (HTTP_BODY_MEMORY_LIMIT). */
    bodyMemory: BodyMemory;
  }
}

export interface BodyMemory {
  /** Bytes of request bodies admitted and not yet answered. */
  held(): number;
  /** The most that may be held at once; 0: no limit. */
  readonly limitBytes: number;
}

/** A body that does not fit waits this long before it is sent again. Large bodies are answered in seconds. */
const RETRY_AFTER_SECONDS = 1;

const busy = () =>
  new RetryLaterError(
    'server_busy',
    `The server holds as many request bodies in memory as it may at once; retry in ${RETRY_AFTER_SECONDS} s.`,
    RETRY_AFTER_SECONDS,
  );

/**
 * A bound on the request bodies held in memory at once (HTTP_BODY_MEMORY_LIMIT). A send may carry 56 MiB of
 * JSON, which takes four to five times that while it is read, parsed, decoded and stored: six at once took the
 * process from 280 MB to 1.1 GB. Each body is admitted before it is read — by its content-length, or chunk by chunk when it
 * comes chunked — and holds its bytes until its answer is sent; one that does not fit beside the bodies already
 * held is a 429 `server_busy` with `retry-after`, without being kept. A body alone is always admitted (within its
 * route's body limit), so a limit below the largest body slows large sends down instead of refusing them all.
 */
export function installBodyMemoryLimit(app: FastifyInstance, { limitBytes }: { limitBytes: number }): void {
  let held = 0;
  app.decorate('bodyMemory', { held: () => held, limitBytes });
  if (limitBytes <= 0) return;

  /** Takes `bytes` for a request already holding `own`; false when they do not fit beside the others'. */
  const take = (bytes: number, own: number): boolean => {
    if (held - own > 0 && held + bytes > limitBytes) return false;
    held += bytes;
    return true;
  };
  /** Gives a request's bytes back once its answer is sent or its connection is gone. */
  const releaseOnClose = (reply: FastifyReply, bytes: () => number) => {
    reply.raw.once('close', () => {
      held -= bytes();
    });
  };

  app.addHook('preParsing', (request: FastifyRequest, reply, payload, done) => {
    if (request.routeOptions.config.streamsBody === true) return done(null, payload);
    const length = request.headers['content-length'];
    if (length !== undefined) {
      const bytes = Number(length);
      // A length Fastify refuses anyway (not a number, over the route's limit: 400, 413) is left to it, and an
      // empty body takes nothing.
      if (!Number.isSafeInteger(bytes) || bytes <= 0 || bytes > (request.routeOptions.bodyLimit ?? 0)) {
        return done(null, payload);
      }
      if (!take(bytes, 0)) return done(busy());
      releaseOnClose(reply, () => bytes);
      return done(null, payload);
    }
    if (request.headers['transfer-encoding'] === undefined) return done(null, payload);
    // Chunked: the size is known only as it arrives, so each chunk is taken as it comes.
    let own = 0;
    releaseOnClose(reply, () => own);
    const counted = Object.assign(
      new Transform({
        transform(chunk: Buffer, _encoding, callback: TransformCallback) {
          if (!take(chunk.length, own)) return callback(busy());
          own += chunk.length;
          counted.receivedEncodedLength += chunk.length;
          callback(null, chunk);
        },
      }),
      { receivedEncodedLength: 0 },
    );
    payload.on('error', (error) => counted.destroy(error));
    // Refused mid-body: the rest is read and dropped (until the request timeout), so the client, still sending,
    // gets to read its 429 rather than a connection that stopped reading.
    counted.once('error', () => {
      payload.unpipe(counted);
      payload.resume();
    });
    return done(null, payload.pipe(counted));
  });
}
