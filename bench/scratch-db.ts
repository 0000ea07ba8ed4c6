// A database of its own for a bench that writes queue rows by SQL: a fresh SQLite file, or (DATABASE_URL) a
// fresh PostgreSQL schema on one connection, migrated, with the foreign keys off (a row needs no email: the
// statements' own cost is what such a bench measures). remove() closes it and drops what it made.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type Kysely, sql } from 'kysely';
import { openDatabase } from '../src/db/connection.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import type { Database } from '../src/db/schema.ts';
import { type BenchEngine, benchSchemaName } from './shared.ts';

export interface ScratchDatabase {
  engine: BenchEngine;
  db: Kysely<Database>;
  /** SQLite: the file (to open it with node:sqlite as well). */
  file: string | undefined;
  remove(): Promise<void>;
}

export async function openScratchDatabase(prefix: string): Promise<ScratchDatabase> {
  const url = process.env.DATABASE_URL;
  const dir = mkdtempSync(path.join(tmpdir(), `postwire-${prefix}-`));
  const schema = benchSchemaName(prefix);
  const file = url ? undefined : path.join(dir, 'postwire.db');
  const database = await openDatabase(url ? { url, schema, poolSize: 1 } : { sqlitePath: file! });
  await migrateToLatest(database.db);
  if (url) await sql`SET session_replication_role = replica`.execute(database.db);
  else await sql`PRAGMA foreign_keys = OFF`.execute(database.db);
  return {
    engine: url ? 'postgres' : 'sqlite',
    db: database.db,
    file,
    async remove() {
      await database.close();
      if (url) {
        const cleanup = await openDatabase({ url, poolSize: 1 });
        await sql`DROP SCHEMA IF EXISTS ${sql.id(schema)} CASCADE`.execute(cleanup.db);
        await cleanup.close();
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
