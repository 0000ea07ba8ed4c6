import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { callUnderPath, callUnderPathWith } from '../../http/path-handlers.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { domainRoutes } from '../domains/domains.routes.ts';
import { SetWarmupBody, Warmup } from './warmup.schemas.ts';
import type { WarmupService } from './warmup.service.ts';

export function registerWarmupRoutes(server: FastifyInstance, { warmup }: { warmup: WarmupService }): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/v1/domains/:id/warmup',
    domainRoutes.readOnly({
      operationId: 'getDomainWarmup',
      summary: "A sending domain's warm-up",
      description:
        "Its schedule (messages per large-provider destination per UTC day), today's day and allowance, and what each destination took of it today. Direct delivery only (a relay shapes its own).",
      response: { 200: Warmup, ...errorResponses() },
    }),
    callUnderPath(warmup.get),
  );

  app.put(
    '/v1/domains/:id/warmup',
    domainRoutes.fullAccess({
      operationId: 'setDomainWarmup',
      summary: "Turn a sending domain's warm-up on or off, or change its schedule",
      description:
        "On: mail from the domain to a large provider over the day's allowance waits (its recipients show `throttled` with reason `warmup` and until when) and leaves the next day, transactional mail before broadcast copies. Turning it on starts at day 1; `restart` starts over.",
      body: SetWarmupBody,
      response: { 200: Warmup, ...errorResponses(422) },
    }),
    callUnderPathWith('body', warmup.set),
  );
}
