import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { buildSerializer } from './http/serialization.ts';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { HttpTimeouts, TrustProxy } from './config.ts';
import { openRequestWindow, type RequestWindow } from './db/validated-cache.ts';
import { installAuth } from './http/auth.ts';
import { installBodyMemoryLimit } from './http/body-memory.ts';
import { createDeferredSchemas } from './http/deferred-schemas.ts';
import { frameworkErrors, installErrorHandling } from './http/error-handler.ts';
import { ErrorBody } from './http/error-schema.ts';
import { installIdempotency } from './http/idempotency.ts';
import { installApiLog } from './modules/logs/logs.hook.ts';
import { registerApiLogRoutes } from './modules/logs/logs.routes.ts';
import { swaggerOptions } from './http/openapi.ts';
import { openApiWebhooks } from './modules/event-kinds/event-kinds.openapi.ts';
import { createRateLimiter } from './http/rate-limit.ts';
import { OneLinePerRequest } from './http/request-log.ts';
import { installJsonBody } from './http/json-body.ts';
import { installOptionalBodies, installValidation, parseQueryString } from './http/validation.ts';
import { newRequestId } from './lib/ids.ts';
import type { Notifier } from './queue/notifier.ts';
import { registerContactRoutes } from './modules/contacts/contacts.routes.ts';
import { registerContactImportRoutes } from './modules/contacts/contact-imports.routes.ts';
import { registerSegmentRoutes } from './modules/segments/segments.routes.ts';
import { registerTopicRoutes } from './modules/topics/topics.routes.ts';
import { registerBroadcastRoutes } from './modules/broadcasts/broadcasts.routes.ts';
import { registerBroadcastTestRoutes } from './modules/broadcasts/broadcast-tests.routes.ts';
import { registerCustomEventRoutes } from './modules/custom-events/custom-events.routes.ts';
import { registerAutomationRoutes } from './modules/automations/automations.routes.ts';
import { registerApiKeyRoutes } from './modules/api-keys/api-keys.routes.ts';
import { registerDmarcRoutes } from './modules/dmarc/dmarc.routes.ts';
import { registerDestinationRoutes } from './modules/destinations/destinations.routes.ts';
import { registerWarmupRoutes } from './modules/destinations/warmup.routes.ts';
import { registerReputationRoutes } from './modules/reputation/reputation.routes.ts';
import { registerDomainRoutes } from './modules/domains/domains.routes.ts';
import { registerEmailRoutes } from './modules/emails/emails.routes.ts';
import { registerResendRoutes } from './modules/resend-compat/resend.routes.ts';
import { registerSuppressionRoutes } from './modules/suppressions/suppressions.routes.ts';
import { registerInboundRoutes } from './modules/inbound/inbound.routes.ts';
import { registerInboundRouteRoutes } from './modules/inbound-routes/inbound-routes.routes.ts';
import { registerReceivedRoutes } from './modules/inbound/received.routes.ts';
import { registerEventKindRoutes } from './modules/event-kinds/event-kinds.routes.ts';
import { registerEventRoutes } from './modules/events/events.routes.ts';
import type { EventService } from './modules/events/events.service.ts';
import { registerTemplateRoutes } from './modules/templates/templates.routes.ts';
import { registerWebhookOperationRoutes } from './modules/webhook-operations/webhook-operations.routes.ts';
import { registerWebhookRoutes } from './modules/webhooks/webhooks.routes.ts';
import { registerEngagementRoutes } from './modules/engagement/engagement.routes.ts';
import { preferenceRoutes } from './modules/preferences/preferences.routes.ts';
import { registerStatsRoutes } from './modules/stats/stats.routes.ts';
import { registerDashboardRoutes } from './modules/dashboard/dashboard.routes.ts';
import { registerHealthRoutes } from './modules/health/health.routes.ts';
import { registerMetricsRoutes } from './modules/metrics/metrics.routes.ts';
import { docsBranding } from './modules/dashboard/docs-branding.ts';
import type { Services } from './services.ts';

export interface AppOptions {
  logger?: FastifyServerOptions['logger'];
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Closed once the response is sent (validated-cache.ts). */
    readWindow: RequestWindow | undefined;
  }
  interface FastifyInstance {
    /** Emits events (and their webhook deliveries) for the rest of the process. */
    events: EventService;
    /** Notified when emails are accepted (the services' send notifier). */
    sendNotifier: Notifier;
  }
}

export const BODY_LIMIT_BYTES = 1024 * 1024;

