import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Clock } from '../../lib/clock.ts';
import type { ApiLogRecorder } from './log-recorder.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The body as the client sent it, when a route replaced it before validation (/resend's translation). */
    clientBody?: unknown;
  }
}

/**
 * The answer as sent, for its excerpt: its text, or bytes of JSON (a page kept encoded, src/http/list.ts);
 * other bytes (a file) and streams are not excerpted.
 */
function answerOf(reply: FastifyReply, payload: unknown): string | Buffer | undefined {
  if (typeof payload === 'string') return payload;
  if (!Buffer.isBuffer(payload)) return undefined;
  const type = reply.getHeader('content-type');
  return typeof type === 'string' && type.startsWith('application/json') ? payload : undefined;
}

/**
 * Every request made with a key (GET /v1/logs, Resend's `logs`): once its answer is serialized, a small
 * object for the recorder's buffer, written in batches later. Nothing is excerpted, stored or awaited here:
 * the request's own work is a push. Requests without a key (public routes, a refused key) have no project
 * to show them to and are not logged.
 */
export function installApiLog(
  app: FastifyInstance,
  { recorder, clock }: { recorder: ApiLogRecorder; clock: Clock },
): void {
  if (!recorder.enabled) return;
  recorder.logTo(app.log);
  app.addHook('onSend', (request, reply, payload, done) => {
    const caller = request.caller;
    if (caller !== undefined) {
      const query = request.url.indexOf('?');
      recorder.record({
        projectId: caller.projectId,
        keyId: caller.keyId,
        method: request.method,
        path: query === -1 ? request.url : request.url.slice(0, query),
        status: reply.statusCode,
        durationMs: reply.elapsedTime,
        at: clock.now(),
        userAgent: request.headers['user-agent'],
        requestBody: request.clientBody ?? request.body,
        requestBytes: Number(request.headers['content-length'] ?? 0),
        responseBody: answerOf(reply, payload),
      });
    }
    done(null, payload);
  });
}
