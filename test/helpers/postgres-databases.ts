import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { openDatabase } from '../../src/db/connection.ts';
import { migrateToLatest } from '../../src/db/migrate.ts';

// Each PostgreSQL test gets a database of its own, copied from one migrated template (CREATE DATABASE …
// TEMPLATE): running every migration for each test took most of a test's setup (about 2 s on a loaded
// machine, the copy about 0.6 s). The migrations still run once a run, on the template, so a migration
// that fails fails the suite.

/** The schema Postwire's tables are in, in the template and so in every copy of it. */
export const TEST_SCHEMA = 'postwire_test';

const MIGRATIONS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src/db/migrations');
// Not `pw_`: that is an API key's prefix, and a start logs its database's name (main.test.ts looks for keys there).
const TEMPLATE_PREFIX = 'postwire_template_';
const TEST_PREFIX = 'postwire_test_';
/** The advisory lock the test files running at once take to make the run's template once. */
const TEMPLATE_LOCK = 0x70777470;

/** `TEST_DATABASE_URL` with another database in it. */
export function databaseUrl(name: string): string {
  const url = new URL(process.env.TEST_DATABASE_URL!);
  url.pathname = `/${name}`;
  return url.toString();
}

/** `url` with its connections' tables in `schema` (for a child process's DATABASE_URL). */
export function inSchema(url: string, schema: string): string {
  const separator = url.includes('?') ? '&' : '?';
  return `${url}${separator}options=${encodeURIComponent(`-c search_path=${schema}`)}`;
}

let adminPool: pg.Pool | undefined;
/** Connections to TEST_DATABASE_URL's own database, for creating and dropping the others. */
const admin = () =>
  (adminPool ??= new pg.Pool({
    connectionString: process.env.TEST_DATABASE_URL!,
    max: 2,
    allowExitOnIdle: true,
  }));

/**
 * The template's name: the test run (the runner's process, which every test file of a run is a child of)
 * and the migrations' text, so a run migrates once and a changed migration is never served stale.
 */
function templateName(): string {
  const hash = createHash('sha256');
  for (const file of readdirSync(MIGRATIONS_DIR).sort()) {
    hash.update(file).update(readFileSync(path.join(MIGRATIONS_DIR, file)));
  }
  return `${TEMPLATE_PREFIX}${process.ppid}_${hash.digest('hex').slice(0, 12)}`;
}

/** Whether the process with this id is still running (the run a template was made for). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

let template: Promise<string> | undefined;

/**
 * The run's migrated template database, made by whichever test file asks first while the others wait on the
 * lock; it is built under another name and renamed when complete, so no one copies half a migration. The
 * templates of runs that have ended are dropped then.
 */
function migratedTemplate(): Promise<string> {
  template ??= (async () => {
    const name = templateName();
    const client = await admin().connect();
    try {
      await client.query('select pg_advisory_lock($1)', [TEMPLATE_LOCK]);
      try {
        const found = await client.query(
          'select datname from pg_database where datname like $1 or datname like $2',
          [`${TEMPLATE_PREFIX}%`, `${TEST_PREFIX}%`],
        );
        const names = found.rows.map((row: { datname: string }) => row.datname);
        if (names.includes(name)) return name;
        // What runs that ended left: their templates, and the databases of tests they were killed in.
        for (const other of names) {
          const pid = Number(/^postwire_(?:template|test)_(\d+)_/.exec(other)?.[1]);
          if (!running(pid)) await client.query(`drop database if exists ${other} with (force)`);
        }
        const building = `${name}_building`;
        await client.query(`drop database if exists ${building} with (force)`);
        await client.query(`create database ${building}`);
        const handle = await openDatabase({ url: databaseUrl(building), schema: TEST_SCHEMA });
        try {
          await migrateToLatest(handle.db);
        } finally {
          await handle.close();
        }
        await client.query(`alter database ${building} rename to ${name}`);
        return name;
      } finally {
        await client.query('select pg_advisory_unlock($1)', [TEMPLATE_LOCK]);
      }
    } finally {
      client.release();
    }
  })();
  return template;
}

/**
 * A new database of the test's own: a copy of the migrated template, or with `empty` a database with
 * nothing in it (for a test that migrates it itself). Its name, for `dropTestDatabase`.
 */
export async function createPostgresTestDatabase(options: { empty?: boolean } = {}): Promise<string> {
  const name = `${TEST_PREFIX}${process.ppid}_${randomBytes(6).toString('hex')}`;
  const from = options.empty ? '' : ` template ${await migratedTemplate()}`;
  await admin().query(`create database ${name}${from}`);
  return name;
}

/** Drops a test's database, ending whatever connections to it are left (a killed child's, say). */
export async function dropTestDatabase(name: string): Promise<void> {
  await admin().query(`drop database if exists ${name} with (force)`);
}
