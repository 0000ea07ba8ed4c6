import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { DatabaseHandle } from '../db/connection.ts';
import { inTransaction, type Transaction } from '../db/transaction.ts';
import type { Clock } from '../lib/clock.ts';
import { sha256Hex } from '../lib/crypto.ts';
import { sendError } from './error-handler.ts';
import { createIdempotencyRepo, type IdempotencyRecord } from './idempotency.repo.ts';

const RETENTION_MS = 24 * 60 * 60 * 1000;
const MAX_KEY_LENGTH = 255;
/**
 * Expired keys are deleted at most this often per process: an expired key is already ignored when read, so
 * the DELETE only keeps the table small and need not cost every request a statement.
 */
const CLEANUP_INTERVAL_MS = 60_000;

declare module 'fastify' {
  interface FastifyRequest {
    /** Set when this request carries an Idempotency-Key whose answer is to be saved. */
    idempotency: IdempotencyClaim | undefined;
  }
  interface FastifyReply {
    /**
     * Runs a POST route's write (after its `prepare`: validation, DNS, rendering, reads, outside any
     * transaction) in one transaction, and answers with what it returns. With an Idempotency-Key the
     * transaction first takes the key, then runs `write`, then saves the answer: the work and the saved
     * answer commit together or not at all. Without one, `withoutKey` runs instead when given (a send joins a
     * send group), else `write` in a transaction of its own.
     */
    transact<T>(
      write: (transaction: Transaction) => Promise<T>,
      options?: { withoutKey?: () => Promise<T> },
    ): Promise<T | FastifyReply>;
  }
  interface FastifyContextConfig {
    /**
     * The route's work cannot run inside one transaction (it waits for a worker to act on what it wrote, or
     * writes nothing) and does not call `reply.transact`: its answer is saved after it, so a crash in
     * between lets a retry run it again.
     */
    idempotencyOutsideTransaction?: boolean;
  }
}

interface IdempotencyClaim {
  projectId: string;
  key: string;
  requestHash: string;
  createdAt: string;
  /** The answer is saved (with the work, in its transaction); nothing is left to save after it. */
  saved: boolean;
}

/** A POST route that forgot `reply.transact` would save its answer apart from its work: said loudly. */
class AnswerOutsideTransaction extends Error {}

/** Another request with the same key committed first: its answer is the one to give. */
class KeyTakenMeanwhile extends Error {}

/** 2xx and 4xx answers are saved and replayed; 5xx, 429 and 409 are not, so the client may simply retry. */
const isReplayable = (statusCode: number) => statusCode < 500 && statusCode !== 429 && statusCode !== 409;

/**
 * `Idempotency-Key` on POST: the first request with a key saves its answer; the same key and the same
 * request within 24 h gets that answer again (`idempotent-replayed: true`); the same key with another
 * request is a 422. It runs after validation, so a request the schema refuses saves nothing.
 *
 * The route prepares its work outside any transaction, then hands its write to `reply.transact`, whose
 * transaction takes the key, runs the write and saves the answer: the resource and the saved answer commit
 * together or not at all. After a crash a retry finds either the answer (replayed) or nothing (and runs
 * once). A retry that arrives while the first request writes waits for it (PostgreSQL holds the key's row;
 * SQLite runs one transaction at a time) and then gets its answer.
 */
