import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { routeOptions } from '../../http/route-options.ts';
import { Stats, StatsQuery } from './stats.schemas.ts';
import type { StatsService } from './stats.service.ts';

export function registerStatsRoutes(server: FastifyInstance, { stats }: { stats: StatsService }): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/v1/stats',
    routeOptions(['Emails']).readOnly({
      operationId: 'getStats',
      summary: 'Sending and engagement numbers, per day and in total',
      description:
        'Counts of sent, delivered, bounced (by type), complained, suppressed, unsubscribed, unique opens and unique clicks (people and machines apart) per UTC day, with the bounce and complaint rates against the limit Gmail publishes. Read from daily counts kept up to date with each event. Counting starts with the version that added it.',
      querystring: StatsQuery,
      response: { 200: Stats, ...errorResponses() },
    }),
    async (request) => stats.get(projectOf(request), request.query),
  );
}
