// The real app as the benchmarks run it: a fresh database of its own, every limit that would distort a
// measurement off (rate limit, DNS), listening on 127.0.0.1, with a project and a key to call it with.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/app.ts';
import { type Config, defaultConfig } from '../src/config.ts';
import { type DatabaseHandle, openDatabase } from '../src/db/connection.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { systemClock } from '../src/lib/clock.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createServices, type Infra, type Services } from '../src/services.ts';
import { benchSchemaName } from './shared.ts';

export interface BenchApp {
  app: FastifyInstance;
  database: DatabaseHandle;
  /** Where it listens (`http://127.0.0.1:<port>`). */
  baseUrl: string;
  /** The app's services (and its repositories, for a worker started beside it). */
  services: Services;
  /** The SQLite file, or undefined on PostgreSQL. */
  sqliteFile: string | undefined;
  projectId: string;
  key: string;
  /** Closes the app and the database; the data stays (bench/api.ts reads the same file for bare+sql). */
  close(): Promise<void>;
  /** After close(): removes the data (the file, or the PostgreSQL schema). */
  remove(): Promise<void>;
}

export async function startBenchApp(
  options: {
    databaseUrl?: string | undefined;
    /** Settings that differ from the defaults (and from the bench's own: no rate limit). */
    config?: Partial<Config>;
    infra?: Partial<Infra>;
    /** Names the PostgreSQL schema (`<prefix>_<random>`), so a bench's data is told apart from others'. */
    schemaPrefix?: string;
    /**
     * SQLite: the log checkpointed from a thread of its own, as `postwire serve` opens the database
     * (src/boot/database.ts), instead of by the commit that passes 1,000 pages, on the event loop.
     */
    backgroundCheckpoints?: boolean;
  } = {},
): Promise<BenchApp> {
  const dir = mkdtempSync(path.join(tmpdir(), 'postwire-bench-'));
  const schema = benchSchemaName(options.schemaPrefix);
  const sqliteFile = options.databaseUrl ? undefined : path.join(dir, 'postwire.db');
  const database = await openDatabase(
    options.databaseUrl
      ? {
          url: options.databaseUrl,
          schema,
          poolSize: 20,
          // As `postwire serve` opens it (src/boot/database.ts).
          keepStatistics: true,
          // The handle's lease is the deployment's (src/boot/database.ts passes CACHE_STAMP_LEASE so).
          ...(options.config?.cacheStampLeaseMs !== undefined
            ? { stampLeaseMs: options.config.cacheStampLeaseMs }
            : {}),
        }
      : { sqlitePath: sqliteFile!, backgroundCheckpoints: options.backgroundCheckpoints ?? false },
  );
  await migrateToLatest(database.db);
  // As `postwire serve` does (src/server.ts).
  await database.joinStampRegistry?.();
  const services = createServices(
    database,
    { ...defaultConfig(), rateLimit: 0, ...options.config },
    {
      clock: systemClock,
      secretBox: createSecretBox(randomBytes(32)),
      // Public hostnames are checked against the resolver; an empty answer keeps DNS out of the measurement.
      resolver: async () => [],
      ...options.infra,
    },
  );
  const app = await buildApp(services);
  await app.listen({ port: 0, host: '127.0.0.1' });

  const { projects } = services;
  const project = await projects.createProject('Bench');
  const { plaintext: key } = await projects.createKey(project.id, { name: 'bench' });
  const address = app.server.address();
  const baseUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return {
    app,
    database,
    baseUrl,
    services,
    sqliteFile,
    projectId: project.id,
    key,
    async close() {
      await app.close();
      await services.close();
      if (options.databaseUrl) await database.db.schema.dropSchema(schema).ifExists().cascade().execute();
      await database.close();
    },
    async remove() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
