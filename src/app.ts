import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { DEFAULTS, type EngagementDefaults, type HttpTimeouts } from './config.ts';
import type { DatabaseHandle } from './db/connection.ts';
import { openRequestWindow, type RequestWindow } from './db/validated-cache.ts';
import { installAuth } from './http/auth.ts';
import { installBodyMemoryLimit } from './http/body-memory.ts';
import { frameworkErrors, installErrorHandling } from './http/error-handler.ts';
import { ErrorBody } from './http/error-schema.ts';
import { installIdempotency } from './http/idempotency.ts';
import { swaggerOptions } from './http/openapi.ts';
import { createRateLimiter } from './http/rate-limit.ts';
import { installJsonBody, installValidation, parseQueryString } from './http/validation.ts';
import type { Clock } from './lib/clock.ts';
import type { SecretBox } from './lib/crypto.ts';
import { newRequestId } from './lib/ids.ts';
import type { Resolver } from './lib/network-policy.ts';
import { createNotifier, type Notifier } from './queue/notifier.ts';
import { createDns, type Dns } from './lib/dns.ts';
import { createDeliveryService } from './modules/deliveries/deliveries.service.ts';
import { registerDomainRoutes } from './modules/domains/domains.routes.ts';
import { createDomainService, type DomainSettings } from './modules/domains/domains.service.ts';
import { createEmailRepo } from './modules/emails/emails.repo.ts';
import { registerEmailRoutes } from './modules/emails/emails.routes.ts';
import { createEmailService } from './modules/emails/emails.service.ts';
import { createSuppressionRepo } from './modules/suppressions/suppressions.repo.ts';
import { registerSuppressionRoutes } from './modules/suppressions/suppressions.routes.ts';
import { createSuppressionService } from './modules/suppressions/suppressions.service.ts';
import { createInboundRepo } from './modules/inbound/inbound.repo.ts';
import { registerInboundRoutes } from './modules/inbound/inbound.routes.ts';
import { createInboundService } from './modules/inbound/inbound.service.ts';
import { registerEventKindRoutes } from './modules/event-kinds/event-kinds.routes.ts';
import { registerEventRoutes } from './modules/events/events.routes.ts';
import { createEventService, type EventService } from './modules/events/events.service.ts';
import { createProjectRepo } from './modules/projects/projects.repo.ts';
import { createProjectService } from './modules/projects/projects.service.ts';
import { createRenderPool, type RenderPoolOptions } from './modules/templates/render-pool.ts';
import { createTemplateRepo } from './modules/templates/templates.repo.ts';
import { registerTemplateRoutes } from './modules/templates/templates.routes.ts';
import { createTemplateService } from './modules/templates/templates.service.ts';
import { createWebhookOperations } from './modules/webhooks/webhook-operations.service.ts';
import { createWebhookRepo } from './modules/webhooks/webhooks.repo.ts';
import { registerWebhookRoutes } from './modules/webhooks/webhooks.routes.ts';
import { createWebhookService } from './modules/webhooks/webhooks.service.ts';
import { createEngagementRepo } from './modules/engagement/engagement.repo.ts';
import { registerEngagementRoutes } from './modules/engagement/engagement.routes.ts';
import { createEngagementService } from './modules/engagement/engagement.service.ts';
import { createEngagementTokens } from './modules/engagement/tokens.ts';
import { registerStatsRoutes } from './modules/stats/stats.routes.ts';
import { createStatsService } from './modules/stats/stats.service.ts';
import { registerDashboardRoutes } from './modules/dashboard/dashboard.routes.ts';
import { docsBranding } from './modules/dashboard/docs-branding.ts';

