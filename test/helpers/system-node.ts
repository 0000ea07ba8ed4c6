import { execFile } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface SystemNode {
  /** The folder on PATH that holds it (and its npm). */
  dir: string;
  node: string;
  /** npm's JavaScript entry point, to run with `node` (the `npm` on PATH is a link to it). */
  npmCli: string;
  major: number;
}

/**
 * The first Node on PATH outside node_modules that has an npm beside it: the machine's own, not the pinned one
 * that npm scripts put first on PATH (node_modules/.bin). `olderThan` narrows it to a Node older than that major.
 */
export async function systemNode(options: { olderThan?: number } = {}): Promise<SystemNode | undefined> {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir === '' || dir.includes('node_modules')) continue;
    const node = path.join(dir, 'node');
    const npm = path.join(dir, 'npm');
    if (!existsSync(node) || !existsSync(npm)) continue;
    const { stdout } = await run(node, ['--version']);
    const major = Number(/^v(\d+)/.exec(stdout)?.[1]);
    if (options.olderThan !== undefined && major >= options.olderThan) continue;
    return { dir, node, npmCli: realpathSync(npm), major };
  }
  return undefined;
}

/** PATH without the folders that npm scripts add (node_modules/.bin): what a fresh shell has. */
export function pathWithoutNodeModules(): string {
  return (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter((dir) => dir !== '' && !dir.includes('node_modules'))
    .join(path.delimiter);
}

/**
 * This process's environment as a fresh shell on the machine has it: the machine's own settings stay (the CA
 * certificates npm needs to reach its registry from here, for one), while what `npm test` adds (npm_config_*,
 * npm_lifecycle_*, NODE, INIT_CWD, node_modules/.bin on PATH) and Postwire's own settings go.
 */
export function freshShellEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    // Lower-case npm_*: npm's own variables for a script. The machine's NPM_CONFIG_* (a registry mirror) stay.
    if (value === undefined || /^npm_/.test(name) || /^POSTWIRE_/i.test(name)) continue;
    if (['NODE', 'INIT_CWD', 'DATABASE_URL', 'TEST_DATABASE_URL'].includes(name)) continue;
    env[name] = value;
  }
  env.PATH = pathWithoutNodeModules();
  return env;
}
