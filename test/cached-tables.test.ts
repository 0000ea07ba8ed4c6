import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import {
  CACHED_WRITES,
  type CachedTable,
  CASCADING_TO_CACHED,
  writesCachedRows,
} from '../src/db/cached-tables.ts';
import type { Engine } from '../src/db/connection.ts';
import { createTestDatabase, ALL_ENGINES, engineSkip } from './helpers/app.ts';

// The cached writes are defined once (src/db/cached-tables.ts); the triggers that bump the stamps and the
// in-process detector must follow that definition. Here the triggers are read back from each engine's
// catalog, as the migrations left them, and the detector is held to the same columns.

/** One stamp trigger: which write of which table (an UPDATE: of which columns, or any) bumps which scope. */
interface StampTrigger {
  table: string;
  operation: 'insert' | 'update' | 'delete';
  columns: string[] | 'any';
  scope: string;
}

/**
 * The stamp triggers as the definition says they must be: one per table and operation, an UPDATE's
 * restricted to the cached columns when the definition names them.
 */
function expectedTriggers(): StampTrigger[] {
  return Object.entries(CACHED_WRITES).flatMap(([scope, tables]) =>
    (tables as readonly CachedTable[]).flatMap(({ table, columns }) =>
      (['insert', 'update', 'delete'] as const).map((operation) => ({
        table,
        operation,
        columns: operation === 'update' && columns ? [...columns].sort() : ('any' as const),
        scope,
      })),
    ),
  );
}

