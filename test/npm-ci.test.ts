import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { REPO_ROOT } from './helpers/process.ts';
import { systemNode } from './helpers/system-node.ts';

const run = promisify(execFile);

test('npm ci on the machine’s older Node prints no engine warnings', async (t) => {
  const system = await systemNode({ olderThan: 24 });
  if (!system) return t.skip('no Node older than 24 on PATH');
  // --dry-run resolves the whole tree from the lockfile, engine checks included, and installs nothing.
  const { stdout, stderr } = await run(
    system.node,
    [system.npmCli, 'ci', '--dry-run', '--no-audit', '--no-fund'],
    // Only what a fresh shell has: no npm_config_* from an npm that runs this test.
    { cwd: REPO_ROOT, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' } },
  );
  assert.doesNotMatch(`${stdout}${stderr}`, /EBADENGINE|Unsupported engine/);
});
