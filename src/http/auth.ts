import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DomainError } from '../lib/errors.ts';
import type { Caller, ProjectService } from '../modules/projects/projects.service.ts';
import { sendError } from './error-handler.ts';
import type { RateLimiter, RateVerdict } from './rate-limit.ts';

declare module 'fastify' {
  interface FastifyRequest {
    caller: Caller | undefined;
  }
  interface FastifyContextConfig {
    /** Routes that answer without an API key (health, the OpenAPI document, the docs page). */
    public?: boolean;
  }
}

/** The project of the authenticated caller; routes behind auth can rely on it. */
export function projectOf(request: FastifyRequest): string {
  if (!request.caller)
    throw new DomainError('unauthorized', 'invalid_api_key', 'Missing, unknown or revoked API key.');
  return request.caller.projectId;
}

export function installAuth(
  app: FastifyInstance,
  {
    projects,
    rateLimiter,
    failedAuthLimiter,
  }: {
    projects: ProjectService;
    rateLimiter: RateLimiter;
    /** Failed authentications per client address; past the limit, that address is refused unchecked. */
    failedAuthLimiter: RateLimiter;
  },
): void {
  const tooMany = (request: FastifyRequest, reply: FastifyReply, verdict: RateVerdict, message: string) => {
    reply.header('ratelimit-limit', verdict.limit);
    reply.header('ratelimit-remaining', 0);
    reply.header('ratelimit-reset', verdict.resetSeconds);
    reply.header('retry-after', verdict.resetSeconds);
    return sendError(request, reply, 429, 'rate_limited', message);
  };

  app.decorateRequest('caller', undefined);
  app.addHook('onRequest', async (request, reply) => {
    // Unknown routes answer 404/405 without asking for a key: there is nothing behind them to protect.
    if (request.is404 || request.routeOptions.config.public) return;
    // An address that keeps presenting bad keys is guessing: it is refused before any key is checked, so
    // guessing goes no faster than the limit, whatever the keys.
    const blocked = failedAuthLimiter.exhausted(request.ip);
    if (blocked) {
      return tooMany(
        request,
        reply,
        blocked,
        `Too many failed authentications from this address; retry in ${blocked.resetSeconds} s.`,
      );
    }
    const header = request.headers.authorization;
    const token = header?.startsWith('Bearer ') ? header.slice('Bearer '.length).trim() : undefined;
    try {
      request.caller = await projects.authenticate(token);
    } catch (error) {
      if (!(error instanceof DomainError)) throw error;
      failedAuthLimiter.take(request.ip);
      reply.header('www-authenticate', 'Bearer realm="postwire"');
      return sendError(request, reply, 401, error.code, error.message);
    }
    const verdict = rateLimiter.take(request.caller.keyId);
    if (verdict) {
      reply.header('ratelimit-limit', verdict.limit);
      reply.header('ratelimit-remaining', verdict.remaining);
      reply.header('ratelimit-reset', verdict.resetSeconds);
      if (verdict.remaining < 0) {
        return tooMany(request, reply, verdict, `Too many requests; retry in ${verdict.resetSeconds} s.`);
      }
    }
  });
}
