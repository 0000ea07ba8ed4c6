import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import { type Config, DEFAULTS } from './config.ts';
import { type DatabaseHandle, openDatabase } from './db/connection.ts';
import { migrateToLatest } from './db/migrate.ts';
import type { Database } from './db/schema.ts';
import { type Clock, systemClock } from './lib/clock.ts';
import { createSecretBox, type SecretBox } from './lib/crypto.ts';
import { type EncryptionKey, loadOrCreateEncryptionKey } from './lib/encryption-key.ts';
import { type Resolver, systemResolver } from './lib/network-policy.ts';
import { createDns } from './lib/dns.ts';
import { domainSettingsFromConfig } from './modules/domains/domains.service.ts';
import { createProjectRepo } from './modules/projects/projects.repo.ts';
import { createProjectService } from './modules/projects/projects.service.ts';
import { type RunningWorkers, startWorkers } from './workers.ts';
import type { WorkerLogger } from './lib/worker-logger.ts';
import { createNotifier, type Notifier, notifyOtherProcesses, QUEUE_CHANNELS } from './queue/notifier.ts';
import { createInboundRepo } from './modules/inbound/inbound.repo.ts';
import { createDomainRepo } from './modules/domains/domains.repo.ts';
import { type InboundListener, startInboundListener } from './modules/inbound/inbound.listener.ts';
import pino from 'pino';
import { loggerOptions } from './lib/logger.ts';

export const SQLITE_FILE = 'postwire.db';

/** The database the configuration names: PostgreSQL for a DATABASE_URL, else `postwire.db` in the data directory. */
export function openConfiguredDatabase(
  config: Pick<Config, 'databaseUrl' | 'dataDir' | 'cacheStampLeaseMs' | 'transactionWarnMs'>,
  options: { poolSize?: number } = {},
): Promise<DatabaseHandle> {
  return openDatabase({
    url: config.databaseUrl,
    sqlitePath: path.join(config.dataDir, SQLITE_FILE),
    stampLeaseMs: config.cacheStampLeaseMs,
    transactionWarnMs: config.transactionWarnMs,
    ...(options.poolSize ? { poolSize: options.poolSize } : {}),
  });
}

/** Where the data lives, for people: the SQLite file, or the PostgreSQL server and database without credentials. */
export function describeDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir'>): string {
  if (!config.databaseUrl) return `SQLite ${path.join(config.dataDir, SQLITE_FILE)}`;
  try {
    const url = new URL(config.databaseUrl);
    return `PostgreSQL ${url.host}${url.pathname}`;
  } catch {
    return 'PostgreSQL';
  }
}

export interface Output {
  write(text: string): unknown;
}

export interface ServerOptions {
  /** Whether this process also runs the background workers (`postwire serve --no-worker` runs none). */
  worker: boolean;
  /** Whether it listens for reports by SMTP when BOUNCE_DOMAIN is set (`--no-inbound`: no). Default true. */
  inbound?: boolean;
  clock?: Clock;
  resolver?: Resolver;
  /** Where the first start's generated API key is shown; standard output unless a test captures it. */
  stdout?: Output;
}

export interface RunningServer {
  app: FastifyInstance;
  /** The address it listens on, e.g. `http://127.0.0.1:3000`. */
  url: string;
  /** The port of the SMTP listener for reports, when it runs (BOUNCE_DOMAIN set, not --no-inbound). */
  inboundPort: number | undefined;
  /** Stops taking connections, lets in-flight requests finish, then closes the database. Idempotent. */
  close(): Promise<void>;
}

/**
 * Everything a server process does before it answers: open and migrate the database, make sure the
 * default project and key exist, load the encryption key, build the app and listen.
 */
