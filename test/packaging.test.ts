// The package as an operator installs it: `npm pack`, `npm install -g` of the tarball with the machine's own
// Node and npm, then the installed `postwire` from a folder that has nothing to do with the checkout, with the
// machine's Node first on PATH (Node 20 here, older than the 24 the code needs). One test, because the install
// is the slow part (the npm registry, or npm's cache) and every check below needs it. Only the install needs
// the registry: the first test (the packed file list, and `bin` from the unpacked tarball on the system Node
// and on the pinned one) runs without it, so an unreachable registry skips only what it must.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { REPO_ROOT, requestJson } from './helpers/process.ts';
import { freshShellEnv, systemNode } from './helpers/system-node.ts';

// Bounds, not waits: each step ends as soon as it is done. The install is seconds from npm's cache and up to a
// minute or two from the registry (the pinned Node alone is about 30 MB to download).
const PING_TIMEOUT_MS = 30_000;
const PACK_TIMEOUT_MS = 60_000;
const INSTALL_TIMEOUT_MS = 240_000;
const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 30_000;
// The whole test's bound: the steps' bounds added up, with room for the two starts and stops.
const TEST_TIMEOUT_MS = 6 * 60_000;
const KEY = 'pw_packaging_test_key_0123456789';

/**
 * Runs a command to completion within `timeoutMs`, in its own process group so that a time-out ends what it
 * started too (npm runs install scripts, and the `node` package's runs another npm).
 */
async function run(
  command: string,
  args: string[],
  options: { cwd: string; env: Record<string, string>; timeout: number },
): Promise<{ stdout: string; stderr: string }> {
  const child = spawn(command, args, { cwd: options.cwd, env: options.env, detached: true });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    process.kill(-child.pid!, 'SIGKILL');
  }, options.timeout);
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  }).finally(() => clearTimeout(timer));
  if (code !== 0) {
    const why = timedOut ? `did not finish within ${options.timeout} ms` : `exited ${code}`;
    throw new Error(`${[command, ...args].join(' ')} ${why}\n${stdout}\n${stderr}`);
  }
  return { stdout, stderr };
}

interface Served {
  child: ChildProcess;
  url: string;
  /** The pid in the server's log lines: the process that runs the TypeScript. */
  serverPid: number;
  logs: any[];
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGKILL to the command and to the server (its own process group, so not reached through the command). */
  kill(): void;
}

/**
 * Cleanup after a failure: SIGKILL to the server's pids, then to the command. Only while the command runs: it
 * exits only after the server has (or when killed here, after it), so a pid of theirs is never someone else's.
 */
function killAll(command: ChildProcess, serverPids: number[]): void {
  if (command.exitCode !== null || command.signalCode !== null) return;
  for (const pid of new Set(serverPids)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
  command.kill('SIGKILL');
}

/** Starts the installed command and resolves once it logs where it listens. */
async function serve(command: string, cwd: string, env: Record<string, string>): Promise<Served> {
  // Its own process group, so that the test can signal the group as a terminal's Ctrl-C does.
  const child = spawn(command, ['serve'], { cwd, env, detached: true });
  const logs: any[] = [];
  let output = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const listening = new Promise<any>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`not listening within ${START_TIMEOUT_MS} ms`)),
      START_TIMEOUT_MS,
    );
    createInterface({ input: child.stdout! }).on('line', (line) => {
      output += `${line}\n`;
      if (!line.startsWith('{')) return;
      const parsed = JSON.parse(line);
      logs.push(parsed);
      if (typeof parsed.url === 'string' && /listening/i.test(parsed.msg)) {
        clearTimeout(timer);
        resolve(parsed);
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`exited (${code ?? signal}) before listening`));
    });
  });
  try {
    const line = await listening;
    const kill = () => killAll(child, [line.pid]);
    return { child, url: line.url, serverPid: line.pid, logs, output: () => output, exited, kill };
  } catch (error) {
    killAll(
      child,
      logs.map((line) => line.pid),
    );
    throw new Error(`${(error as Error).message}\n${output}`);
  }
}

