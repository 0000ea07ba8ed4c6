import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Kysely, PostgresDialect, SqliteDialect, type SqliteDatabase } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.ts';

export type Engine = 'sqlite' | 'postgres';

export interface DatabaseHandle {
  db: Kysely<Database>;
  engine: Engine;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  /** `postgres://…`; when absent, `sqlitePath` is used. */
  url?: string | undefined;
  sqlitePath?: string;
  /** PostgreSQL schema to use (created when missing); tests give each run its own. */
  schema?: string;
  poolSize?: number;
}

export async function openDatabase(options: DatabaseOptions): Promise<DatabaseHandle> {
  if (options.url) return openPostgres(options.url, options.schema, options.poolSize ?? 10);
  if (!options.sqlitePath) throw new Error('openDatabase needs a PostgreSQL url or a SQLite path.');
  return openSqlite(options.sqlitePath);
}

function openSqlite(file: string): DatabaseHandle {
  if (file !== ':memory:') mkdirSync(path.dirname(file), { recursive: true });
  const sqlite = new DatabaseSync(file);
  // WAL lets the CLI and a worker process use the file while the server runs; busy_timeout makes a
  // writer wait for another process's write instead of failing at once.
  sqlite.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA synchronous = NORMAL;');
  sqlite.exec('PRAGMA foreign_keys = ON;');
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: adaptNodeSqlite(sqlite) }) });
  return { db, engine: 'sqlite', close: () => db.destroy() };
}

// Kysely's SqliteDialect speaks the better-sqlite3 interface; node:sqlite differs in three ways: parameters
// are spread rather than passed as an array, booleans cannot be bound, and `reader` is `columns().length > 0`.
function adaptNodeSqlite(sqlite: DatabaseSync): SqliteDatabase {
  const bind = (parameters: ReadonlyArray<unknown>) =>
    parameters.map((value) => (typeof value === 'boolean' ? Number(value) : value)) as never[];
  return {
    close: () => sqlite.close(),
    prepare(sql) {
      const statement = sqlite.prepare(sql);
      return {
        reader: statement.columns().length > 0,
        all: (parameters) => statement.all(...bind(parameters)),
        run: (parameters) => statement.run(...bind(parameters)),
        iterate: (parameters) => statement.iterate(...bind(parameters)),
      };
    },
  };
}

async function openPostgres(
  url: string,
  schema: string | undefined,
  poolSize: number,
): Promise<DatabaseHandle> {
  if (schema !== undefined && !/^[a-z_][a-z0-9_]*$/.test(schema))
    throw new Error(`Bad schema name '${schema}'.`);
  if (schema) {
    const setup = new pg.Client({ connectionString: url });
    await setup.connect();
    try {
      await setup.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    } finally {
      await setup.end();
    }
  }
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    ...(schema ? { options: `-c search_path=${schema}` } : {}),
  });
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return { db, engine: 'postgres', close: () => db.destroy() };
}