// `CREATE TRIGGER name AFTER UPDATE OF a, b ON [schema.]table … 'scope'`: SQLite keeps the statement as it
// was written, PostgreSQL's pg_get_triggerdef spells it out the same way; the scope is the quoted argument
// (of bump_cache_stamp on PostgreSQL, of the WHERE on SQLite).
const TRIGGER_TEXT =
  /\bafter\s+(insert|update|delete)(?:\s+of\s+([\w\s,"]+?))?\s+on\s+(?:"?\w+"?\.)?"?(\w+)"?\s[\s\S]*'(\w+)'/i;

function parseTrigger(text: string): StampTrigger {
  const match = TRIGGER_TEXT.exec(text);
  assert.ok(match, `a stamp trigger of an unexpected form: ${text}`);
  const [, operation, columns, table, scope] = match;
  return {
    table: table!.toLowerCase(),
    operation: operation!.toLowerCase() as StampTrigger['operation'],
    columns: columns
      ? columns
          .split(',')
          .map((column) => column.trim().replaceAll('"', '').toLowerCase())
          .sort()
      : 'any',
    scope: scope!,
  };
}

const order = (triggers: StampTrigger[]) =>
  [...triggers].sort((a, b) => `${a.table} ${a.operation}`.localeCompare(`${b.table} ${b.operation}`));

for (const engine of ALL_ENGINES) {
  describe(
    `the stamps' triggers follow the cached writes' definition (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      test('every stamp trigger in the catalog, and no other, is one the definition asks for', async () => {
        const database = await createTestDatabase(engine);
        try {
          const texts = await stampTriggerTexts(engine, database.handle.db);
          assert.deepEqual(order(texts.map(parseTrigger)), order(expectedTriggers()));
        } finally {
          await database.drop();
        }
      });

      test('a deletion reaches cached rows by cascade only from a cached table or one the definition names', async () => {
        const database = await createTestDatabase(engine);
        try {
          const cached = new Set<string>(
            Object.values(CACHED_WRITES).flatMap((tables) => tables.map((t) => t.table)),
          );
          const cascades = await cascadingDeletes(engine, database.handle.db);
          const into = cascades.filter(({ child }) => cached.has(child));
          assert.ok(into.length > 0, 'the catalog lists the cascades');
          for (const { parent, child } of into) {
            assert.ok(
              cached.has(parent) || CASCADING_TO_CACHED.includes(parent),
              `deleting from ${parent} deletes ${child} rows by cascade: add it to CASCADING_TO_CACHED`,
            );
          }
        } finally {
          await database.drop();
        }
      });
    },
  );
}

type Db = Awaited<ReturnType<typeof createTestDatabase>>['handle']['db'];

async function stampTriggerTexts(engine: Engine, db: Db): Promise<string[]> {
  if (engine === 'sqlite') {
    const { rows } = await sql<{ text: string }>`select sql as text from sqlite_master
      where type = 'trigger' and sql like '%cache_stamps%'`.execute(db);
    return rows.map((row) => row.text);
  }
  const { rows } = await sql<{ text: string }>`select pg_get_triggerdef(t.oid) as text from pg_trigger t
    join pg_class c on c.oid = t.tgrelid
    where not t.tgisinternal and c.relnamespace = current_schema()::regnamespace
      and t.tgfoid = 'bump_cache_stamp'::regproc`.execute(db);
  return rows.map((row) => row.text);
}

async function cascadingDeletes(engine: Engine, db: Db): Promise<Array<{ parent: string; child: string }>> {
  if (engine === 'sqlite') {
    const { rows } = await sql<{ parent: string; child: string }>`select f."table" as parent, m.name as child
      from sqlite_master m join pragma_foreign_key_list(m.name) f
      where m.type = 'table' and upper(f.on_delete) = 'CASCADE'`.execute(db);
    return rows;
  }
  const { rows } = await sql<{ parent: string; child: string }>`select p.relname as parent, c.relname as child
    from pg_constraint k join pg_class c on c.oid = k.conrelid join pg_class p on p.oid = k.confrelid
    where k.contype = 'f' and k.confdeltype = 'c' and c.relnamespace = current_schema()::regnamespace`.execute(
    db,
  );
  return rows;
}

describe('the in-process detector of cached writes (PostgreSQL: its answers wait out the leases)', () => {
  for (const [scope, tables] of Object.entries(CACHED_WRITES)) {
    for (const { table, columns } of tables as readonly CachedTable[]) {
      test(`${table} (${scope}): inserts and deletes count, an update as its trigger fires`, () => {
        assert.ok(writesCachedRows(`insert into "${table}" ("id") values ($1)`));
        assert.ok(writesCachedRows(`DELETE FROM ${table} WHERE id = ?`));
        assert.ok(writesCachedRows(`update "${table}" set "${columns?.[0] ?? 'id'}" = $1 where "id" = $2`));
        // Kysely's spelling of a bookkeeping write, and a raw one inside a WITH.
        assert.equal(
          writesCachedRows(`update "${table}" set "locked_by" = $1, "locked_until" = $2 where "id" = $3`),
          columns === undefined,
        );
        assert.equal(
          writesCachedRows(
            `WITH w AS (UPDATE ${table} SET locked_by = COALESCE($1, (SELECT 1)) WHERE id = $2 RETURNING id) SELECT id FROM w`,
          ),
          columns === undefined,
        );
      });
    }
  }

  test('a cached column among bookkeeping ones counts; reads and other tables do not', () => {
    assert.ok(
      writesCachedRows(
        `update "webhooks" set "failing_since" = $1, "enabled" = $2, "disabled_reason" = $3 where "id" = $4`,
      ),
    );
    assert.ok(!writesCachedRows(`update "webhooks" set "last_success_at" = $1, "failing_since" = $2`));
    assert.ok(!writesCachedRows(`select * from "webhooks" where "id" = $1 for update`));
    assert.ok(!writesCachedRows(`update "deliveries" set "locked_until" = $1 where "webhook_id" = $2`));
    assert.ok(!writesCachedRows(`insert into "webhook_stats" ("id") values ($1)`));
    for (const parent of CASCADING_TO_CACHED)
      assert.ok(writesCachedRows(`delete from "${parent}" where "id" = $1`));
  });
});
