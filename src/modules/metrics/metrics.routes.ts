import type { FastifyInstance } from 'fastify';
import { sendError } from '../../http/error-handler.ts';
import type { MetricsService } from './metrics.service.ts';

/**
 * GET /metrics, the Prometheus text format. Off (404 `metrics_off`, saying how to turn it on: that it exists is
 * no secret of an open-source server) unless METRICS_TOKEN is set; then only with that bearer token (401),
 * never an API key: it counts every project's mail. It is not in the OpenAPI document: Prometheus, not an API
 * client, reads it, and its token is not an API key.
 */
export function registerMetricsRoutes(app: FastifyInstance, { metrics }: { metrics: MetricsService }): void {
  app.get('/metrics', { config: { public: true }, schema: { hide: true } }, async (request, reply) => {
    const access = metrics.access(request.headers.authorization);
    if (access === 'off') {
      return sendError(
        request,
        reply,
        404,
        'metrics_off',
        'GET /metrics is off: the operator turns it on by setting METRICS_TOKEN (at least 16 characters); ' +
          'Prometheus then sends Authorization: Bearer <METRICS_TOKEN>.',
      );
    }
    if (access === 'denied') {
      reply.header('www-authenticate', 'Bearer realm="postwire-metrics"');
      return sendError(
        request,
        reply,
        401,
        'invalid_metrics_token',
        'Send Authorization: Bearer <METRICS_TOKEN>.',
      );
    }
    const { contentType, body } = await metrics.scrape();
    return reply.type(contentType).send(body);
  });
}
