// `npm start`, as the README says to run it: a signal to npm (a supervisor's SIGTERM) or to the terminal's
// process group (Ctrl-C) stops the server gracefully, and no process is left listening.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { childEnv, REPO_ROOT } from './helpers/process.ts';
import { until } from './helpers/until.ts';

interface NpmStart {
  npmPid: number;
  /** The server's own pid and address, from its listening line. */
  serverPid: number;
  url: string;
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

async function npmStart(t: test.TestContext): Promise<NpmStart> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'postwire-npm-start-'));
  // Its own process group, like a terminal's foreground job: a signal to the group is what Ctrl-C sends.
  const child = spawn('npm', ['start', '--silent'], {
    cwd: REPO_ROOT,
    detached: true,
    env: childEnv({
      PORT: '0',
      POSTWIRE_DATA_DIR: dataDir,
      POSTWIRE_ENCRYPTION_KEY: 'ab'.repeat(32),
      LOG_FORMAT: 'json',
      HOME: process.env.HOME,
    }),
  });
  let output = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  t.after(async () => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Already gone, as it should be.
    }
    rmSync(dataDir, { recursive: true, force: true });
  });
  const listening = await new Promise<any>((resolve, reject) => {
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
      for (const line of output.split('\n')) {
        if (line.startsWith('{') && line.includes('Postwire is listening')) resolve(JSON.parse(line));
      }
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    void exited.then(() => reject(new Error(`npm start exited first:\n${output}`)));
  });
  return { npmPid: child.pid!, serverPid: listening.pid, url: listening.url, output: () => output, exited };
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function refuses(url: string): Promise<boolean> {
  return fetch(`${url}/healthz`).then(
    () => false,
    () => true,
  );
}

describe('npm start', () => {
  test('SIGTERM to npm stops the server gracefully: it exits 0 and nothing listens any more', async (t) => {
    const started = await npmStart(t);
    assert.equal((await fetch(`${started.url}/healthz`)).status, 200);
    process.kill(started.npmPid, 'SIGTERM');
    const { code } = await started.exited;
    assert.equal(code, 0, started.output());
    // npm waited for its child: the server is gone, not orphaned and still listening.
    assert.equal(isRunning(started.serverPid), false, started.output());
    assert.equal(await refuses(started.url), true);
    assert.match(started.output(), /"msg":"Received SIGTERM; finishing work in flight, then exiting"/);
    assert.match(started.output(), /"msg":"Stopped"/);
    assert.doesNotMatch(started.output(), /again; exiting without waiting/);
  });

  test('Ctrl-C (SIGINT to the whole process group: npm and the server) is one graceful stop', async (t) => {
    const started = await npmStart(t);
    process.kill(-started.npmPid, 'SIGINT');
    await started.exited;
    await until(() => !isRunning(started.serverPid), 20_000, 'the server to exit');
    assert.equal(await refuses(started.url), true);
    assert.match(started.output(), /"msg":"Received SIGINT; finishing work in flight, then exiting"/);
    assert.match(started.output(), /"msg":"Stopped"/);
    // npm passes its copy on too; the server takes the two as one stop, not as "exit without waiting".
    assert.doesNotMatch(started.output(), /again; exiting without waiting/);
  });
});