/** What every tarball must hold (the command, its hooks, the code, the dashboard) and must not. */
function assertPackedFiles(files: string[]): void {
  for (const needed of [
    'bin/postwire.js',
    'bin/type-stripping-hooks.js',
    'src/cli.ts',
    'dashboard/index.html',
  ]) {
    assert.ok(files.includes(needed), `the tarball has ${needed}`);
  }
  for (const kept of ['test/', 'bench/', 'sdk/', '.ci/']) {
    assert.ok(!files.some((file) => file.startsWith(kept)), `the tarball has nothing under ${kept}`);
  }
}

test(
  'without the registry: the packed file list, and bin from the unpacked tarball on the system Node and on the pinned one',
  {
    timeout: TEST_TIMEOUT_MS,
  },
  async (t) => {
    const system = await systemNode();
    if (!system) return t.skip('no Node with npm on PATH outside node_modules to pack the package with');
    const shell = freshShellEnv();
    const work = mkdtempSync(path.join(tmpdir(), 'postwire-packed-'));
    t.after(() => rmSync(work, { recursive: true, force: true }));
    const { version } = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8'));
    const packed = await run(system.node, [system.npmCli, 'pack', '--json', '--pack-destination', work], {
      cwd: REPO_ROOT,
      env: shell,
      timeout: PACK_TIMEOUT_MS,
    });
    const [manifest] = JSON.parse(packed.stdout);
    assertPackedFiles(manifest.files.map((file: { path: string }) => file.path));

    // Unpacked where an install puts it (under node_modules, where Node strips no types), its dependencies
    // those of the checkout: the command must start the pinned Node with the hooks to run its TypeScript.
    const installed = path.join(work, 'node_modules', 'postwire');
    mkdirSync(path.dirname(installed));
    await run('tar', ['-xzf', path.join(work, manifest.filename), '-C', work], {
      cwd: work,
      env: shell,
      timeout: PACK_TIMEOUT_MS,
    });
    renameSync(path.join(work, 'package'), installed);
    symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(installed, 'node_modules'));
    const bin = path.join(installed, 'bin', 'postwire.js');
    for (const [which, node] of [
      [`the system Node ${system.major}`, system.node],
      ['the pinned Node', process.execPath],
    ] as const) {
      const ran = await run(node, [bin, '--version'], { cwd: work, env: shell, timeout: START_TIMEOUT_MS });
      assert.equal(ran.stdout, `postwire ${version}\n`, which);
    }
  },
);

/** Sends `signal` (to the process group with `group`) and resolves to how the command ended. */
async function stop(served: Served, signal: NodeJS.Signals, group = false) {
  process.kill(group ? -served.child.pid! : served.child.pid!, signal);
  const timer = setTimeout(served.kill, STOP_TIMEOUT_MS);
  const ended = await served.exited;
  clearTimeout(timer);
  return ended;
}

