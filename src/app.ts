import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { DatabaseHandle } from './db/connection.ts';
import { installAuth } from './http/auth.ts';
import { installErrorHandling } from './http/error-handler.ts';
import { ErrorBody } from './http/error-schema.ts';
import { installIdempotency } from './http/idempotency.ts';
import { openApiInfo } from './http/openapi.ts';
import { createRateLimiter } from './http/rate-limit.ts';
import { installValidation } from './http/validation.ts';
import type { Clock } from './lib/clock.ts';
import type { SecretBox } from './lib/crypto.ts';
import { newId } from './lib/ids.ts';
import type { Resolver } from './lib/network-policy.ts';
import { registerEventKindRoutes } from './modules/event-kinds/event-kinds.routes.ts';
import { createProjectRepo } from './modules/projects/projects.repo.ts';
import { createProjectService } from './modules/projects/projects.service.ts';
import { createTemplateRepo } from './modules/templates/templates.repo.ts';
import { registerTemplateRoutes } from './modules/templates/templates.routes.ts';
import { createTemplateService } from './modules/templates/templates.service.ts';
import { createWebhookRepo } from './modules/webhooks/webhooks.repo.ts';
import { registerWebhookRoutes } from './modules/webhooks/webhooks.routes.ts';
import { createWebhookService } from './modules/webhooks/webhooks.service.ts';

export interface AppDeps {
  database: DatabaseHandle;
  clock: Clock;
  secretBox: SecretBox;
  resolver: Resolver;
  allowPrivateUrls: boolean;
  rateLimit: { limit: number; windowMs: number };
  logger?: FastifyServerOptions['logger'];
}

export const BODY_LIMIT_BYTES = 1024 * 1024;

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    logger: deps.logger ?? false,
    bodyLimit: BODY_LIMIT_BYTES,
    genReqId: () => newId('req'),
    requestIdHeader: false,
    return503OnClosing: true,
    ajv: { customOptions: { strict: false } },
  });

  const db = deps.database.db;
  const projects = createProjectService({ repo: createProjectRepo(db), clock: deps.clock });
  const webhooks = createWebhookService({
    repo: createWebhookRepo(db),
    clock: deps.clock,
    secretBox: deps.secretBox,
    resolver: deps.resolver,
    allowPrivateUrls: deps.allowPrivateUrls,
  });
  const templates = createTemplateService({ repo: createTemplateRepo(db), clock: deps.clock });

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });
  installValidation(app);
  installErrorHandling(app);
  installAuth(app, { projects, rateLimiter: createRateLimiter(deps.rateLimit) });
  installIdempotency(app, { db, clock: deps.clock });

  app.addSchema(ErrorBody);
  await app.register(swagger, { openapi: openApiInfo });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { deepLinking: true } });

  app.get('/healthz', { config: { public: true }, schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/v1/openapi.json', { config: { public: true }, schema: { hide: true } }, async () =>
    app.swagger(),
  );
  registerEventKindRoutes(app);
  registerWebhookRoutes(app, { webhooks });
  registerTemplateRoutes(app, { templates });

  return app;
}
