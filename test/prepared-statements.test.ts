import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { createTestDatabase, engineSkip, type TestDatabase } from './helpers/app.ts';

// On PostgreSQL, writes are sent as named statements, parsed and planned once per connection
// (src/db/engine/postgres.ts, PreparingClient): what the server holds prepared, seen from the session itself.

describe('prepared writes (postgres)', { skip: engineSkip('postgres') }, () => {
  let database: TestDatabase;
  before(async () => {
    database = await createTestDatabase('postgres');
  });
  after(() => database.drop());

  /** The statements this session holds prepared whose text mentions `table`. */
  const preparedOn = (trx: TestDatabase['handle']['db'], table: string) =>
    sql<{ name: string; statement: string }>`select name, statement from pg_prepared_statements
      where statement like ${`%${table}%`} order by name`
      .execute(trx)
      .then((result) => result.rows);

  const insertProject = (trx: TestDatabase['handle']['db'], id: string) =>
    trx
      .insertInto('projects')
      .values({ id, name: `Project ${id}`, is_default: false, created_at: new Date().toISOString() })
      .execute();

  test('a write is prepared once per connection and run again by name, also after a column is added', async () => {
    // One transaction: one connection of the pool, whose session is the one pg_prepared_statements shows.
    await database.handle.db.transaction().execute(async (trx) => {
      await insertProject(trx, 'prj_one');
      await insertProject(trx, 'prj_two');
      const prepared = await preparedOn(trx, 'insert into "projects"');
      assert.equal(prepared.length, 1, JSON.stringify(prepared));
      assert.match(prepared[0]!.name, /^postwire_\d+$/);

      // A migration adding a column under a running process: the prepared INSERT names its columns, and
      // PostgreSQL plans it again rather than failing.
      await sql`alter table projects add column later_column text`.execute(trx);
      await insertProject(trx, 'prj_three');
      assert.equal((await preparedOn(trx, 'insert into "projects"')).length, 1);
      const { rows } = await sql<{
        n: string;
      }>`select count(*) as n from projects where id like 'prj_%'`.execute(trx);
      assert.equal(Number(rows[0]!.n), 3);
    });
  });

  test('a write without parameters is sent unnamed, so a text may hold several statements', async () => {
    await sql
      .raw(
        `insert into projects (id, name, is_default, created_at) values ('prj_a', 'A', false, '2026-01-01');
         insert into projects (id, name, is_default, created_at) values ('prj_b', 'B', false, '2026-01-01')`,
      )
      .execute(database.handle.db);
    const { rows } = await sql<{
      id: string;
    }>`select id from projects where id in ('prj_a', 'prj_b') order by id`.execute(database.handle.db);
    assert.deepEqual(
      rows.map((row) => row.id),
      ['prj_a', 'prj_b'],
    );
  });

  test('writes with a * column list, and reads, are sent unnamed', async () => {
    await database.handle.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('projects')
        .values({ id: 'prj_star', name: 'Star', is_default: false, created_at: new Date().toISOString() })
        .returningAll()
        .execute();
      await trx.selectFrom('projects').select('id').where('id', '=', 'prj_star').execute();
      // A WITH whose result takes a table's columns by `*`, as the sending queue's claim does.
      await trx
        .with('renamed', (cte) =>
          cte.updateTable('projects').set({ name: 'Star 2' }).where('id', '=', 'prj_star').returning('id'),
        )
        .selectFrom('renamed')
        .innerJoin('projects', 'projects.id', 'renamed.id')
        .selectAll('projects')
        .execute();
      assert.deepEqual(await preparedOn(trx, 'returning *'), []);
      assert.deepEqual(await preparedOn(trx, 'from "projects" where'), []);
      assert.deepEqual(await preparedOn(trx, '"projects".*'), []);
      // count(*) is no column list: a write counting is prepared like any other.
      await sql`with counted as (update projects set name = name where id = ${'prj_star'} returning id)
        select count(*) as n from counted`.execute(trx);
      assert.equal((await preparedOn(trx, 'select count(*) as n from counted')).length, 1);
    });
  });
});
