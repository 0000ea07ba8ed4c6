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

    test('processes starting at once on an empty database make one default project', async () => {
      // Separate connections (pools on PostgreSQL), as separate processes would have.
      const handles =
        engine === 'postgres'
          ? await Promise.all(
              [1, 2, 3].map(() => openDatabase({ url: database.env.DATABASE_URL!, poolSize: 2 })),
            )
          : [database.handle];
      try {
        const results = await Promise.all(
          [...handles, ...handles].map((handle) =>
            createProjectService({ repo: createProjectRepo(handle.db), clock: systemClock }).bootstrap(
              undefined,
            ),
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
  });
}