export interface AppDeps {
  database: DatabaseHandle;
  clock: Clock;
  secretBox: SecretBox;
  resolver: Resolver;
  allowPrivateUrls: boolean;
  rateLimit: { limit: number; windowMs: number };
  /** Failed authentications per client address per window (POSTWIRE_AUTH_FAILURE_*); 0 turns it off. */
  authFailureLimit?: { limit: number; windowMs: number };
  logger?: FastifyServerOptions['logger'];
  /** Wakes this process's delivery worker when events are emitted; share it with the worker. */
  notifier?: Notifier;
  /** Wakes this process's sending worker when emails are accepted; share it with the worker. */
  sendNotifier?: Notifier;
  /** Recipients a project may send to per UTC day (SEND_DAILY_LIMIT); 0: no limit. Default 10 000. */
  sendDailyLimit?: number;
  /** Concurrent sends written together (DEFAULTS.sendGroups when absent); false: each send on its own. */
  sendGroups?: { maxEmails: number } | false;
  /**
   * The delivery workers' attempt timeout (WEBHOOK_TIMEOUT_MS, default 15 s): POST /v1/webhooks/{id}/test
   * waits this plus webhookTestMarginMs (default 5 s, time for a worker to claim it) for the first attempt.
   */
  webhookTimeoutMs?: number;
  webhookTestMarginMs?: number;
  /** How long a replaced webhook secret keeps signing (WEBHOOK_SECRET_ROTATION_WINDOW). Default 24 h. */
  webhookSecretRotationWindowMs?: number;
  /** Render threads, their queue and each render's time (TEMPLATE_RENDER_*). */
  templateRendering?: RenderPoolOptions;
  /** How long the server waits on a client, phase by phase (HTTP_*_TIMEOUT). */
  httpTimeouts?: HttpTimeouts;
  /** Bytes of request bodies held in memory at once (HTTP_BODY_MEMORY_LIMIT); 0: no limit. */
  httpBodyMemoryBytes?: number;
  /** Where sending domains' records are looked up (DNS_SERVERS); the system's resolvers by default. */
  dns?: Dns;
  /**
   * Sending domains: their return-path records, re-check interval, SENDER_DOMAINS and the fallback DKIM key
   * and BOUNCE_DOMAIN. Default: no return path, any From domain allowed, unsigned fallback.
   */
  domains?: Partial<DomainSettings>;
  /** PUBLIC_URL: unset, sends asking for tracking or unsubscribe are refused. */
  publicUrl?: string | undefined;
  /** TRACK_OPENS, TRACK_CLICKS, LIST_UNSUBSCRIBE (all off by default). */
  engagementDefaults?: EngagementDefaults;
  /** Requests per client address per window on the public tracking routes (PUBLIC_RATE_LIMIT); 0: off. */
  publicRateLimit?: { limit: number; windowMs: number };
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Closed once the response is sent (validated-cache.ts). */
    readWindow: RequestWindow | undefined;
  }
  interface FastifyInstance {
    /** Emits events (and their webhook deliveries) for the rest of the process. */
    events: EventService;
    /** Notified when emails are accepted (the `sendNotifier` dependency, or the app's own). */
    sendNotifier: Notifier;
  }
}

export const BODY_LIMIT_BYTES = 1024 * 1024;

/**
 * How often Node looks for requests past HTTP_HEADERS_TIMEOUT or HTTP_REQUEST_TIMEOUT (the idle and keep-alive
 * timeouts are timers of their own): a tenth of the shorter, so a connection is closed at most 10 % late.
 * Node's default is every 30 s, which closed a silent socket 38 s into a 10 s headers timeout.
 */