export async function startServer(config: Config, options: ServerOptions): Promise<RunningServer> {
  const clock = options.clock ?? systemClock;
  const stdout = options.stdout ?? process.stdout;
  const database = await openConfiguredDatabase(config);
  let app: FastifyInstance | undefined;
  try {
    const applied = await migrateToLatest(database.db);

    const projects = createProjectService({ repo: createProjectRepo(database.db), clock });
    const { project, createdKey } = await projects.bootstrap(config.bootstrapKey);
    // Shown before anything else can fail (a port in use, say): the key exists from now on, and an empty
    // database only produces it once. It goes to stdout directly, never through the logger.
    if (createdKey) stdout.write(formatKeyBox(createdKey, project.id));

    const encryption = loadOrCreateEncryptionKey(config);
    const secretBox = createSecretBox(encryption.key);
    await checkEncryptionKey(database.db, secretBox, encryption);

    // Loaded here rather than at the top: the CLI's database commands use this module's helpers and should
    // not pay for loading the HTTP stack (a third of a second per command).
    const { buildApp } = await import('./app.ts');
    // Shared by the app and this process's workers, so what the API writes is picked up at once.
    const deliveryNotifier = options.worker ? createNotifier() : undefined;
    const sendNotifier = options.worker ? createNotifier() : undefined;
    const inboundNotifier = options.worker ? createNotifier() : undefined;
    app = await buildApp({
      ...(deliveryNotifier ? { notifier: deliveryNotifier } : {}),
      ...(sendNotifier ? { sendNotifier } : {}),
      sendDailyLimit: config.sendDailyLimit,
      database,
      clock,
      secretBox,
      resolver: options.resolver ?? systemResolver,
      allowPrivateUrls: config.allowPrivateUrls,
      rateLimit: { limit: config.rateLimit, windowMs: config.rateLimitWindowMs },
      authFailureLimit: { limit: config.authFailureLimit, windowMs: config.authFailureWindowMs },
      webhookTimeoutMs: config.webhookTimeoutMs,
      webhookSecretRotationWindowMs: config.webhookSecretRotationWindowMs,
      httpTimeouts: config.httpTimeouts,
      httpBodyMemoryBytes: config.httpBodyMemoryBytes,
      templateRendering: config.templateRendering,
      dns: createDns({ servers: config.dnsServers }),
      domains: domainSettingsFromConfig(config),
      publicUrl: config.publicUrl,
      engagementDefaults: config.engagement,
      publicRateLimit: { limit: config.publicRateLimit, windowMs: DEFAULTS.publicRateLimitWindowMs },
      logger: loggerOptions(config),
    });
    const log = app.log;
    log.info({ database: describeDatabase(config) }, 'Database ready');
    for (const migration of applied) log.info({ migration }, `Applied migration ${migration}`);
    if (encryption.created) {
      log.info(
        { file: encryption.file },
        'Generated the encryption key file for webhook secrets; back it up with the database',
      );
    }
    for (const warning of encryption.warnings) log.warn(warning);
    if (encryption.source === 'file' && database.engine === 'postgres') {
      log.warn(
        { file: encryption.file },
        'POSTWIRE_ENCRYPTION_KEY is not set, so the key file in the data directory is used: every process ' +
          'sharing this PostgreSQL database must use the same key (set POSTWIRE_ENCRYPTION_KEY to its contents)',
      );
    }

    // While draining, every response closes its connection: a keep-alive client would otherwise hold an
    // idle socket open, and with it the shutdown, until its own idle timeout.
    let draining = false;
    // Synchronous: every response passes here, and an async hook costs each one a promise.
    app.addHook('onSend', (_request, reply, payload, done) => {
      if (draining) reply.header('connection', 'close');
      done(null, payload);
    });

    // Workers first: once the log says the server listens, the whole process is up (and owns its signals).
    const workers = options.worker
      ? await startWorkers({
          config,
          database,
          clock,
          secretBox,
          resolver: options.resolver ?? systemResolver,
          logger: log,
          deliveryNotifier,
          sendNotifier,
          inboundNotifier,
        })
      : undefined;

    let inbound: InboundListener | undefined;
    try {
      if (options.inbound !== false) {
        inbound = await startInbound(config, { database, clock, logger: log, notifier: inboundNotifier });
      }
      await app.listen({ port: config.port, host: config.host });
    } catch (error) {
      await inbound?.close();
      await workers?.stop();
      throw error;
    }
    const url = listeningUrl(app, config.host);
    log.info({ url }, `Postwire is listening on ${url} (API reference at ${url}/docs)`);

    const running = app;
    let closing: Promise<void> | undefined;
    return {
      app: running,
      url,
      inboundPort: inbound?.port,
      close: () =>
        (closing ??= (async () => {
          draining = true;
          try {
            await running.close();
            await inbound?.close();
            // After the API (nothing new arrives) and before the database (attempts in flight record results).
            await workers?.stop();
          } finally {
            await database.close();
          }
        })()),
    };
  } catch (error) {
    await app?.close().catch(() => {});
    await database.close().catch(() => {});
    throw error;
  }
}

