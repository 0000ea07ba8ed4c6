import { createSmtpBodyMemory, type SmtpBodyMemory } from './lib/smtp-data.ts';
import type { ByteChunks } from './lib/byte-chunks.ts';
import { rmSync } from 'node:fs';
import { createServer as createNetServer } from 'node:net';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import type { Config } from './config.ts';
import { type DatabaseHandle, openDatabase } from './db/connection.ts';
import { migrateToLatest } from './db/migrate.ts';
import type { Database } from './db/schema.ts';
import { type Clock, systemClock } from './lib/clock.ts';
import { createSecretBox, type SecretBox } from './lib/crypto.ts';
import {
  createEncryptionKeyFile,
  type EncryptionKey,
  encryptionKeyFile,
  readEncryptionKey,
} from './lib/encryption-key.ts';
import { createEncryptionCanaryRepo } from './db/encryption-canary.repo.ts';
import { type Resolver, systemResolver } from './lib/network-policy.ts';
import type { ProjectService } from './modules/projects/projects.service.ts';
import { type RunningWorkers, startWorkers } from './workers.ts';
import type { WorkerLogger } from './lib/worker-logger.ts';
import { notifyOtherProcesses, QUEUE_CHANNELS } from './queue/notifier.ts';
import { createServices, type Services } from './services.ts';
import { createInboundRepo, type SpamVerdict } from './modules/inbound/inbound.repo.ts';
import { createSpamChecker } from './modules/inbound/spam.ts';
import {
  type SubmissionListener,
  startSubmissionListener,
} from './modules/submission/submission.listener.ts';
import { createRateLimiter } from './http/rate-limit.ts';
import {
  type InboundListener,
  type RecipientDecision,
  startInboundListener,
} from './modules/inbound/inbound.listener.ts';
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
    backgroundCheckpoints: true,
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

export interface BootOptions extends ServerOptions {
  /** `serve` answers HTTP (and makes sure the default project and key exist); `worker` only works the queues. */
  /** `submission`: only the SMTP submission server (`postwire submission`). */
  kind: 'serve' | 'worker' | 'submission';
  /** Runs until SIGTERM or SIGINT, then drains for at most `graceMs` (the commands); tests close it themselves. */
  exitOnSignals?: { graceMs: number };
}

export interface RunningProcess {
  /** The HTTP API, in a `serve` process; a worker's probes and metrics, with WORKER_HTTP_PORT. */
  app: FastifyInstance | undefined;
  /** The address it answers HTTP on (the API, or a worker's probes), e.g. `http://127.0.0.1:3000`. */
  url: string | undefined;
  /** The port of the SMTP listener, when it runs (BOUNCE_DOMAIN or INBOUND_MX_HOST set, not --no-inbound). */
  inboundPort: number | undefined;
  /** The SMTP submission ports, when configured (`serve`). */
  submission: { port: number | undefined; tlsPort: number | undefined } | undefined;
  log: ShutdownLogger;
  /** Stops taking connections, lets work in flight finish, then closes the database. Idempotent. */
  close(): Promise<void>;
}

export interface RunningServer extends RunningProcess {
  app: FastifyInstance;
  url: string;
}

/**
 * Everything a process does before it works, whatever its kind: take its HTTP port (serve), open and migrate the
 * database, load and check the encryption key, build the services once, then start what the process runs: the
 * background workers, the SMTP listener for reports, the default project and key, and the HTTP API last, in
 * that order. The API takes its port only once everything it serves can be served: a probe or a client that
 * reaches it (a load balancer sends traffic the moment /readyz answers 200) finds the bootstrap key stored,
 * and once the log says it listens, the whole process is up.
 */