export function installIdempotency(
  app: FastifyInstance,
  { database, clock }: { database: DatabaseHandle; clock: Clock },
): void {
  const { db } = database;
  const repo = createIdempotencyRepo(db);
  let cleanedAt = -Infinity;
  app.decorateRequest('idempotency', undefined);

  const conflict = (request: FastifyRequest, reply: FastifyReply) =>
    sendError(
      request,
      reply,
      422,
      'idempotency_key_reused',
      'This Idempotency-Key was used with a different request.',
      'Idempotency-Key',
    );

  /** Answers from the saved answer of the key's first request; undefined when there is none to give. */
  const answerFromSaved = (
    request: FastifyRequest,
    reply: FastifyReply,
    saved: IdempotencyRecord,
    requestHash: string,
  ) => {
    if (saved.request_hash !== requestHash) return conflict(request, reply);
    if (saved.status_code === null) return undefined;
    return reply
      .code(saved.status_code)
      .header('idempotent-replayed', 'true')
      .type('application/json; charset=utf-8')
      .send(saved.response_body ?? '');
  };

  /** Before a POST's handler: replays a saved answer, or takes note of the key for the handler to claim. */
  const readKey = async (request: FastifyRequest, reply: FastifyReply) => {
    const key = request.headers['idempotency-key'];
    if (typeof key !== 'string' || !request.caller) return;
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

    const existing = await repo.find(projectId, key);
    if (existing && existing.created_at >= expiredBefore) {
      const answered = answerFromSaved(request, reply, existing, requestHash);
      if (answered) return answered;
      // A key without an answer was left by a request that never finished (written by versions that saved
      // the key before the work): nothing was committed with it, so this request takes it over.
      await repo.dropAbandoned(projectId, key, existing.created_at);
    }
    if (now.getTime() - cleanedAt >= CLEANUP_INTERVAL_MS) {
      cleanedAt = now.getTime();
      await repo.deleteExpired(expiredBefore);
    }
    request.idempotency = { projectId, key, requestHash, createdAt: now.toISOString(), saved: false };
    return undefined;
  };

  // Answers not saved with the work: a refusal (the work rolled back, or never began: the 4xx is still the
  // answer) or a route outside a transaction. Saved unless another request's answer got there first.
  const saveAnswerSent = async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const claim = request.idempotency;
    if (!claim || claim.saved || !isReplayable(reply.statusCode)) return payload;
    if (reply.statusCode < 300 && !request.routeOptions.config.idempotencyOutsideTransaction) {
      throw new AnswerOutsideTransaction(
        `POST ${request.routeOptions.url} answered without reply.transact; declare idempotencyOutsideTransaction if it must.`,
      );
    }
    claim.saved = true;
    await repo.saveAnswer(
      {
        project_id: claim.projectId,
        key: claim.key,
        request_hash: claim.requestHash,
        created_at: claim.createdAt,
      },
      reply.statusCode,
      typeof payload === 'string' ? payload : String(payload),
    );
    return payload;
  };

  app.decorateReply('transact', async function transact<
    T,
  >(this: FastifyReply, write: (transaction: Transaction) => Promise<T>, options: { withoutKey?: () => Promise<T> } = {}): Promise<
    T | FastifyReply
  > {
    const { request } = this;
    const claim = request.idempotency;
    if (!claim) return options.withoutKey ? options.withoutKey() : inTransaction(db, write);
    let body: string;
    try {
      body = await inTransaction(db, async (transaction) => {
        const taken = await repo.claim(
          {
            project_id: claim.projectId,
            key: claim.key,
            request_hash: claim.requestHash,
            created_at: claim.createdAt,
          },
          transaction,
        );
        if (!taken) throw new KeyTakenMeanwhile();
        const payload: unknown = await write(transaction);
        const serialized = typeof payload === 'string' ? payload : String(this.serialize(payload));
        await repo.saveResponse(claim.projectId, claim.key, this.statusCode, serialized, transaction);
        return serialized;
      });
    } catch (error) {
      if (!(error instanceof KeyTakenMeanwhile)) throw error;
      claim.saved = true;
      const saved = await repo.find(claim.projectId, claim.key);
      const answered = saved && answerFromSaved(request, this, saved, claim.requestHash);
      if (answered) return answered;
      return sendError(
        request,
        this,
        409,
        'idempotency_key_in_use',
        'A request with this Idempotency-Key is still in progress.',
        'Idempotency-Key',
      );
    }
    claim.saved = true;
    return this.type('application/json; charset=utf-8').send(body);
  });

  // The hooks go on POST routes only (first, as global hooks would: a replay answers before a route's own
  // preHandler, such as a domain's key generation, runs); other requests, every GET, would run them for nothing.
  app.addHook('onRoute', (route) => {
    if (route.method !== 'POST') return;
    route.preHandler = [readKey, ...hookList(route.preHandler)];
    route.onSend = [saveAnswerSent, ...hookList(route.onSend)];
  });
}

/** A route's hooks of one kind as a list (Fastify takes one function or an array). */
function hookList<T>(hooks: T | T[] | undefined): T[] {
  if (hooks === undefined) return [];
  return Array.isArray(hooks) ? hooks : [hooks];
}