export interface RunOptions extends ServerOptions {
  /** How long in-flight requests get after SIGTERM/SIGINT before the process gives up on them. */
  shutdownGraceMs?: number;
}

// Below the 30 s that Kubernetes and systemd wait before SIGKILL, so a stuck request still ends in a clean log.
const DEFAULT_SHUTDOWN_GRACE_MS = 25_000;

/**
 * Runs the server until SIGTERM or SIGINT, then drains in-flight requests, closes the database and exits 0.
 * A second signal, or a drain that outlasts the grace period, exits 1 at once.
 */
export async function runServer(config: Config, options: RunOptions): Promise<RunningServer> {
  const server = await startServer(config, options);
  exitOnSignals(server.app.log, options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS, server.close);
  return server;
}

/**
 * A process that only works the queues (`postwire worker`): no HTTP. On PostgreSQL it wakes on NOTIFY; on
 * SQLite it polls. SIGTERM lets attempts in flight finish, gives back its claims and exits 0.
 */
export async function runWorker(
  config: Config,
  options: { clock?: Clock; resolver?: Resolver; inbound?: boolean } = {},
): Promise<void> {
  const log = pino(loggerOptions(config));
  const database = await openConfiguredDatabase(config);
  const clock = options.clock ?? systemClock;
  const inboundNotifier = createNotifier();
  let workers: RunningWorkers | undefined;
  let inbound: InboundListener | undefined;
  try {
    await migrateToLatest(database.db);
    const encryption = loadOrCreateEncryptionKey(config);
    const secretBox = createSecretBox(encryption.key);
    await checkEncryptionKey(database.db, secretBox, encryption);
    workers = await startWorkers({
      config,
      database,
      clock,
      secretBox,
      resolver: options.resolver ?? systemResolver,
      logger: log,
      inboundNotifier,
    });
    if (options.inbound !== false) {
      inbound = await startInbound(config, { database, clock, logger: log, notifier: inboundNotifier });
    }
  } catch (error) {
    await workers?.stop().catch(() => {});
    await database.close().catch(() => {});
    throw error;
  }
  log.info({ database: describeDatabase(config) }, 'Postwire worker started');
  const running = workers;
  const listening = inbound;
  exitOnSignals(log, DEFAULT_SHUTDOWN_GRACE_MS, async () => {
    try {
      await listening?.close();
      await running.stop();
    } finally {
      await database.close();
    }
  });
}

/**
 * The SMTP listener for reports, when BOUNCE_DOMAIN is set: each message is stored before its 250, then this
 * process's inbound worker (`notifier`) or another process's (NOTIFY on PostgreSQL, else its poll) reads it.
 */