export const connectionsCheckingIntervalMs = (timeouts: HttpTimeouts): number =>
  Math.max(10, Math.floor(Math.min(timeouts.headersMs, timeouts.requestMs) / 10));

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  // A client that connects and sends nothing, or sends its request a byte at a time, is cut off instead of
  // holding a connection for ever.
  const timeouts = deps.httpTimeouts ?? DEFAULTS.httpTimeouts;
  const app = Fastify({
    logger: deps.logger ?? false,
    bodyLimit: BODY_LIMIT_BYTES,
    genReqId: newRequestId,
    requestIdHeader: false,
    return503OnClosing: true,
    ajv: { customOptions: { strict: false } },
    routerOptions: { querystringParser: parseQueryString },
    frameworkErrors,
    http: { connectionsCheckingInterval: connectionsCheckingIntervalMs(timeouts) },
  });
  app.server.setTimeout(timeouts.idleMs);
  app.server.headersTimeout = timeouts.headersMs;
  app.server.requestTimeout = timeouts.requestMs;
  app.server.keepAliveTimeout = timeouts.keepAliveMs;

  const db = deps.database.db;
  const webhookRepo = createWebhookRepo(db, deps.database.stamps);
  const templateRepo = createTemplateRepo(db, deps.database.stamps);
  const renderer = createRenderPool(deps.templateRendering ?? DEFAULTS.templateRendering);
  app.addHook('onClose', () => renderer.close());
  const projects = createProjectService({
    repo: createProjectRepo(db, deps.database.stamps),
    clock: deps.clock,
  });
  const webhooks = createWebhookService({
    repo: webhookRepo,
    clock: deps.clock,
    secretBox: deps.secretBox,
    resolver: deps.resolver,
    allowPrivateUrls: deps.allowPrivateUrls,
    secretRotationWindowMs: deps.webhookSecretRotationWindowMs ?? DEFAULTS.webhookSecretRotationWindowMs,
  });
  const templates = createTemplateService({
    repo: templateRepo,
    clock: deps.clock,
    renderer,
  });

  const notifier = deps.notifier ?? createNotifier();
  const events = createEventService({
    db,
    engine: deps.database.engine,
    clock: deps.clock,
    notifier,
    webhooks: webhookRepo,
  });
  app.decorate('events', events);
  const webhookOperations = createWebhookOperations({
    repo: webhookRepo,
    clock: deps.clock,
    events,
    deliveries: createDeliveryService({ db, engine: deps.database.engine, notifier }),
    testWaitMs:
      (deps.webhookTimeoutMs ?? DEFAULTS.webhookTimeoutMs) +
      (deps.webhookTestMarginMs ?? DEFAULTS.webhookTestMarginMs),
  });

  const domains = createDomainService({
    db,
    engine: deps.database.engine,
    stamps: deps.database.stamps,
    clock: deps.clock,
    secretBox: deps.secretBox,
    dns: deps.dns ?? createDns(),
    events,
    settings: {
      recheckMs: DEFAULTS.domainRecheckMs,
      senderDomains: 'any',
      ...deps.domains,
    },
  });

  const sendNotifier = deps.sendNotifier ?? createNotifier();
  const suppressionRepo = createSuppressionRepo(db, deps.database.engine);
  const engagementRepo = createEngagementRepo(db);
  app.decorate('sendNotifier', sendNotifier);
  const emails = createEmailService({
    repo: createEmailRepo(db, deps.database.engine),
    templates: templateRepo,
    renderer,
    clock: deps.clock,
    dailyLimit: deps.sendDailyLimit ?? DEFAULTS.sendDailyLimit,
    notifier: sendNotifier,
    events,
    suppressions: suppressionRepo,
    db,
    sendGroups: deps.sendGroups === false ? undefined : (deps.sendGroups ?? DEFAULTS.sendGroups),
    senders: domains,
    engagement: {
      publicUrl: deps.publicUrl,
      defaults: deps.engagementDefaults ?? DEFAULTS.engagement,
      repo: engagementRepo,
    },
  });
  const engagement = createEngagementService({
    db,
    clock: deps.clock,
    tokens: createEngagementTokens(deps.secretBox),
    events,
  });
  const suppressions = createSuppressionService({ repo: suppressionRepo, clock: deps.clock });

  // Rate windows run on the injected clock, like everything else that tells time.
  const clockMs = () => deps.clock.now().getTime();
  // First of all hooks: the stamp reads of in-memory lookups made from here on serve the rest of the request.
  // One synchronous hook for both: an async one per header costs a promise per request.
  app.decorateRequest('readWindow', undefined);
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    request.readWindow = openRequestWindow(done);
  });
  app.addHook('onResponse', (request, _reply, done) => {
    if (request.readWindow) request.readWindow.open = false;
    done();
  });
  // An answer given after this process wrote a key, webhook, template or domain could tell its client of
  // the write: it waits until no other process can still serve what the write replaced (the stamps' lease,
  // db/validated-cache.ts), so the client's next request, wherever it goes, sees it. Nothing waits otherwise.
  const stamps = deps.database.stamps;
  if (stamps.leaseMs > 0) {
    app.addHook('onSend', (_request, _reply, payload, done) => {
      const leases = stamps.outlastLeases();
      if (!leases) return done(null, payload);
      leases.then(() => done(null, payload), done);
    });
  }
  // JSON only: Fastify also parses text/plain by default, which would turn a wrong content type into a 422.
  app.removeContentTypeParser('text/plain');
  installJsonBody(app);
  installValidation(app);
  installErrorHandling(app);
  installAuth(app, {
    projects,
    rateLimiter: createRateLimiter({ ...deps.rateLimit, now: clockMs }),
    failedAuthLimiter: createRateLimiter({
      ...(deps.authFailureLimit ?? {
        limit: DEFAULTS.authFailureLimit,
        windowMs: DEFAULTS.authFailureWindowMs,
      }),
      now: clockMs,
    }),
  });
  installBodyMemoryLimit(app, { limitBytes: deps.httpBodyMemoryBytes ?? DEFAULTS.httpBodyMemoryBytes });
  installIdempotency(app, { database: deps.database, clock: deps.clock });

  app.addSchema(ErrorBody);
  await app.register(swagger, swaggerOptions);
  // The docs page and its assets are public like the document itself; marking them in their own context
  // leaves every other route behind the API key.
  await app.register(async (docs) => {
    docs.addHook('onRoute', (route) => {
      route.config = { ...route.config, public: true };
    });
    await docs.register(swaggerUi, {
      routePrefix: '/docs',
      uiConfig: { deepLinking: true },
      ...docsBranding(),
    });
  });

  app.get('/healthz', { config: { public: true }, schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/v1/openapi.json', { config: { public: true }, schema: { hide: true } }, async () =>
    app.swagger(),
  );
  registerDashboardRoutes(app);
  registerEventKindRoutes(app);
  registerWebhookRoutes(app, { webhooks, operations: webhookOperations });
  registerEventRoutes(app, { events });
  registerTemplateRoutes(app, { templates });
  registerEmailRoutes(app, { emails });
  registerSuppressionRoutes(app, { suppressions });
  registerInboundRoutes(app, {
    inbound: createInboundService({ repo: createInboundRepo(db, deps.database.engine) }),
  });
  registerDomainRoutes(app, { domains });
  registerStatsRoutes(app, { stats: createStatsService({ db, clock: deps.clock }) });
  await registerEngagementRoutes(app, {
    engagement,
    clock: deps.clock,
    rateLimit: deps.publicRateLimit ?? {
      limit: DEFAULTS.publicRateLimit,
      windowMs: DEFAULTS.publicRateLimitWindowMs,
    },
  });

  return app;
}
