import type { FastifyInstance } from 'fastify';
import { sendError } from '../../http/error-handler.ts';
import type { MetricsService } from '../metrics/metrics.service.ts';
import type { DestinationsService } from './destinations.service.ts';

/**
 * GET /v1/destinations: every destination of direct delivery, for the operator (docs/api/destinations.md).
 * Operator-level like GET /metrics and with its token (METRICS_TOKEN, as a bearer token): it shows every
 * project's mail, so no API key opens it. Off (404) without METRICS_TOKEN. Not in the OpenAPI document: its
 * token is not an API key.
 */
export function registerDestinationRoutes(
  app: FastifyInstance,
  deps: { destinations: DestinationsService; metrics: Pick<MetricsService, 'access'> },
): void {
  app.get(
    '/v1/destinations',
    { config: { public: true }, schema: { hide: true } },
    async (request, reply) => {
      const access = deps.metrics.access(request.headers.authorization);
      if (access === 'off') {
        return sendError(
          request,
          reply,
          404,
          'operator_token_off',
          'GET /v1/destinations is for the operator: it is on when METRICS_TOKEN is set (at least 16 ' +
            'characters), and takes Authorization: Bearer <METRICS_TOKEN>.',
        );
      }
      if (access === 'denied') {
        reply.header('www-authenticate', 'Bearer realm="postwire-operator"');
        return sendError(
          request,
          reply,
          401,
          'invalid_operator_token',
          'Send Authorization: Bearer <METRICS_TOKEN>: this is an operator route, no API key opens it.',
        );
      }
      return { object: 'list', data: await deps.destinations.list() };
    },
  );
}
