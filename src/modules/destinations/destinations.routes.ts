import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sendError } from '../../http/error-handler.ts';
import type { MetricsService } from '../metrics/metrics.service.ts';
import type { DestinationsService, OverrideLimits } from './destinations.service.ts';

/**
 * The operator's routes of direct delivery (docs/api/destinations.md): GET /v1/destinations, every destination;
 * GET /v1/destinations/overrides, and PUT and DELETE /v1/destinations/overrides/{pattern}, the limits set by
 * MX pattern or domain. Operator-level like GET /metrics and with its token (METRICS_TOKEN, as a bearer
 * token): they show and change every project's mail, so no API key opens them. Off (404) without
 * METRICS_TOKEN. Not in the OpenAPI document: their token is not an API key.
 */
export function registerDestinationRoutes(
  app: FastifyInstance,
  deps: { destinations: DestinationsService; metrics: Pick<MetricsService, 'access'> },
): void {
  async function operatorOnly(request: FastifyRequest, reply: FastifyReply) {
    const access = deps.metrics.access(request.headers.authorization);
    if (access === 'off') {
      return sendError(
        request,
        reply,
        404,
        'operator_token_off',
        `${request.method} ${request.routeOptions.url} is for the operator: it is on when METRICS_TOKEN is set (at ` +
          'least 16 characters), and takes Authorization: Bearer <METRICS_TOKEN>.',
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
    return undefined;
  }
  // Before validation: a caller without the token learns nothing of the body it sent.
  const operator = { config: { public: true }, preValidation: operatorOnly };

  app.get('/v1/destinations', { ...operator, schema: { hide: true } }, async () => ({
    object: 'list',
    data: await deps.destinations.list(),
  }));

  app.get('/v1/destinations/overrides', { ...operator, schema: { hide: true } }, async () => ({
    object: 'list',
    data: await deps.destinations.overrides(),
  }));

  const limit = (minimum: number) =>
    Type.Optional(Type.Union([Type.Integer({ minimum, maximum: 10_000_000 }), Type.Null()]));
  const Pattern = Type.Object({ pattern: Type.String({ minLength: 1, maxLength: 255 }) });
  app.put<{ Params: { pattern: string }; Body: OverrideLimits }>(
    '/v1/destinations/overrides/:pattern',
    {
      ...operator,
      schema: {
        hide: true,
        params: Pattern,
        body: Type.Object(
          {
            connections: limit(1),
            messages_per_connection: limit(0),
            per_minute: limit(0),
            per_hour: limit(0),
          },
          { additionalProperties: false },
        ),
      },
    },
    async (request) => deps.destinations.setOverride(request.params.pattern, request.body),
  );

  app.delete<{ Params: { pattern: string } }>(
    '/v1/destinations/overrides/:pattern',
    { ...operator, schema: { hide: true, params: Pattern } },
    async (request) => deps.destinations.removeOverride(request.params.pattern),
  );
}
