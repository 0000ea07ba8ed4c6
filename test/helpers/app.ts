import type { RenderPoolOptions } from '../../src/modules/templates/render-pool.ts';
import {
  type Config,
  DEFAULTS,
  defaultConfig,
  type EngagementDefaults,
  type HttpTimeouts,
} from '../../src/config.ts';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { type AppOptions, buildApp } from '../../src/app.ts';
import {
  type DatabaseHandle,
  type DatabaseOptions,
  type Engine,
  openDatabase,
} from '../../src/db/connection.ts';
import { migrateToLatest } from '../../src/db/migrate.ts';
import { type Clock, systemClock } from '../../src/lib/clock.ts';
import { createSecretBox } from '../../src/lib/crypto.ts';
import type { Resolver } from '../../src/lib/network-policy.ts';
import {
  createDeliveryWorker,
  type DeliverySettings,
  type DeliveryWorker,
} from '../../src/modules/deliveries/deliveries.worker.ts';
import { createNotifier, type Notifier } from '../../src/queue/notifier.ts';
import type { EventService } from '../../src/modules/events/events.service.ts';
import { createProjectRepo } from '../../src/modules/projects/projects.repo.ts';
import { createProjectService } from '../../src/modules/projects/projects.service.ts';
import type { Dns } from '../../src/lib/dns.ts';
import type { DomainSettings } from '../../src/modules/domains/domains.service.ts';
import type { SendingSettings } from '../../src/modules/sending/sending.worker.ts';
import { createServices, type Infra, type Services } from '../../src/services.ts';
import { installContractCheck } from './contract.ts';
import {
  createPostgresTestDatabase,
  databaseUrl,
  dropTestDatabase,
  inSchema,
  TEST_SCHEMA,
} from './postgres-databases.ts';

/** The engines every suite is written for: each case that runs on both is declared on both. */
export const ALL_ENGINES: Engine[] = ['sqlite', 'postgres'];

/** The engines that can run here: SQLite always, PostgreSQL when TEST_DATABASE_URL is set. */
export const ENGINES: Engine[] = process.env.TEST_DATABASE_URL ? ALL_ENGINES : ['sqlite'];

/** Why a case that needs PostgreSQL is skipped (shown by node:test beside the case). */
export const NO_POSTGRES = 'no PostgreSQL: set TEST_DATABASE_URL to run it (README, The two commands)';

/**
 * node:test's `skip` for a case on `engine`: false where the engine can run, else why not. A PostgreSQL case
 * without a database shows as skipped with the reason, never vanishes from the output.
 */
export function engineSkip(engine: Engine): string | false {
  return ENGINES.includes(engine) ? false : NO_POSTGRES;
}

export interface TestDatabase {
  handle: DatabaseHandle;
  /** Connection settings for a child process (the CLI, main) to open the same database. */
  env: Record<string, string>;
  /** PostgreSQL: the test's database, for another schema in it (`besideOf`). */
  postgresUrl?: string;
  drop(): Promise<void>;
}

let sqliteTemplate: Promise<string> | undefined;

/**
 * A SQLite file migrated once in this test file's process, which each test's database is a copy of: the
 * migrations took 0.6–0.9 s a test on a loaded machine (most of it waiting for the disk), the copy a few ms.
 */
function migratedSqliteTemplate(): Promise<string> {
  sqliteTemplate ??= (async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'postwire-template-'));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'postwire.db');
    const handle = await openDatabase({ sqlitePath: file });
    try {
      await migrateToLatest(handle.db);
    } finally {
      // Closed, so its write-ahead log is folded into the file and the file alone is the database.
      await handle.close();
    }
    return file;
  })();
  return sqliteTemplate;
}

/**
 * A fresh, migrated database of its own: a temporary SQLite file, or a new PostgreSQL database (a copy of the
 * run's migrated template, postgres-databases.ts). With `besideOf`, a schema of its own in that test database
 * instead, as another deployment sharing a PostgreSQL database has.
 */
