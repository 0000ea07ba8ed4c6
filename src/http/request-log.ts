import { type FastifyReply, type FastifyRequest, LogController } from 'fastify';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Files served as they are (the dashboard's, the API reference's): a page load fetches a dozen, which at
     * `info` would drown the API's lines, so they are logged at `debug` only.
     */
    staticFile?: boolean;
  }
}

/**
 * Fastify's request lines, one per request instead of two (incoming, completed): once it is answered, its
 * method, route pattern (not the path, whose ids and query say more than a log needs), status, time and
 * request id (`reqId`, from the request's logger).
 */
export class OneLinePerRequest extends LogController {
  // At `trace` only: a request that never completes (a slow body, a stuck handler) shows there, and nowhere else.
  override incomingRequest(request: FastifyRequest): void {
    request.log.trace({ method: request.method, url: request.url }, 'request received');
  }

  // The request's own line says 404; Fastify's extra "Route … not found" line would make it two.
  override routeNotFound(): void {}

  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    const route = request.routeOptions.url ?? '(no route)';
    const ms = Math.round(reply.elapsedTime * 10) / 10;
    const fields = { method: request.method, route, status: reply.statusCode, ms };
    const message = `${request.method} ${route} ${reply.statusCode} ${ms} ms`;
    if (error) reply.log.error({ ...fields, err: error }, message);
    else if (request.routeOptions.config?.staticFile) reply.log.debug(fields, message);
    else reply.log.info(fields, message);
  }
}
