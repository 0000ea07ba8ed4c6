// CHANGELOG.md is where an operator learns what an upgrade does, above all which migrations run when the
// new version starts (docs/operations.md, "Upgrades and migrations"): every migration this version ships is
// named there, so one cannot be added without saying what it changes.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');

test('CHANGELOG.md names every migration, and the operations guide says how an upgrade goes', () => {
  const changelog = read('CHANGELOG.md');
  assert.match(changelog, /^## Unreleased$/m);
  // Before the changelog began, 0001 to 0020 shipped as one entry (0.1.0).
  assert.match(changelog, /Migrations `0001` to `0020`/);
  const migrations = readdirSync(new URL('../src/db/migrations/', import.meta.url))
    .filter((file) => /^\d{4}_.*\.ts$/.test(file))
    .map((file) => file.replace(/\.ts$/, ''))
    .filter((name) => Number(name.slice(0, 4)) > 20);
  assert.ok(migrations.length > 0);
  for (const name of migrations) assert.ok(changelog.includes(`\`${name}\``), `CHANGELOG.md names ${name}`);

  const operations = read('docs/operations.md');
  assert.match(operations, /^## Upgrades and migrations$/m);
  assert.match(operations, /\*\*Going back\.\*\*/);
});