export async function boot(config: Config, options: BootOptions): Promise<RunningProcess> {
  const clock = options.clock ?? systemClock;
  const http = options.kind === 'serve';
  // A worker answers HTTP only for its probes and metrics, and only when given a port for them.
  const probesOnly = options.kind === 'worker' && config.workerHttpPort !== undefined;
  // First of all: a port in use must fail the start before it writes anything (a database file, a key file,
  // the first start's API key, printed for nobody to use).
  const reservedPort = http
    ? await reservePort(config.host, config.port, 'PORT')
    : probesOnly
      ? await reservePort(config.host, config.workerHttpPort!, 'WORKER_HTTP_PORT')
      : undefined;
  const database = await openConfiguredDatabase(config).catch(async (error: unknown) => {
    await reservedPort?.release();
    throw error;
  });
  let services: Services | undefined;
  let app: FastifyInstance | undefined;
  let workers: RunningWorkers | undefined;
  let inbound: InboundListener | undefined;
  let submission: SubmissionListener | undefined;
  // Stopped in reverse order of start: the API (nothing new arrives), the listener, the workers (attempts in
  // flight record their results), and the database last.
  const stopAll = async () => {
    try {
      await reservedPort?.release();
      await app?.close();
      await submission?.close();
      await inbound?.close();
      await workers?.stop();
      await services?.close();
    } finally {
      await database.close();
    }
  };
  try {
    const applied = await migrateToLatest(database.db);
    const encryption = await loadCheckedEncryptionKey(database.db, config, clock);
    const secretBox = createSecretBox(encryption.key);
    services = createServices(database, config, {
      clock,
      secretBox,
      resolver: options.resolver ?? systemResolver,
    });
    if (http) {
      // Loaded here rather than at the top: the CLI's database commands use this module's helpers and should
      // not pay for loading the HTTP stack (a third of a second per command).
      const { buildApp } = await import('./app.ts');
      app = await buildApp(services, { logger: loggerOptions(config) });
    } else if (probesOnly) {
      const { buildProbeApp } = await import('./app.ts');
      app = await buildProbeApp(services, { logger: loggerOptions(config) });
    }
    const log = app?.log ?? pino(loggerOptions(config));
    logStart(log, config, database, applied, encryption);

    // While draining, every response closes its connection: a keep-alive client would otherwise hold an
    // idle socket open, and with it the shutdown, until its own idle timeout.
    let draining = false;
    // Synchronous: every response passes here, and an async hook costs each one a promise.
    app?.addHook('onSend', (_request, reply, payload, done) => {
      if (draining) reply.header('connection', 'close');
      done(null, payload);
    });

    if (options.worker) workers = await startWorkers(services, log);
    // One bound on the message bytes both SMTP listeners hold at once (SMTP_BODY_MEMORY_LIMIT).
    const smtpMemory = createSmtpBodyMemory(config.smtpBodyMemoryBytes);
    if (options.inbound !== false) inbound = await startInbound(services, log, smtpMemory);
    if (http || options.kind === 'submission') submission = await startSubmission(services, log, smtpMemory);
    if (options.kind === 'submission' && !submission) {
      throw new Error('postwire submission needs SUBMISSION_PORT or SUBMISSION_TLS_PORT');
    }
    let url: string | undefined;
    let keys: KeyNotice | undefined;
    if (app && reservedPort) {
      url = listeningUrl(config.host, reservedPort.port);
      // Stored before the API takes its port (held since the start): the first request a ready process
      // answers finds the key. Through the logger's own stream unless a test captures it: pretty lines are
      // written by a worker thread and JSON lines asynchronously, so a direct write to stdout would land among
      // (once: before ~60 of) the start's log lines, where the key scrolls away.
      if (http) {
        const stdout = options.stdout ?? loggerStream(log) ?? process.stdout;
        keys = await bootstrapDefaultProject(services.projects, config, url, stdout);
      }
      await listenQuietly(app, reservedPort, config.host);
    }

    let closing: Promise<void> | undefined;
    const close = () =>
      (closing ??= (() => {
        draining = true;
        return stopAll();
      })());
    // Before the line that says the process is up: whoever read it (an operator, a supervisor, a test) may
    // signal at once, and the signal must find the clean shutdown in place, not Node's immediate exit.
    if (options.exitOnSignals) exitOnSignals(log, options.exitOnSignals.graceMs, close);
    if (http) {
      // The last line of a start: where to go next (the dashboard, with the key just above it or where to get one).
      const dashboard = `${url}/dashboard`;
      const next = keys?.created
        ? 'sign in with the API key shown above'
        : `a new API key: postwire keys create --project ${keys?.projectId}`;
      log.info(
        { url, dashboard },
        `Postwire is listening on ${url}: dashboard at ${dashboard} (${next}), API reference at ${url}/docs`,
      );
    } else if (options.kind === 'submission') log.info('Postwire submission started');
    else {
      log.info(
        { database: describeDatabase(config), ...(url ? { url } : {}) },
        url ? `Postwire worker started; its probes and metrics are on ${url}` : 'Postwire worker started',
      );
    }
    return {
      app,
      url,
      inboundPort: inbound?.port,
      submission: submission && { port: submission.port, tlsPort: submission.tlsPort },
      log,
      close,
    };
  } catch (error) {
    await stopAll().catch(() => {});
    throw error;
  }
}