export async function createTestDatabase(
  engine: Engine,
  options: Pick<
    DatabaseOptions,
    'observe' | 'stampLeaseMs' | 'stampClock' | 'transactionWarnMs' | 'onLongTransaction'
  > & {
    /** Migrated only up to (not including) this migration: the schema an earlier version left. */
    migrationsBefore?: string;
    /** Nothing in it, not even the migrations' table: the database a first start finds. */
    unmigrated?: boolean;
    /** PostgreSQL: in another schema of this test database's. */
    besideOf?: TestDatabase;
  } = {},
): Promise<TestDatabase> {
  // Long transactions are reported in tests as in development (TRANSACTION_WARN's default there).
  const { migrationsBefore, unmigrated, besideOf, ...given } = options;
  const databaseOptions = { transactionWarnMs: DEFAULTS.transactionWarnMs, ...given };
  // Through a handle of its own, unwatched: the migrations are one long transaction by design.
  const migrated = async (open: (watched: DatabaseOptions) => Promise<DatabaseHandle>) => {
    if (unmigrated) return open(databaseOptions);
    const setup = await open({});
    try {
      await migrateToLatest(setup.db, migrationsBefore === undefined ? {} : { before: migrationsBefore });
    } finally {
      await setup.close();
    }
    return open(databaseOptions);
  };
  if (engine === 'postgres' && besideOf) {
    const url = besideOf.postgresUrl!;
    const schema = `t_${randomBytes(6).toString('hex')}`;
    const handle = await migrated((watched) => openDatabase({ url, schema, poolSize: 5, ...watched }));
    return {
      handle,
      env: { DATABASE_URL: inSchema(url, schema) },
      async drop() {
        await sql.raw(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).execute(handle.db);
        await handle.close();
      },
    };
  }
  if (engine === 'postgres') {
    // The template serves the usual case: migrated to the latest.
    const fromTemplate = !unmigrated && migrationsBefore === undefined;
    const name = await createPostgresTestDatabase({ empty: !fromTemplate });
    const url = databaseUrl(name);
    const open = (watched: DatabaseOptions) =>
      openDatabase({ url, schema: TEST_SCHEMA, poolSize: 5, ...watched });
    const handle = fromTemplate ? await open(databaseOptions) : await migrated(open);
    return {
      handle,
      env: { DATABASE_URL: inSchema(url, TEST_SCHEMA) },
      postgresUrl: url,
      async drop() {
        await handle.close();
        await dropTestDatabase(name);
      },
    };
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'postwire-test-'));
  const sqlitePath = path.join(dir, 'postwire.db');
  const fromTemplate = !unmigrated && migrationsBefore === undefined;
  if (fromTemplate) copyFileSync(await migratedSqliteTemplate(), sqlitePath);
  const open = (watched: DatabaseOptions) => openDatabase({ sqlitePath, ...watched });
  const handle = fromTemplate ? await open(databaseOptions) : await migrated(open);
  return {
    handle,
    env: { POSTWIRE_DATA_DIR: dir },
    async drop() {
      await handle.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface ApiResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

export interface RequestOptions {
  body?: unknown;
  /** A raw body sent as is (for malformed JSON and wrong content types). */
  rawBody?: string | Uint8Array;
  /** The API key to send; `null` sends none. Defaults to the app's first project's key. */
  key?: string | null;
  headers?: Record<string, string>;
}

export interface TestApp {
  app: FastifyInstance;
  baseUrl: string;
  engine: Engine;
  database: TestDatabase;
  projectId: string;
  key: string;
  request<T = any>(method: string, path: string, options?: RequestOptions): Promise<ApiResponse<T>>;
  /** A second project with its own key, for isolation tests. */
  createProject(name?: string): Promise<{ projectId: string; key: string }>;
  /** Emits events as the rest of the code does (the app's event service). */
  events: EventService;
  /** The services the app is built on (to start the process's real workers on them, say). */
  services: Services;
  /** Wakes delivery workers in this process; workers from startWorker() listen to it. */
  notifier: Notifier;
  /** The delivery worker started with the `worker` option, if any. */
  worker: DeliveryWorker | undefined;
  /** Starts another delivery worker on this app's database (stopped by close()). */
  startWorker(options?: TestWorkerOptions): Promise<DeliveryWorker>;
  /** Row counts of every table, to show that a refused request stored nothing. */
  rowCounts(): Promise<Record<string, number>>;
  close(): Promise<void>;
}

export const TEST_ENCRYPTION_KEY = Buffer.alloc(32, 7);

export interface TestAppOptions {
  /** Told every statement the app's database runs (test/statements.test.ts counts them). */
  observe?: DatabaseOptions['observe'];
  /** Told of a transaction open longer than `transactionWarnMs` (a process warning when absent). */
  onLongTransaction?: DatabaseOptions['onLongTransaction'];
  transactionWarnMs?: number;
  /** PostgreSQL: the stamps' lease and the monotonic clock it runs on (read-caches.test.ts moves it). */
  stampLeaseMs?: number;
  stampClock?: () => number;
  allowPrivateUrls?: boolean;
  clock?: Clock;
  resolver?: Resolver;
  rateLimit?: { limit: number; windowMs: number };
  /** Recipients a project may send to per day (the app's default when absent). */
  sendDailyLimit?: number;
  /** Concurrent sends written together (the app's default when absent); false: each on its own. */
  sendGroups?: Config['sendGroups'];
  /** Start a delivery worker with fast settings (TEST_DELIVERY_SETTINGS plus these). */
  worker?: TestWorkerOptions | boolean;
  /** How long a webhook test send waits beyond the worker's timeout for the first attempt (default 500 ms). */
  webhookTestMarginMs?: number;
  /** How long a replaced webhook secret keeps signing (the app's default, 24 h, when absent). */
  webhookSecretRotationWindowMs?: number;
  httpTimeouts?: HttpTimeouts;
  /** Bytes of request bodies held at once (the app's default when absent). */
  httpBodyMemoryBytes?: number;
  authFailureLimit?: { limit: number; windowMs: number };
  templateRendering?: RenderPoolOptions;
  /** Where sending domains are looked up (a test DNS server); the system's resolvers when absent. */
  dns?: Dns;
  /** Sending-domain settings (SENDER_DOMAINS, return path, …); the app's defaults when absent. */
  domains?: Partial<DomainSettings>;
  /** PUBLIC_URL, TRACK_* / LIST_UNSUBSCRIBE defaults and the public routes' per-address limit. */
  publicUrl?: string;
  engagementDefaults?: EngagementDefaults;
  publicRateLimit?: { limit: number; windowMs: number };
  /** The app's logger (off when absent); the dashboard test reads every line to look for API keys. */
  logger?: AppOptions['logger'];
  /** Any other setting; applied last. */
  config?: Partial<Config>;
}

/**
 * The configuration a test app runs with: the defaults, with the limits that would trip suites probing many
 * routes off (rate limit, failed authentications), and test domain names looked up in DNS like any other (the
 * suites' names are `.example` and `.test`, answered by their own DNS), then `overrides`.
 */
export function testConfig(overrides: Partial<Config> = {}): Config {
  const defaults = defaultConfig();
  return {
    ...defaults,
    // The test's server and its client share one event loop: when the loop stalls past the server's
    // keep-alive (a test compiling the whole OpenAPI document held it 7-8 s), the client's next request
    // took the idle connection before the server's timer closed it, and got ECONNRESET. Kept far longer
    // than a stall, the client (which leaves a connection 2 s before the server's hint) always closes first.
    httpTimeouts: { ...defaults.httpTimeouts, keepAliveMs: 60_000 },
    rateLimit: 0,
    authFailureLimit: 0,
    testDomainsWithoutDns: false,
    ...overrides,
  };
}

/** The services on a test database, with the test encryption key and no DNS for webhook hosts. */
export function createTestServices(
  database: DatabaseHandle,
  config: Partial<Config> = {},
  infra: Partial<Infra> = {},
): Services {
  return createServices(database, testConfig(config), {
    clock: systemClock,
    secretBox: createSecretBox(TEST_ENCRYPTION_KEY),
    resolver: async () => [],
    ...infra,
  });
}

/** The settings SETTINGS-style test options name, as the configuration holds them. */
function domainConfig(settings: Partial<DomainSettings>): Partial<Config> {
  return {
    ...(settings.senderDomains ? { senderDomains: settings.senderDomains } : {}),
    ...(settings.recheckMs !== undefined ? { domainRecheckMs: settings.recheckMs } : {}),
    ...(settings.fallbackDkim ? { dkim: settings.fallbackDkim } : {}),
    ...(settings.bounceDomain ? { bounceDomain: settings.bounceDomain } : {}),
    ...(settings.testNamesWithoutDns !== undefined
      ? { testDomainsWithoutDns: settings.testNamesWithoutDns }
      : {}),
    ...(settings.returnPath
      ? { inboundMxHost: settings.returnPath.mxHost, sendingSpf: settings.returnPath.spf }
      : {}),
  };
}

export interface TestWorkerOptions extends Partial<DeliverySettings> {
  /** Defaults to the app's allowPrivateUrls. */
  allowPrivateUrls?: boolean;
  /** Connect-time resolution; defaults to the app's resolver, then to "127.0.0.1" for every name. */
  resolver?: Resolver;
  clock?: Clock;
  random?: () => number;
  /** Default: the app's notifier; pass `null` to act as a worker in another process. */
  notifier?: Notifier | null;
}

/** Fast delivery settings for tests: three attempts within ~150 ms, half-second timeout, no jitter. */
export const TEST_DELIVERY_SETTINGS: DeliverySettings = {
  timeoutMs: 500,
  schedule: [0, 50, 100],
  jitter: 0,
  concurrency: 64,
  concurrencyPerEndpoint: 4,
  disableAfterMs: 5 * 86_400_000,
  pollIntervalMs: 200,
  stopGraceMs: 1000,
};

/** Fast sending settings for tests: a retry 100 ms after the first attempt, no jitter, a quick poll. */
export const TEST_SENDING_SETTINGS: SendingSettings = {
  schedule: [0, 100],
  jitter: 0,
  concurrency: 4,
  concurrencyPerHost: 4,
  timeoutMs: 3000,
  pollIntervalMs: 50,
  stopGraceMs: 1000,
};

/** Builds the real app on its own database and listens on a real port on 127.0.0.1. */
export async function startTestApp(engine: Engine, options: TestAppOptions = {}): Promise<TestApp> {
  const database = await createTestDatabase(engine, {
    ...(options.observe ? { observe: options.observe } : {}),
    ...(options.onLongTransaction ? { onLongTransaction: options.onLongTransaction } : {}),
    ...(options.transactionWarnMs !== undefined ? { transactionWarnMs: options.transactionWarnMs } : {}),
    ...(options.stampLeaseMs !== undefined ? { stampLeaseMs: options.stampLeaseMs } : {}),
    ...(options.stampClock ? { stampClock: options.stampClock } : {}),
  });
  const clock = options.clock ?? systemClock;
  const notifier = createNotifier();
  const secretBox = createSecretBox(TEST_ENCRYPTION_KEY);
  const allowPrivateUrls = options.allowPrivateUrls ?? false;
  const config = testConfig({
    allowPrivateUrls,
    ...(options.rateLimit
      ? { rateLimit: options.rateLimit.limit, rateLimitWindowMs: options.rateLimit.windowMs }
      : {}),
    ...(options.authFailureLimit
      ? {
          authFailureLimit: options.authFailureLimit.limit,
          authFailureWindowMs: options.authFailureLimit.windowMs,
        }
      : {}),
    ...(options.sendDailyLimit !== undefined ? { sendDailyLimit: options.sendDailyLimit } : {}),
    ...(options.sendGroups !== undefined ? { sendGroups: options.sendGroups } : {}),
    webhookTimeoutMs:
      (typeof options.worker === 'object' ? options.worker.timeoutMs : undefined) ??
      TEST_DELIVERY_SETTINGS.timeoutMs,
    webhookTestMarginMs: options.webhookTestMarginMs ?? 500,
    ...(options.httpTimeouts ? { httpTimeouts: options.httpTimeouts } : {}),
    ...(options.httpBodyMemoryBytes !== undefined
      ? { httpBodyMemoryBytes: options.httpBodyMemoryBytes }
      : {}),
    ...(options.templateRendering ? { templateRendering: options.templateRendering } : {}),
    ...(options.domains ? domainConfig(options.domains) : {}),
    ...(options.publicUrl !== undefined ? { publicUrl: options.publicUrl } : {}),
    ...(options.engagementDefaults ? { engagement: options.engagementDefaults } : {}),
    ...(options.publicRateLimit
      ? {
          publicRateLimit: options.publicRateLimit.limit,
          publicRateLimitWindowMs: options.publicRateLimit.windowMs,
        }
      : {}),
    ...(options.webhookSecretRotationWindowMs !== undefined
      ? { webhookSecretRotationWindowMs: options.webhookSecretRotationWindowMs }
      : {}),
    ...options.config,
  });
  const services = createServices(database.handle, config, {
    clock,
    secretBox,
    resolver: options.resolver ?? (async () => []),
    dns: options.dns,
    notifiers: { delivery: notifier },
  });
  const app = await buildApp(services, options.logger ? { logger: options.logger } : {});
  const contract = installContractCheck(app);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  const baseUrl = `http://127.0.0.1:${address.port}`;

  const projects = createProjectService({
    db: database.handle.db,
    repo: createProjectRepo(database.handle.db),
    clock,
  });
  const createProject = async (name = 'Test project') => {
    const project = await projects.createProject(name);
    const { plaintext } = await projects.createKey(project.id, { name: 'test' });
    return { projectId: project.id, key: plaintext };
  };
  const first = await createProject('First project');

  const workers: DeliveryWorker[] = [];
  const startWorker = async (workerOptions: TestWorkerOptions = {}): Promise<DeliveryWorker> => {
    const {
      allowPrivateUrls: workerAllowsPrivateUrls,
      resolver,
      clock: workerClock,
      random,
      notifier: workerNotifier,
      ...settings
    } = workerOptions;
    const worker = createDeliveryWorker({
      database: database.handle,
      webhooks: services.repositories.webhooks,
      clock: workerClock ?? clock,
      secretBox,
      resolver: resolver ?? options.resolver ?? (async () => ['127.0.0.1']),
      allowPrivateUrls: workerAllowsPrivateUrls ?? allowPrivateUrls,
      settings: { ...TEST_DELIVERY_SETTINGS, ...settings },
      notifier: workerNotifier === null ? undefined : (workerNotifier ?? notifier),
      ...(random ? { random } : {}),
    });
    workers.push(worker);
    await worker.start();
    return worker;
  };
  const worker = options.worker
    ? await startWorker(options.worker === true ? {} : options.worker)
    : undefined;

  async function request<T>(
    method: string,
    urlPath: string,
    opts: RequestOptions = {},
  ): Promise<ApiResponse<T>> {
    const headers: Record<string, string> = { ...opts.headers };
    const key = opts.key === undefined ? first.key : opts.key;
    if (key !== null) headers.authorization = `Bearer ${key}`;
    let body: string | Uint8Array | undefined;
    if (opts.rawBody !== undefined) body = opts.rawBody;
    else if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
    }
    const response = await fetch(`${baseUrl}${urlPath}`, {
      method,
      headers,
      body: body as BodyInit | undefined,
      redirect: 'manual',
    });
    const text = await response.text();
    let parsed: unknown = text;
    if (response.headers.get('content-type')?.includes('application/json') && text) parsed = JSON.parse(text);
    return { status: response.status, headers: response.headers, body: parsed as T };
  }

  return {
    app,
    baseUrl,
    engine,
    database,
    projectId: first.projectId,
    key: first.key,
    request,
    createProject,
    events: app.events,
    services,
    notifier,
    worker,
    startWorker,
    async rowCounts() {
      const tables = [
        'projects',
        'api_keys',
        'webhooks',
        'templates',
        'template_versions',
        'emails',
        'email_recipients',
        'email_raw',
        'send_quota',
        'events',
        'deliveries',
        'delivery_attempts',
      ] as const;
      const counts: Record<string, number> = {};
      for (const table of tables) {
        const row = await database.handle.db
          .selectFrom(table)
          .select((eb) => eb.fn.countAll<number | string>().as('count'))
          .executeTakeFirstOrThrow();
        counts[table] = Number(row.count);
      }
      return counts;
    },
    async close() {
      await Promise.all(workers.map((running) => running.stop()));
      await app.close();
      await services.close();
      await database.drop();
      contract.assertNoViolations();
    },
  };
}

/**
 * Another connection to a test app's database, for checks of what is committed (a transaction holds the
 * app's own connection until its commit). Close it before the app.
 */
export async function openOtherConnection(api: TestApp): Promise<
  DatabaseHandle & {
    emailStored(id: string): Promise<boolean>;
  }
> {
  const other = await openDatabase(
    api.engine === 'postgres'
      ? { url: api.database.env.DATABASE_URL! }
      : { sqlitePath: path.join(api.database.env.POSTWIRE_DATA_DIR!, 'postwire.db') },
  );
  return Object.assign(other, {
    async emailStored(id: string) {
      return (
        (await other.db.selectFrom('emails').select('id').where('id', '=', id).executeTakeFirst()) !==
        undefined
      );
    },
  });
}

/**
 * Counts the requests the app's server receives from now on: `first` resolves at the first, `all` at the
 * `count`-th (the signal that every request of a burst is in). `stop()` stops counting.
 */
export function countArrivals(api: TestApp, count: number) {
  let arrived = 0;
  let firstArrived!: () => void;
  let allArrived!: () => void;
  const first = new Promise<void>((resolve) => (firstArrived = resolve));
  const all = new Promise<void>((resolve) => (allArrived = resolve));
  const onRequest = () => {
    arrived += 1;
    if (arrived === 1) firstArrived();
    if (arrived === count) allArrived();
  };
  api.app.server.on('request', onRequest);
  return { first, all, stop: () => void api.app.server.off('request', onRequest) };
}