test(
  'npm pack, npm install -g, and the installed postwire serves from any folder on the system Node',
  { timeout: TEST_TIMEOUT_MS },
  async (t) => {
    const system = await systemNode();
    if (!system) return t.skip('no Node with npm on PATH outside node_modules to install the package with');
    const shell = freshShellEnv();
    const npm = (args: string[], cwd: string, timeout: number) =>
      run(system.node, [system.npmCli, ...args], { cwd, env: shell, timeout });

    const started = performance.now();
    const elapsed = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;
    try {
      await npm(['ping', '--fetch-retries=0'], REPO_ROOT, PING_TIMEOUT_MS);
    } catch (error) {
      // Said in the output: what this test alone checks (the install from the registry, the installed command
      // serving) is untested in this run; the test above checked the tarball without the registry.
      return t.skip(
        `the npm registry is unreachable, so the install from it is NOT tested in this run (the packed files and bin are, above): ${error}`,
      );
    }

    const work = mkdtempSync(path.join(tmpdir(), 'postwire-packaging-'));
    t.after(() => rmSync(work, { recursive: true, force: true }));
    const prefix = path.join(work, 'prefix');
    const elsewhere = path.join(work, 'elsewhere');

    const { version } = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8'));
    const packed = await npm(['pack', '--json', '--pack-destination', work], REPO_ROOT, PACK_TIMEOUT_MS);
    const [manifest] = JSON.parse(packed.stdout);
    const files: string[] = manifest.files.map((file: { path: string }) => file.path);
    t.diagnostic(
      `packed ${manifest.filename}: ${files.length} files, ${manifest.size} bytes, at ${elapsed()}`,
    );
    assertPackedFiles(files);

    await npm(
      [
        'install',
        '--global',
        '--prefix',
        prefix,
        '--no-audit',
        '--no-fund',
        path.join(work, manifest.filename),
      ],
      work,
      INSTALL_TIMEOUT_MS,
    );
    t.diagnostic(`installed with Node ${system.major}'s npm at ${elapsed()}`);

    // The machine's Node first after the install's bin: `#!/usr/bin/env node` starts the command on it.
    const command = path.join(prefix, 'bin', 'postwire');
    const env = {
      ...shell,
      PATH: [path.dirname(command), shell.PATH].join(path.delimiter),
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'info',
      POSTWIRE_BOOTSTRAP_KEY: KEY,
    };
    mkdirSync(elsewhere);
    const versionRun = await run(command, ['--version'], { cwd: elsewhere, env, timeout: START_TIMEOUT_MS });
    assert.equal(versionRun.stdout, `postwire ${version}\n`);

    const first = await serve(command, elsewhere, env);
    t.after(first.kill);
    t.diagnostic(`first start listening at ${elapsed()}`);
    // The command itself ran on the system Node and the server on the pinned one, in a second process.
    assert.notEqual(first.serverPid, first.child.pid);
    if (existsSync('/proc/self/exe')) {
      assert.equal(readlinkSync(`/proc/${first.child.pid}/exe`), realpathSync(system.node));
    }
    // With no POSTWIRE_DATA_DIR, the data lands in ./data of the folder it was started from.
    assert.ok(existsSync(path.join(elsewhere, 'data', 'postwire.db')));

    const health = await fetch(`${first.url}/healthz`);
    assert.equal(health.status, 200);
    const dashboard = await fetch(`${first.url}/dashboard/`);
    assert.equal(dashboard.status, 200, 'the dashboard files are in the package');
    // A render runs on the render threads: they load their .ts files from the installed package too.
    const created = await requestJson(`${first.url}/v1/templates`, KEY, 'POST', {
      name: 'Welcome',
      subject: 'Hi {{ name }}',
      html: '<p>Hello {{ name }}</p>',
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const rendered = await requestJson(`${first.url}/v1/templates/${created.body.id}/render`, KEY, 'POST', {
      variables: { name: 'Ada' },
    });
    assert.equal(rendered.status, 200, JSON.stringify(rendered.body));
    assert.equal(rendered.body.subject, 'Hi Ada');

    // SIGTERM to the command (as systemd or `kill` sends it) reaches the server once: a clean stop, exit 0.
    assert.deepEqual(await stop(first, 'SIGTERM'), { code: 0, signal: null }, first.output());
    assert.ok(
      first.logs.some((line) => line.msg === 'Stopped'),
      first.output(),
    );
    assert.doesNotMatch(first.output(), /again; exiting without waiting|ExperimentalWarning/);
    t.diagnostic(`first stop at ${elapsed()}`);

    // Ctrl-C in a terminal signals the whole process group: the server still gets one SIGINT, not two.
    const second = await serve(command, elsewhere, env);
    t.after(second.kill);
    assert.equal((await fetch(`${second.url}/healthz`)).status, 200);
    assert.deepEqual(await stop(second, 'SIGINT', true), { code: 0, signal: null }, second.output());
    assert.ok(
      second.logs.some((line) => line.msg === 'Stopped'),
      second.output(),
    );
    assert.doesNotMatch(second.output(), /again; exiting without waiting/);
    t.diagnostic(`done at ${elapsed()}`);
  },
);