/** A process that answers HTTP: the API, and (unless `worker` is false) the background workers. */
export async function startServer(config: Config, options: ServerOptions): Promise<RunningServer> {
  const running = await boot(config, { ...options, kind: 'serve' });
  return { ...running, app: running.app!, url: running.url! };
}

interface KeyNotice {
  projectId: string;
  /** Whether this start created the default key (and printed it). */
  created: boolean;
}

/**
 * The first start's project and API key (and POSTWIRE_BOOTSTRAP_KEY's), just before the API takes the port it
 * holds already (reservePort): only a start that will listen writes them, and a key printed here is stored, so
 * it works. It is written as it is, never as a log entry, just before the line that says the API listens: so
 * it is among the last lines of the start, and whoever waits for that line has the key.
 */
async function bootstrapDefaultProject(
  projects: ProjectService,
  config: Config,
  url: string,
  stdout: Output,
): Promise<KeyNotice> {
  const { project, createdKey } = await projects.bootstrap(config.bootstrapKey);
  if (createdKey) stdout.write(formatKeyBox(createdKey, project.id, `${url}/dashboard`));
  return { projectId: project.id, created: createdKey !== undefined };
}

/**
 * The stream a pino logger writes to (standard output, or pino-pretty's worker, which passes text that is not
 * a log entry through as it is).
 */
function loggerStream(log: object): Output | undefined {
  const stream = (log as Record<symbol, unknown>)[pino.symbols.streamSym];
  return stream && typeof (stream as Output).write === 'function' ? (stream as Output) : undefined;
}

/** What an operator should hear once the database and the key are ready. */
function logStart(
  log: ShutdownLogger,
  config: Config,
  database: DatabaseHandle,
  applied: string[],
  encryption: EncryptionKey,
): void {
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
  const graceMs = options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
  const running = await boot(config, { ...options, kind: 'serve', exitOnSignals: { graceMs } });
  return { ...running, app: running.app!, url: running.url! };
}

/**
 * A process that only takes SMTP submissions (`postwire submission`): no HTTP, no workers (a `serve` or
 * `worker` process on the same database sends what it stores). SIGTERM closes it.
 */
export async function runSubmission(config: Config): Promise<void> {
  await boot(config, {
    kind: 'submission',
    worker: false,
    inbound: false,
    exitOnSignals: { graceMs: DEFAULT_SHUTDOWN_GRACE_MS },
  });
}

/**
 * A process that only works the queues (`postwire worker`): no HTTP. On PostgreSQL it wakes on NOTIFY; on
 * SQLite it polls. SIGTERM lets attempts in flight finish, gives back its claims and exits 0.
 */
export async function runWorker(
  config: Config,
  options: { clock?: Clock; resolver?: Resolver; inbound?: boolean } = {},
): Promise<void> {
  await boot(config, {
    ...options,
    kind: 'worker',
    worker: true,
    exitOnSignals: { graceMs: DEFAULT_SHUTDOWN_GRACE_MS },
  });
}

/**
 * The SMTP listener, for reports when BOUNCE_DOMAIN is set and for received mail when INBOUND_MX_HOST is: each
 * message is stored before its 250, then this process's inbound worker (the services' inbound notifier) or
 * another process's (NOTIFY on PostgreSQL, else its poll) reads it.
 */