/** The route label of requests no route matched (/metrics): one label however many paths are probed. */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * How often Node looks for requests past HTTP_HEADERS_TIMEOUT or HTTP_REQUEST_TIMEOUT (the idle and keep-alive
 * timeouts are timers of their own): a tenth of the shorter, so a connection is closed at most 10 % late.
 * Node's default is every 30 s, which closed a silent socket 38 s into a 10 s headers timeout.
 */
export const connectionsCheckingIntervalMs = (timeouts: HttpTimeouts): number =>
  Math.max(10, Math.floor(Math.min(timeouts.headersMs, timeouts.requestMs) / 10));

/**
 * TRUST_PROXY as Fastify takes it. A hop count becomes a trust function: Fastify reads a bare number as
 * "trust nothing" (a hop count cannot tell a proxy from a client that reached the port directly), which is
 * why the reference says to use one only where the proxy is the only way in.
 */
function trustProxyOption(trust: TrustProxy): FastifyServerOptions['trustProxy'] {
  if (typeof trust !== 'number') return trust;
  // proxy-addr asks about each address from the socket's (hop 0) outwards; the first untrusted is the client.
  return (_address, hop) => hop < trust;
}

/**
 * The HTTP API on the process's services: its routes, authentication, limits and timeouts (the HTTP part of
 * the configuration). The services outlive it: whoever built them closes them.
 */
/**
 * A `postwire worker` process's own HTTP (WORKER_HTTP_PORT): its probes and its metrics, nothing of the API.
 * What a worker counts (sent, delivered, bounced, webhook attempts, reports read) lives in its process only,
 * so each process is scraped, as Postal's are.
 */
export async function buildProbeApp(services: Services, options: AppOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: options.logger ?? false,
    logController: new OneLinePerRequest(),
    genReqId: newRequestId,
    requestIdHeader: false,
    return503OnClosing: true,
    frameworkErrors,
  });
  installErrorHandling(app);
  registerHealthRoutes(app, services);
  registerMetricsRoutes(app, { metrics: services.metricsEndpoint });
  return app;
}

