// The one start-up of every process kind (`serve`, `worker`, `submission`) and the commands that run one
// until a signal. What boot() calls on the way is in src/boot/: the database, the port, the encryption key's
// check, the SMTP listeners, what the start tells the operator and the signal handling.
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.ts';
import { openConfiguredDatabase } from './boot/database.ts';
import { loadCheckedEncryptionKey } from './boot/encryption-check.ts';
import { startInbound, startSubmission } from './boot/listeners.ts';
import { listenQuietly, listeningUrl, reservePort } from './boot/ports.ts';
import { checkSourceAddresses } from './boot/source-addresses.ts';
import { exitOnSignals, type ShutdownLogger } from './boot/signals.ts';
import {
  bootstrapDefaultProject,
  type KeyNotice,
  logStart,
  logStarted,
  loggerStream,
} from './boot/start-notices.ts';
import { migrateToLatest } from './db/migrate.ts';
import { type Clock, systemClock } from './lib/clock.ts';
import { createSecretBox } from './lib/crypto.ts';
import { loggerOptions } from './lib/logger.ts';
import { type Resolver, systemResolver } from './lib/network-policy.ts';
import type { Output } from './lib/operator-output.ts';
import { createSmtpBodyMemory } from './lib/smtp-data.ts';
import type { InboundListener } from './modules/inbound/inbound.listener.ts';
import type { SubmissionListener } from './modules/submission/submission.listener.ts';
import { createServices, type Services } from './services.ts';
import { type RunningWorkers, startWorkers } from './workers.ts';
import pino from 'pino';

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
  // First of all: a port in use, or a source address this machine does not have (a process that sends mail
  // directly), must fail the start before it writes anything (a database file, a key file, the first start's
  // API key, printed for nobody to use).
  if (options.worker && config.mailTransport === 'direct') {
    await checkSourceAddresses(config.sourceIps, 'DIRECT_SOURCE_IPS');
  }
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
    // PostgreSQL: heard of every cached write from here on, so its stamp reads may vouch for their lease.
    await database.joinStampRegistry?.();
    const encryption = await loadCheckedEncryptionKey(database.db, config, clock);
    const secretBox = createSecretBox(encryption.key);
    services = createServices(database, config, {
      clock,
      secretBox,
      resolver: options.resolver ?? systemResolver,
    });
    if (http) {
      // Loaded here rather than at the top: the CLI loads this module for its process commands, and its other
      // commands should not pay for loading the HTTP stack (a third of a second per command).
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
      // Compiled before the port is taken, unless the operator chose a faster start: a route's first request
      // would otherwise compile its schemas on the event loop while every other request waits.
      if (http && config.compileSchemasAtStart) {
        const { compileDeferredSchemas } = await import('./http/deferred-schemas.ts');
        await compileDeferredSchemas(app);
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
    logStarted(log, config, options.kind, url, keys);
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
