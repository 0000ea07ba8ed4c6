import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import { DomainError } from '../lib/errors.ts';
import type { KeyPermission } from '../db/schema.ts';
import type { Caller, ProjectService } from '../modules/projects/projects.service.ts';
import { sendError } from './error-handler.ts';
import type { RateLimiter, RateVerdict } from './rate-limit.ts';

declare module 'fastify' {
  interface FastifyRequest {
    caller: Caller | undefined;
  }
  interface FastifyInstance {
    /** Every route registered since the auth hook, with the permission it declares (or `public`). */
    routePermissions(): RoutePermission[];
  }
  interface FastifyContextConfig {
    /** Routes that answer without an API key (health, the OpenAPI document, the docs page). */
    public?: boolean;
    /**
     * The permission a key needs to call the route (`allows`, below). Every route that is not public declares
     * one: the app refuses to start otherwise (installAuth), and test/api-keys.test.ts walks the routes.
     */
    permission?: KeyPermission;
  }
}

/** The project of the authenticated caller; routes behind auth can rely on it. */
export function projectOf(request: FastifyRequest): string {
  if (!request.caller)
    throw unauthorized('Missing API key: send the header `Authorization: Bearer <API_KEY>`.');
  return request.caller.projectId;
}

/**
 * The one rule of scoped keys: a full_access key may call everything; any other key only the routes that
 * need exactly its permission (a sending_access key sends, a read_only key reads, neither does the other).
 */
export function allows(granted: KeyPermission, needed: KeyPermission): boolean {
  return granted === 'full_access' || granted === needed;
}

/** The 403 for a key whose permission the route does not take; it names both. */
function insufficientPermission(needed: KeyPermission, granted: KeyPermission): DomainError {
  const also = needed === 'full_access' ? '' : ` (or a full_access key)`;
  return new DomainError(
    'forbidden',
    'insufficient_permission',
    `This route needs a ${needed} key${also}; this key is ${granted}.`,
  );
}

const unauthorized = (message: string) => new DomainError('unauthorized', 'invalid_api_key', message);

/**
 * The key in an `Authorization: Bearer <key>` header. The scheme is matched in any case, as HTTP says
 * (RFC 9110 §11.1); a refusal says what was wrong with the header, so a newcomer can fix it. The code stays
 * `invalid_api_key` in every case: clients branch on it.
 */
export function bearerToken(header: string | undefined): string {
  if (header === undefined || header.trim() === '') {
    throw unauthorized('Missing API key: send the header `Authorization: Bearer <API_KEY>`.');
  }
  const match = /^\s*(\S+)(?:\s+(.*))?$/s.exec(header);
  const scheme = match?.[1] ?? '';
  if (scheme.toLowerCase() !== 'bearer') {
    const shown = /^[A-Za-z][A-Za-z0-9_-]{0,19}$/.test(scheme) && match?.[2] ? ` '${scheme}'` : '';
    throw unauthorized(
      `The Authorization header must use the Bearer scheme, not${shown || ' a bare value'}: \`Authorization: Bearer <API_KEY>\`.`,
    );
  }
  const token = match?.[2]?.trim() ?? '';
  if (token === '') throw unauthorized('Missing API key after `Bearer` in the Authorization header.');
  return token;
}

export interface RoutePermission {
  method: string;
  url: string;
  /** Undefined only for a public route (or a route that forgot, which stops the app at start). */
  permission: KeyPermission | undefined;
  public: boolean;
}

/**
 * A request's key check: undefined for a route that needs no key (public, or none matched), else the check's
 * promise, settled once the request may go on or has been answered (401, 403, 429).
 */
export type Authorize = (request: FastifyRequest, reply: FastifyReply) => Promise<undefined> | undefined;

/**
 * Every route's permission checked at start, and the check of each request's key, which the app runs in its
 * one onRequest hook (app.ts): a hook of its own cost each request a turn of Fastify's hook runner.
 */
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
): Authorize {
  const tooMany = (request: FastifyRequest, reply: FastifyReply, verdict: RateVerdict, message: string) => {
    reply.header('ratelimit-limit', verdict.limit);
    reply.header('ratelimit-remaining', 0);
    reply.header('ratelimit-reset', verdict.resetSeconds);
    reply.header('retry-after', verdict.resetSeconds);
    return sendError(request, reply, 429, 'rate_limited', message);
  };

  // Every route says which keys may call it. The routes are read at ready, not as each is added: a plugin's
  // own onRoute hook may mark its routes public after this one has seen them (the docs page does).
  const routes: RouteOptions[] = [];
  app.addHook('onRoute', (route) => {
    routes.push(route);
  });
  const routePermissions = (): RoutePermission[] =>
    routes.map((route) => ({
      method: String(route.method),
      url: route.url,
      permission: route.config?.permission,
      public: route.config?.public === true,
    }));
  app.decorate('routePermissions', routePermissions);
  app.addHook('onReady', async () => {
    const undeclared = routePermissions().filter((route) => !route.public && !route.permission);
    if (undeclared.length > 0) {
      throw new Error(
        `routes without config.permission (full_access, sending_access or read_only): ${undeclared
          .map((route) => `${route.method} ${route.url}`)
          .join(', ')}`,
      );
    }
  });

  app.decorateRequest('caller', undefined);
  /** The checks of a route behind a key, once the route is known to need one. */
  const check = async (request: FastifyRequest, reply: FastifyReply): Promise<undefined> => {
    // An address that keeps presenting bad keys is guessing: it is refused before any key is checked, so
    // guessing goes no faster than the limit, whatever the keys.
    const blocked = failedAuthLimiter.exhausted(request.ip);
    if (blocked) {
      tooMany(
        request,
        reply,
        blocked,
        `Too many failed authentications from this address; retry in ${blocked.resetSeconds} s.`,
      );
      return;
    }
    try {
      request.caller = await projects.authenticate(bearerToken(request.headers.authorization));
    } catch (error) {
      if (!(error instanceof DomainError)) throw error;
      failedAuthLimiter.take(request.ip);
      reply.header('www-authenticate', 'Bearer realm="postwire"');
      sendError(request, reply, 401, error.code, error.message);
      return;
    }
    const verdict = rateLimiter.take(request.caller.keyId);
    if (verdict) {
      reply.header('ratelimit-limit', verdict.limit);
      reply.header('ratelimit-remaining', verdict.remaining);
      reply.header('ratelimit-reset', verdict.resetSeconds);
      if (verdict.remaining < 0) {
        tooMany(request, reply, verdict, `Too many requests; retry in ${verdict.resetSeconds} s.`);
        return;
      }
    }
    // After the rate limit, so that calls a key may not make count like any other.
    const needed = request.routeOptions.config.permission ?? 'full_access';
    if (!allows(request.caller.permission, needed)) {
      const refusal = insufficientPermission(needed, request.caller.permission);
      sendError(request, reply, 403, refusal.code, refusal.message);
    }
  };
  return (request, reply) =>
    // Unknown routes answer 404/405 without asking for a key: there is nothing behind them to protect.
    request.is404 || request.routeOptions.config.public ? undefined : check(request, reply);
}
