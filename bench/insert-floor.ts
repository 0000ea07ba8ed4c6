// The durable floor under an accepted send (issue 43): bare Fastify + one INSERT per request on the same engine,
// stored before the 202 with the same durability as Postwire's own writes.
//
// - SQLite: a fresh file opened as src/db/engine/sqlite.ts opens Postwire's (WAL, synchronous = NORMAL), one
//   prepared INSERT per request, autocommitted (its own transaction).
// - PostgreSQL: a pool of the same size as the bench's Postwire (20), in a schema of its own, one INSERT per
//   request with its parameters, autocommitted: a real COMMIT per request under the server's
//   synchronous_commit (the same setting Postwire's commits run under, `on` by default: a WAL flush each).
//
// The row is the email as sent: its id, project, sender, recipient, subject, html, text and times (about the
// size of Postwire's `emails` row for the bench's message), with a primary key and one index, as the issue
// defines the floor: "bare Fastify + one INSERT on the same engine".
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import pg from 'pg';
import { newId } from '../src/lib/ids.ts';
import { benchSchemaName } from './shared.ts';

export interface InsertFloor {
  /** Stores one email (its parsed JSON body) durably; resolves once committed. */
  insert(projectId: string, body: Record<string, unknown>): Promise<string>;
  close(): Promise<void>;
}

const COLUMNS =
  'id, project_id, from_address, to_addresses, subject, html, text, status, created_at, updated_at';
const TABLE =
  '(id TEXT PRIMARY KEY, project_id TEXT NOT NULL, from_address TEXT NOT NULL, to_addresses TEXT NOT NULL, ' +
  'subject TEXT NOT NULL, html TEXT, text TEXT, status TEXT NOT NULL, created_at TEXT NOT NULL, ' +
  'updated_at TEXT NOT NULL)';
const INDEX = '(project_id, id)';

function row(projectId: string, body: Record<string, unknown>): [string, ...unknown[]] {
  const now = new Date().toISOString();
  const to = Array.isArray(body.to) ? body.to : [body.to];
  return [
    newId('msg'),
    projectId,
    String(body.from),
    JSON.stringify(to),
    String(body.subject),
    (body.html as string | undefined) ?? null,
    (body.text as string | undefined) ?? null,
    'queued',
    now,
    now,
  ];
}

export async function openInsertFloor(databaseUrl: string | undefined): Promise<InsertFloor> {
  if (!databaseUrl) {
    const dir = mkdtempSync(path.join(tmpdir(), 'postwire-insert-floor-'));
    const sqlite = new DatabaseSync(path.join(dir, 'floor.db'));
    // As src/db/engine/sqlite.ts opens Postwire's database.
    sqlite.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA synchronous = NORMAL;');
    sqlite.exec(`CREATE TABLE emails ${TABLE}; CREATE INDEX emails_project ON emails ${INDEX};`);
    const insert = sqlite.prepare(`INSERT INTO emails (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    return {
      async insert(projectId, body) {
        const values = row(projectId, body);
        insert.run(...(values as (string | null)[]));
        return values[0];
      },
      async close() {
        sqlite.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const schema = benchSchemaName('floor');
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 20 });
  pool.on('error', () => undefined);
  await pool.query(`CREATE SCHEMA ${schema}`);
  await pool.query(`CREATE TABLE ${schema}.emails ${TABLE}`);
  await pool.query(`CREATE INDEX ON ${schema}.emails ${INDEX}`);
  const text = `INSERT INTO ${schema}.emails (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`;
  return {
    async insert(projectId, body) {
      const values = row(projectId, body);
      // A named statement: parsed once per connection, as Postwire's prepared statements are.
      await pool.query({ name: 'floor-insert', text, values });
      return values[0];
    },
    async close() {
      await pool.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => undefined);
      await pool.end();
    },
  };
}