export async function buildApp(services: Services, options: AppOptions = {}): Promise<FastifyInstance> {
  const { config, database, clock } = services;
  // A client that connects and sends nothing, or sends its request a byte at a time, is cut off instead of
  // holding a connection for ever.
  const timeouts = config.httpTimeouts;
  const schemas = createDeferredSchemas(buildSerializer);
  const app = Fastify({
    logger: options.logger ?? false,
    logController: new OneLinePerRequest(),
    trustProxy: trustProxyOption(config.trustProxy),
    bodyLimit: BODY_LIMIT_BYTES,
    genReqId: newRequestId,
    requestIdHeader: false,
    return503OnClosing: true,
    ajv: { customOptions: { strict: false } },
    schemaController: { compilersFactory: { buildSerializer: schemas.buildSerializer } },
    routerOptions: { querystringParser: parseQueryString },
    frameworkErrors,
    http: { connectionsCheckingInterval: connectionsCheckingIntervalMs(timeouts) },
  });
  schemas.attach(app);
  app.server.setTimeout(timeouts.idleMs);
  app.server.headersTimeout = timeouts.headersMs;
  app.server.requestTimeout = timeouts.requestMs;
  app.server.keepAliveTimeout = timeouts.keepAliveMs;

  app.decorate('events', services.events);
  app.decorate('sendNotifier', services.notifiers.send);

  // Rate windows run on the injected clock, like everything else that tells time.
  const clockMs = () => clock.now().getTime();
  // The one thing /metrics adds to a request: a histogram observation, labelled by the route's pattern
  // (`/v1/emails/:id`, never the URL, so the labels stay few), every unknown path under one label. Only when
  // /metrics is on (METRICS_TOKEN): it cost a cached GET 7 to 15 µs (bench:api, 46–50 → 53–65 µs a request).
  // In the hook that closes the request's window (opened in the onRequest hook below): one hook, not two.
  const metrics = config.metricsToken === undefined ? undefined : services.metrics;
  app.addHook('onResponse', (request, reply, done) => {
    if (request.readWindow) request.readWindow.open = false;
    metrics?.observeRequest(
      request.method,
      request.is404 ? UNMATCHED_ROUTE : (request.routeOptions.url ?? UNMATCHED_ROUTE),
      reply.statusCode,
      reply.elapsedTime / 1000,
    );
    done();
  });
  // The answer to a request that wrote a key, webhook, template or domain could tell its client of the write:
  // it waits until no other process can still serve what the write replaced (the stamps' lease,
  // db/validated-cache.ts), so the client's next request, wherever it goes, sees it. Other requests, even
  // in the same moment, do not wait: they tell of no write.
  const stamps = database.stamps;
  if (stamps.leaseMs > 0) {
    app.addHook('onSend', (request, _reply, payload, done) => {
      const wroteAt = request.readWindow?.cachedWriteAt;
      const leases = wroteAt === undefined ? undefined : stamps.outlastLeases(wroteAt);
      if (!leases) return done(null, payload);
      leases.then(() => done(null, payload), done);
    });
  }
  // JSON only: Fastify also parses text/plain by default, which would turn a wrong content type into a 422.
  app.removeContentTypeParser('text/plain');
  installJsonBody(app);
  installOptionalBodies(app);
  installValidation(app, schemas);
  installErrorHandling(app);
  const authorize = installAuth(app, {
    projects: services.projects,
    rateLimiter: createRateLimiter({
      limit: config.rateLimit,
      windowMs: config.rateLimitWindowMs,
      now: clockMs,
    }),
    failedAuthLimiter: createRateLimiter({
      limit: config.authFailureLimit,
      windowMs: config.authFailureWindowMs,
      now: clockMs,
    }),
  });
  // The app's one onRequest hook, synchronous: the request id's header, the request window (the stamp reads of
  // in-memory lookups made from here on serve the rest of the request, the key's first), then the key's check.
  // A hook each cost every request a turn of Fastify's hook runner, and an async one a promise more.
  app.decorateRequest('readWindow', undefined);
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    request.readWindow = openRequestWindow(() => {
      const checked = authorize(request, reply);
      if (checked === undefined) done();
      else checked.then(done, done);
    });
  });
  installBodyMemoryLimit(app, { limitBytes: config.httpBodyMemoryBytes });
  installIdempotency(app, { database, clock });
  installApiLog(app, { recorder: services.apiLogs.recorder, clock });

  app.addSchema(ErrorBody);
  await app.register(swagger, swaggerOptions(openApiWebhooks));
  // The docs page and its assets are public like the document itself; marking them in their own context
  // leaves every other route behind the API key.
  await app.register(async (docs) => {
    docs.addHook('onRoute', (route) => {
      route.config = { ...route.config, public: true, staticFile: true };
    });
    await docs.register(swaggerUi, {
      routePrefix: '/docs',
      uiConfig: { deepLinking: true },
      ...docsBranding(),
    });
  });

  // Each module's routes take the services they name (`{ templates }`) from the process's services; the few
  // that call theirs by another name are handed them by name.
  registerHealthRoutes(app, services);
  registerMetricsRoutes(app, { metrics: services.metricsEndpoint });
  app.get('/v1/openapi.json', { config: { public: true }, schema: { hide: true } }, async () =>
    app.swagger(),
  );
  registerDashboardRoutes(app);
  registerEventKindRoutes(app);
  registerWebhookRoutes(app, services);
  registerWebhookOperationRoutes(app, { operations: services.webhookOperations });
  registerEventRoutes(app, services);
  registerTemplateRoutes(app, services);
  registerEmailRoutes(app, services);
  registerSuppressionRoutes(app, services);
  registerContactRoutes(app, {
    contacts: services.contacts,
    contactProperties: services.contactProperties,
    activity: services.contactActivity,
  });
  registerContactImportRoutes(app, services);
  registerSegmentRoutes(app, services);
  registerTopicRoutes(app, services);
  registerBroadcastRoutes(app, services);
  registerBroadcastTestRoutes(app, services);
  registerCustomEventRoutes(app, services);
  registerAutomationRoutes(app, services);
  registerInboundRoutes(app, services);
  registerInboundRouteRoutes(app, services);
  registerReceivedRoutes(app, services);
  registerDomainRoutes(app, services);
  registerDmarcRoutes(app, services);
  registerDestinationRoutes(app, {
    destinations: services.destinations,
    metrics: services.metricsEndpoint,
  });
  registerWarmupRoutes(app, services);
  registerReputationRoutes(app, services);
  registerApiKeyRoutes(app, services);
  registerStatsRoutes(app, services);
  registerApiLogRoutes(app, { logs: services.apiLogs });
  await registerResendRoutes(app, services);
  await registerEngagementRoutes(app, {
    engagement: services.engagement,
    preferences: preferenceRoutes(services.preferences),
    clock,
    rateLimit: { limit: config.publicRateLimit, windowMs: config.publicRateLimitWindowMs },
  });

  return app;
}
