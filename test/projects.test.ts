import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { openDatabase } from '../src/db/connection.ts';
import { systemClock } from '../src/lib/clock.ts';
import { createProjectRepo } from '../src/modules/projects/projects.repo.ts';
import { createProjectService } from '../src/modules/projects/projects.service.ts';
import { createTestDatabase, ALL_ENGINES, engineSkip, type TestDatabase } from './helpers/app.ts';

for (const engine of ALL_ENGINES) {
  describe(`bootstrap (${engine})`, { skip: engineSkip(engine) }, () => {
    let database: TestDatabase;
    before(async () => {
      database = await createTestDatabase(engine);
    });
    after(() => database.drop());

    /** Separate connections (pools on PostgreSQL), as separate processes would have. */
    const processHandles = (of: TestDatabase) =>
      engine === 'postgres'
        ? Promise.all([1, 2, 3].map(() => openDatabase({ url: of.env.DATABASE_URL!, poolSize: 2 })))
        : Promise.resolve([of.handle]);

    test('processes starting at once on an empty database make one default project', async () => {
      const handles = await processHandles(database);
      try {
        const results = await Promise.all(
          [...handles, ...handles].map((handle) =>
            createProjectService({
              db: handle.db,
              repo: createProjectRepo(handle.db),
              clock: systemClock,
            }).bootstrap(undefined),
          ),
        );
        const projects = await database.handle.db.selectFrom('projects').selectAll().execute();
        assert.equal(projects.length, 1, JSON.stringify(projects));
        for (const result of results) assert.equal(result.project.id, projects[0]!.id);
        assert.ok(
          results.some((result) => result.createdKey),
          'a key was made and shown',
        );
      } finally {
        if (engine === 'postgres') await Promise.all(handles.map((handle) => handle.close()));
      }
    });

    test('processes starting at once with one POSTWIRE_BOOTSTRAP_KEY all start, and store it once', async () => {
      const own = await createTestDatabase(engine);
      const handles = await processHandles(own);
      try {
        const bootstrapKey = 'pw_bootstrap_at_once_0123456789';
        const results = await Promise.allSettled(
          [...handles, ...handles].map((handle) =>
            createProjectService({
              db: handle.db,
              repo: createProjectRepo(handle.db, handle.stamps),
              clock: systemClock,
            }).bootstrap(bootstrapKey),
          ),
        );
        assert.deepEqual(
          results.map((result) => result.status),
          results.map(() => 'fulfilled'),
          JSON.stringify(results),
        );
        const keys = await own.handle.db.selectFrom('api_keys').select('name').execute();
        assert.deepEqual(keys, [{ name: 'bootstrap' }]);
      } finally {
        if (engine === 'postgres') await Promise.all(handles.map((handle) => handle.close()));
        await own.drop();
      }
    });
  });
}
