import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { REPO_ROOT } from './helpers/process.ts';

const run = promisify(execFile);

/** A Node older than 24 on PATH outside the project (the machine's own), with its npm; else undefined. */
async function systemNodeAndNpm(): Promise<{ node: string; npmCli: string } | undefined> {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir === '' || dir.includes('node_modules')) continue;
    const node = path.join(dir, 'node');
    const npm = path.join(dir, 'npm');
    if (!existsSync(node) || !existsSync(npm)) continue;
    const { stdout } = await run(node, ['--version']);
    if (Number(/^v(\d+)/.exec(stdout)?.[1]) >= 24) continue;
    return { node, npmCli: realpathSync(npm) };
  }
  return undefined;
}

test('npm ci on the machine’s older Node prints no engine warnings', async (t) => {
  const system = await systemNodeAndNpm();
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