async function startInbound(
  config: Config,
  deps: { database: DatabaseHandle; clock: Clock; logger: WorkerLogger; notifier: Notifier | undefined },
): Promise<InboundListener | undefined> {
  if (!config.bounceDomain) return undefined;
  const { db, engine } = deps.database;
  const repo = createInboundRepo(db, engine);
  const domains = createDomainRepo(db, engine);
  const bounceDomain = config.bounceDomain;
  try {
    return await startInboundListener({
      ...config.inbound,
      bounceDomain,
      acceptsDomain: (domain) => domain === bounceDomain || domains.isReturnPathDomain(domain),
      hostname: config.mailHostname,
      clock: deps.clock,
      logger: deps.logger,
      async store(message) {
        const id = await repo.store(message);
        await notifyOtherProcesses(db, engine, QUEUE_CHANNELS.inbound);
        deps.notifier?.notify();
        return id;
      },
    });
  } catch (error) {
    const { host, port } = config.inbound;
    throw new Error(
      `the inbound SMTP listener for bounce reports could not listen on ${host}:${port} (${describeError(error)}); ` +
        'set INBOUND_SMTP_PORT, or start this process with --no-inbound when another one listens',
      { cause: error },
    );
  }
}

interface ShutdownLogger {
  info(object: object | string, message?: string): void;
  warn(object: object | string, message?: string): void;
  error(object: object | string, message?: string): void;
}

function exitOnSignals(log: ShutdownLogger, graceMs: number, close: () => Promise<void>): void {
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, `Received ${signal} again; exiting without waiting`);
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, `Received ${signal}; finishing work in flight, then exiting`);
    setTimeout(() => {
      log.error(`Work in flight did not finish within ${graceMs} ms; exiting`);
      process.exit(1);
    }, graceMs).unref();
    close().then(
      () => {
        log.info('Stopped');
        // Exit explicitly: nothing is left to wait for, and a stray handle must not keep a stopped process alive.
        process.exit(0);
      },
      (error: unknown) => {
        log.error({ err: error }, 'Shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

/**
 * Fails the start when the key cannot open a stored webhook secret: a lost or replaced key file would
 * otherwise surface only later, as webhook deliveries that cannot be signed.
 */
async function checkEncryptionKey(
  db: Kysely<Database>,
  secretBox: SecretBox,
  encryption: EncryptionKey,
): Promise<void> {
  const row = await db
    .selectFrom('webhooks')
    .select('secret_sealed')
    .where('secret_sealed', 'is not', null)
    .limit(1)
    .executeTakeFirst();
  // Sending domains' DKIM keys are sealed with the same key: a wrong key would only show as unsigned mail.
  const domain = await db.selectFrom('domains').select('dkim_private_key_sealed').limit(1).executeTakeFirst();
  const sealed = row?.secret_sealed ?? domain?.dkim_private_key_sealed;
  if (!sealed) return;
  try {
    secretBox.open(sealed);
  } catch {
    const source =
      encryption.source === 'config' ? 'POSTWIRE_ENCRYPTION_KEY' : `the key file ${encryption.file}`;
    throw new Error(
      `The encryption key (${source}) cannot open the secrets stored in the database (webhook secrets, domain keys): it is not ` +
        'the key they were sealed with. Start with the original key.',
    );
  }
}

function listeningUrl(app: FastifyInstance, host: string): string {
  const address = app.server.address();
  const port = address && typeof address === 'object' ? address.port : 0;
  // A wildcard address is not something to type into a browser.
  const shown = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
  return `http://${shown}:${port}`;
}

/** The first start's API key, in a box that stands out from the log lines around it. */
export function formatKeyBox(key: string, projectId: string): string {
  const lines = [
    `Your API key (shown once): ${key}`,
    '',
    'Store it now: it is not shown again, and only its hash is kept.',
    `It belongs to the default project ${projectId}.`,
    `More keys: postwire keys create --project ${projectId}`,
  ];
  const width = Math.max(...lines.map((line) => line.length));
  const rule = '─'.repeat(width + 2);
  return ['', `┌${rule}┐`, ...lines.map((line) => `│ ${line.padEnd(width)} │`), `└${rule}┘`, '', ''].join(
    '\n',
  );
}

/** One line about an error for an operator; connection errors can have an empty message and only a code. */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const inner = error instanceof AggregateError ? error.errors.find((e) => e instanceof Error) : undefined;
  const message = error.message || (inner instanceof Error ? inner.message : '');
  const code = (error as NodeJS.ErrnoException).code;
  if (!message) return code ?? error.name;
  return code && !message.includes(code) ? `${message} (${code})` : message;
}
