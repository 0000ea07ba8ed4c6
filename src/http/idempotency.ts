import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.ts';
import type { Clock } from '../lib/clock.ts';
import { sha256Hex } from '../lib/crypto.ts';
import { sendError } from './error-handler.ts';
import { createIdempotencyRepo } from './idempotency.repo.ts';

const RETENTION_MS = 24 * 60 * 60 * 1000;
const MAX_KEY_LENGTH = 255;
// Far longer than any request takes (the slowest, a webhook test send, waits about 20 s).
const ABANDONED_AFTER_MS = 2 * 60 * 1000;

declare module 'fastify' {
  interface FastifyRequest {
    /** Set when this request owns an idempotency key whose response must be stored. */
    idempotencyKey: string | undefined;
  }
}

/**
 * `Idempotency-Key` on POST: the first request with a key stores its response; the same key and the same
 * request within 24 h gets that response again (`idempotent-replayed: true`); the same key with another
 * request is a 422. It runs after validation, so a request the schema refuses stores nothing; 5xx and 429
 * answers are not stored either, so the client may simply retry.
 */
export function installIdempotency(
  app: FastifyInstance,
  { db, clock }: { db: Kysely<Database>; clock: Clock },
): void {
  const repo = createIdempotencyRepo(db);
  app.decorateRequest('idempotencyKey', undefined);

  app.addHook('preHandler', async (request, reply) => {
    const key = request.headers['idempotency-key'];
    if (request.method !== 'POST' || typeof key !== 'string' || !request.caller) return;
    if (key.length === 0 || key.length > MAX_KEY_LENGTH) {
      return sendError(
        request,
        reply,
        422,
        'parameter_invalid',
        `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters.`,
        'Idempotency-Key',
      );
    }
    const projectId = request.caller.projectId;
    const requestHash = sha256Hex(
      `${request.method} ${request.url}\n${JSON.stringify(request.body ?? null)}`,
    );
    const now = clock.now();
    const expiredBefore = new Date(now.getTime() - RETENTION_MS).toISOString();
    const abandonedBefore = new Date(now.getTime() - ABANDONED_AFTER_MS).toISOString();

    const existing = await repo.find(projectId, key);
    if (existing && existing.created_at >= expiredBefore) {
      if (existing.request_hash !== requestHash) {
        return sendError(
          request,
          reply,
          422,
          'idempotency_key_reused',
          'This Idempotency-Key was used with a different request.',
          'Idempotency-Key',
        );
      }
      if (existing.status_code !== null) {
        return reply
          .code(existing.status_code)
          .header('idempotent-replayed', 'true')
          .type('application/json; charset=utf-8')
          .send(existing.response_body ?? '');
      }
      if (existing.created_at >= abandonedBefore) {
        return sendError(
          request,
          reply,
          409,
          'idempotency_key_in_use',
          'A request with this Idempotency-Key is still in progress.',
          'Idempotency-Key',
        );
      }
      // Its request never finished (the process died mid-request): this retry takes the key over.
      await repo.dropAbandoned(projectId, key, existing.created_at);
    }

    await repo.deleteExpired(expiredBefore);
    const claimed = await repo.claim({
      project_id: projectId,
      key,
      request_hash: requestHash,
      created_at: now.toISOString(),
    });
    if (!claimed) {
      return sendError(
        request,
        reply,
        409,
        'idempotency_key_in_use',
        'A request with this Idempotency-Key is still in progress.',
        'Idempotency-Key',
      );
    }
    request.idempotencyKey = key;
  });

  app.addHook('onSend', async (request, reply, payload) => {
    const key = request.idempotencyKey;
    if (key === undefined || !request.caller) return payload;
    const projectId = request.caller.projectId;
    if (reply.statusCode >= 500 || reply.statusCode === 429 || reply.statusCode === 409) {
      await repo.release(projectId, key);
    } else {
      const body = typeof payload === 'string' ? payload : String(payload);
      await repo.saveResponse(projectId, key, reply.statusCode, body);
    }
    return payload;
  });
}