async function startInbound(
  services: Services,
  logger: WorkerLogger,
  memory: SmtpBodyMemory,
): Promise<InboundListener | undefined> {
  const { config, clock } = services;
  const bounceDomain = config.bounceDomain;
  if (!bounceDomain && !config.inboundMxHost) return undefined;
  const { db, engine } = services.database;
  const repo = createInboundRepo(db, engine);
  try {
    return await startInboundListener({
      ...config.inbound,
      takes: [
        bounceDomain ? `reports for ${bounceDomain}` : undefined,
        config.inboundMxHost ? 'mail for inbound routes' : undefined,
      ]
        .filter(Boolean)
        .join(' and '),
      decide: (address) => decideRecipient(services, address),
      scoreSpam: spamScorer(services, logger),
      hostname: config.mailHostname,
      clock,
      logger,
      memory,
      async store(message) {
        const id = await repo.store(message);
        await notifyOtherProcesses(db, engine, QUEUE_CHANNELS.inbound);
        services.notifiers.inbound.notify();
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

/**
 * SpamAssassin's verdict on received mail before its 250 (SPAMD_URL), kept as the API shows it; absent when
 * SPAMD_URL is unset. The checker never rejects: spamd away, a message is taken unscored.
 */
function spamScorer(services: Services, logger: WorkerLogger) {
  const { url, timeoutMs, maxBytes } = services.config.spamd;
  if (url === undefined) return undefined;
  const checker = createSpamChecker({ url, timeoutMs, maxBytes, logger });
  return async (raw: ByteChunks): Promise<SpamVerdict | null> => {
    const verdict = await checker.check(raw);
    return verdict && { score: verdict.score, threshold: verdict.threshold, flagged: verdict.flagged };
  };
}

/** SMTP submission, when a submission port is configured: each message an email, stored before its 250. */
async function startSubmission(
  services: Services,
  logger: WorkerLogger,
  memory: SmtpBodyMemory,
): Promise<SubmissionListener | undefined> {
  const { config } = services;
  const settings = config.submission;
  if (settings.port === undefined && settings.tlsPort === undefined) return undefined;
  const { submission } = services;
  try {
    return await startSubmissionListener({
      ...settings,
      hostname: config.mailHostname,
      authenticate: submission.authenticate,
      stillValid: submission.stillValid,
      withinDailyLimit: submission.withinDailyLimit,
      submit: submission.submit,
      memory,
      failedAuthLimiter: createRateLimiter({
        limit: config.authFailureLimit,
        windowMs: config.authFailureWindowMs,
        now: () => services.clock.now().getTime(),
      }),
      logger,
    });
  } catch (error) {
    throw new Error(
      `the SMTP submission server could not listen on ${settings.host} (${describeError(error)}); ` +
        'set SUBMISSION_PORT and SUBMISSION_TLS_PORT to free ports',
      { cause: error },
    );
  }
}

/** A recipient at RCPT: one of our return paths (a report), an address a route takes, or refused. */
async function decideRecipient(services: Services, address: string): Promise<RecipientDecision> {
  const domain = address.slice(address.lastIndexOf('@') + 1).toLowerCase();
  const bounceDomain = services.config.bounceDomain;
  if (bounceDomain && (domain === bounceDomain || (await services.domains.isReturnPathDomain(domain)))) {
    return { take: 'report' };
  }
  const decision = await services.inboundRoutes.resolve(address);
  if (!decision) return { take: 'refuse' };
  if (!decision.accept) return { take: 'refuse', message: `5.7.1 ${decision.message}` };
  return {
    take: 'route',
    route: {
      address: address.toLowerCase(),
      projectId: decision.projectId,
      routeId: decision.routeId,
      action: decision.action,
      mailboxHash: decision.mailboxHash,
      spamRejectScore: decision.spamRejectScore,
    },
  };
}

interface ShutdownLogger {
  info(object: object | string, message?: string): void;
  warn(object: object | string, message?: string): void;
  error(object: object | string, message?: string): void;
}

/**
 * A second copy of the first signal this soon after it is the same stop: Ctrl-C signals the whole process
 * group, and `npm start` passes its own copy on to the server as well (test/npm-start.test.ts).
 */
const SAME_SIGNAL_MS = 1000;

function exitOnSignals(log: ShutdownLogger, graceMs: number, close: () => Promise<void>): void {
  let first: { signal: NodeJS.Signals; at: number } | undefined;
  const stop = (signal: NodeJS.Signals) => {
    if (first) {
      if (signal === first.signal && performance.now() - first.at < SAME_SIGNAL_MS) return;
      log.warn({ signal }, `Received ${signal} again; exiting without waiting`);
      process.exit(1);
    }
    first = { signal, at: performance.now() };
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

/** What the first process seals into the encryption canary; any value would do, a fixed one reads clearly. */
const CANARY_PLAINTEXT = 'postwire encryption canary';

/**
 * The encryption key, once it is known to be the database's: the database records a value sealed with the key
 * of the first process that starts on it, and every process opens it before it works. A process with another
 * key refuses, and so does one that would generate a key for a database that already holds sealed values:
 * either would seal secrets the other processes cannot open (webhook deliveries that cannot be signed), and
 * its own tracking links and return paths would not be recognised by them.
 */
async function loadCheckedEncryptionKey(
  db: Kysely<Database>,
  config: Config,
  clock: Clock,
): Promise<EncryptionKey> {
  const canaries = createEncryptionCanaryRepo(db);
  const canary = await canaries.read();
  // A database from before the canary may hold sealed secrets already: the key must open those.
  const recorded = canary ?? (await canaries.findOlderSealedValue());
  const configured = readEncryptionKey(config);
  if (!configured && recorded) {
    throw new Error(
      `this database holds values sealed with an encryption key, and this process has none (POSTWIRE_ENCRYPTION_KEY ` +
        `is unset and there is no ${encryptionKeyFile(config)}): set POSTWIRE_ENCRYPTION_KEY to the key the ` +
        'other processes on this database use.',
    );
  }
  const encryption = configured ?? createEncryptionKeyFile(config);
  const secretBox = createSecretBox(encryption.key);
  const refuse = () => {
    // A key file generated just now for a database it cannot open would be found, and refused, at every start.
    if (encryption.created && encryption.file) rmSync(encryption.file, { force: true });
    const source =
      encryption.source === 'config' ? 'POSTWIRE_ENCRYPTION_KEY' : `the key file ${encryption.file}`;
    return new Error(
      `the encryption key (${source}) is not the one this database's secrets were sealed with: set ` +
        "POSTWIRE_ENCRYPTION_KEY to the key the database was first started with (the other processes' key).",
    );
  };
  if (recorded && !opens(secretBox, recorded)) throw refuse();
  if (canary === undefined) {
    await canaries.recordUnlessPresent(secretBox.seal(CANARY_PLAINTEXT), clock.now());
    // Two first starts at once, each with its own key: one canary is recorded, the other process must stop.
    const winner = await canaries.read();
    if (!winner || !opens(secretBox, winner)) throw refuse();
  }
  return encryption;
}

function opens(secretBox: SecretBox, sealed: string): boolean {
  try {
    secretBox.open(sealed);
    return true;
  } catch {
    return false;
  }
}

export interface ReservedPort {
  /** The port taken: the configured one, or the one the system chose for PORT=0. */
  port: number;
  release(): Promise<void>;
}

/** Takes the HTTP port at once, so that a port in use fails the start before anything is written. */
export async function reservePort(host: string, port: number, setting: string): Promise<ReservedPort> {
  // A client that connects meanwhile (a load balancer's probe, a retrying client) is dropped at once: a
  // connection left open would keep close() from finishing, and the start would hang before it listens.
  const server = createNetServer((socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host, exclusive: true }, () => resolve());
  }).catch((error: unknown) => {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'EADDRINUSE' && code !== 'EACCES') throw error;
    throw new Error(
      `the HTTP port ${host}:${port} ${code === 'EADDRINUSE' ? 'is in use' : 'may not be used by this user'} ` +
        `(${code}): set ${setting} (or HOST) to a free one.`,
      { cause: error },
    );
  });
  const address = server.address();
  let released: Promise<void> | undefined;
  return {
    port: address && typeof address === 'object' ? address.port : port,
    release: () =>
      (released ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
      })),
  };
}

/**
 * The API takes over the reserved port. Fastify logs a line per address it listens on (each interface's for
 * 0.0.0.0); the process says it once, after the first start's key, so Fastify's lines are left out.
 */
async function listenQuietly(app: FastifyInstance, reserved: ReservedPort, host: string): Promise<void> {
  await reserved.release();
  const level = app.log.level;
  if (['trace', 'debug', 'info'].includes(level)) app.log.level = 'warn';
  try {
    await app.listen({ port: reserved.port, host });
  } finally {
    app.log.level = level;
  }
}

function listeningUrl(host: string, port: number): string {
  // A wildcard address is not something to type into a browser.
  const shown = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
  return `http://${shown}:${port}`;
}

/** The first start's API key, in a box that stands out from the log lines around it. */
export function formatKeyBox(key: string, projectId: string, dashboardUrl: string): string {
  const lines = [
    `Your API key (shown once): ${key}`,
    '',
    'Store it now: it is not shown again, and only its hash is kept.',
    `It belongs to the default project ${projectId}.`,
    `More keys: postwire keys create --project ${projectId}`,
    `Dashboard: ${dashboardUrl} (sign in with this key)`,
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
