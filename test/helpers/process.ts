import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DatabaseOptions, Engine } from '../../src/db/connection.ts';
import { createTestDatabase, type TestDatabase } from './app.ts';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

const CHILD_TIMEOUT_MS = 20_000;

/**
 * Node's compile cache for the children (their V8 code and stripped TypeScript, kept between starts): the
 * suite starts a few hundred of them, and loading the server's code was most of each start's CPU
 * (bench/README.md, "Start time and the suite"). `npm test` gives the test processes one too (package.json).
 * Not for users: a thread under the smallest heap cap (REPORT_PARSE_MEMORY=16) ran out of heap loading its
 * code with the cache on (report-reader.test.ts starts its threads without it for that reason).
 * The same directory as the test processes' (package.json's `npm test`): the children load the same sources, so
 * what those and `.ci/run`'s quick bench compiled serves the children's first starts too (a `serve` start to
 * its listening line 1.32–1.35 CPU-s with nothing cached, 0.85–0.89 with the bench's entries, 0.79 with its own).
 */
const CHILD_COMPILE_CACHE = path.join(REPO_ROOT, 'node_modules', '.cache', 'test-compile-cache');

/**
 * A child's whole environment: PATH, the compile cache and schemas compiled on first use (half a start's CPU;
 * a test that starts with the default says so) plus what the test gives. Nothing else is inherited, so a
 * developer's own DATABASE_URL or POSTWIRE_* settings cannot leak into a test.
 */
export function childEnv(extra: Record<string, string | undefined>): Record<string, string> {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    NODE_COMPILE_CACHE: CHILD_COMPILE_CACHE,
    HTTP_COMPILE_SCHEMAS_AT_START: 'false',
  };
  for (const [name, value] of Object.entries(extra)) if (value !== undefined) env[name] = value;
  return env;
}

export interface ProcessDatabase {
  database: TestDatabase;
  /** The data directory child processes use (the SQLite file's, or a temporary one on PostgreSQL). */
  dataDir: string;
  /** DATABASE_URL or POSTWIRE_DATA_DIR, always with a temporary POSTWIRE_DATA_DIR so nothing lands in ./data. */
  env: Record<string, string>;
  cleanup(): Promise<void>;
}

/** A fresh, migrated (unless `unmigrated`) and empty database for child processes, on either engine. */
export async function createProcessDatabase(
  engine: Engine,
  options: Pick<DatabaseOptions, 'stampLeaseMs'> & { unmigrated?: boolean } = {},
): Promise<ProcessDatabase> {
  const database = await createTestDatabase(engine, options);
  const dataDir = database.env.POSTWIRE_DATA_DIR ?? mkdtempSync(path.join(tmpdir(), 'postwire-data-'));
  return {
    database,
    dataDir,
    env: { ...database.env, POSTWIRE_DATA_DIR: dataDir },
    async cleanup() {
      await database.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The last non-empty line of stdout (where `projects create` and `keys create` put their answer). */
  lastLine: string;
}

/** Runs `node src/cli.ts …` (or another script) to completion. `process.execPath` is the Node running the tests. */
export async function runCli(
  args: string[],
  env: Record<string, string | undefined>,
  script = 'src/cli.ts',
): Promise<CliResult> {
  const child = spawn(process.execPath, [script, ...args], { cwd: REPO_ROOT, env: childEnv(env) });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (exitCode) => resolve(exitCode));
  }).finally(() => clearTimeout(timer));
  const lines = stdout.split('\n').filter((line) => line.trim() !== '');
  return { code, stdout, stderr, lastLine: lines.at(-1) ?? '' };
}

export interface ServerProcess {
  child: ChildProcess;
  /** Where it listens, from its "listening" log line. */
  url: string;
  stdout(): string;
  stderr(): string;
  /** The JSON log lines written so far. */
  logs(): any[];
  waitForLog(predicate: (line: any) => boolean, timeoutMs?: number): Promise<any>;
  /** Resolves once the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Sends a signal and waits for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** SIGKILL if still running; for cleanup after a failed test. */
  kill(): void;
}

interface Watcher {
  predicate: (line: any) => boolean;
  resolve: (line: any) => void;
}

/**
 * Starts a server process (`node src/main.ts` unless `args` say otherwise) and resolves once it logs the
 * URL it listens on; rejects with its output if it exits or hangs first.
 */
export async function startServerProcess(
  env: Record<string, string | undefined>,
  args: string[] = ['src/main.ts'],
  ready: (line: any) => boolean = (line) => typeof line.url === 'string' && /listening/i.test(line.msg),
): Promise<ServerProcess> {
  const child = spawn(process.execPath, args, {
    cwd: REPO_ROOT,
    env: childEnv({ PORT: '0', ...env }),
  });
  let stdout = '';
  let stderr = '';
  let pending = '';
  const logs: any[] = [];
  let watchers: Watcher[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );

  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      let parsed: any;
      try {
        parsed = JSON.parse(line);
      } catch {
        continue;
      }
      logs.push(parsed);
      watchers = watchers.filter((watcher) => {
        if (!watcher.predicate(parsed)) return true;
        watcher.resolve(parsed);
        return false;
      });
    }
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));

  const describe = () => `stdout:\n${stdout}\nstderr:\n${stderr}`;
  function waitForLog(predicate: (line: any) => boolean, timeoutMs = 10_000): Promise<any> {
    const seen = logs.find(predicate);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`No such log line within ${timeoutMs} ms\n${describe()}`)),
        timeoutMs,
      );
      const watcher: Watcher = {
        predicate,
        resolve: (line) => {
          clearTimeout(timer);
          resolve(line);
        },
      };
      watchers.push(watcher);
      void exited.then(({ code, signal }) => {
        clearTimeout(timer);
        if (watchers.includes(watcher)) reject(new Error(`Exited (${code ?? signal}) first\n${describe()}`));
      });
    });
  }

  let listening: any;
  try {
    // Generous: a loaded machine (CI beside other work) can take seconds to load the HTTP stack.
    listening = await waitForLog(ready, 30_000);
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }

  return {
    child,
    url: listening.url ?? '',
    stdout: () => stdout,
    stderr: () => stderr,
    logs: () => logs,
    waitForLog,
    exited,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
      const { code } = await exited;
      clearTimeout(timer);
      return code;
    },
    kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}

/** `postwire worker`, as an operator runs it; resolves once it logs that it started. */
export function startWorkerProcess(env: Record<string, string | undefined>): Promise<ServerProcess> {
  return startServerProcess({ LOG_LEVEL: 'info', ...env }, ['src/cli.ts', 'worker'], (line) =>
    /Postwire worker started/.test(line.msg),
  );
}

/** Runs a server process that is expected to fail at start; resolves to its exit code and output. */
export async function runFailingServer(
  env: Record<string, string | undefined>,
  args: string[] = ['src/main.ts'],
): Promise<CliResult> {
  return runCli(args.slice(1), { PORT: '0', ...env }, args[0]);
}

/**
 * The port a child's inbound SMTP listener took, from the line it logs at `info` (the default level): start
 * it with INBOUND_SMTP_PORT=0 and the kernel picks a free port as the listener binds, so nothing can take
 * the port first, as it could one `freePort()` found free a moment before.
 */
export async function inboundSmtpPort(server: ServerProcess): Promise<number> {
  const line = await server.waitForLog(
    (logged) => typeof logged.port === 'number' && /^Receiving .* by SMTP on /.test(logged.msg),
  );
  return line.port;
}

/** The same for SMTP submission started with SUBMISSION_PORT=0: the port it took, from its log line. */
export async function submissionSmtpPort(server: ServerProcess): Promise<number> {
  const line = await server.waitForLog(
    (logged) => typeof logged.port === 'number' && /^SMTP submission on /.test(logged.msg),
  );
  return line.port;
}

/**
 * A port that was free a moment ago (the kernel picks it); for tests that must choose PORT before the start
 * (a PUBLIC_URL with it, a restart on the same address, a URL polled before the process says where it
 * listens). Another process can take it before the child binds it: `startOnFreePort` tries another then.
 * A listener that can take port 0 and log what it bound needs neither (`inboundSmtpPort`).
 */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/**
 * A JSON request to a running server (a child process's URL, or an in-process one) with an API key, as curl
 * sends it; resolves to the status and the parsed body.
 */
export async function requestJson(
  url: string,
  key: string,
  method: string,
  body?: unknown,
): Promise<{ status: number; body: any }> {
  const response = await fetch(url, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, body: await response.json() };
}

/** Starts tried on another port after EADDRINUSE: three races lost in a row is something else. */
const PORT_ATTEMPTS = 3;

/**
 * Runs `start` on a port `freePort()` found, and again on another when the child could not bind it because
 * something took it in the meantime (its start fails with EADDRINUSE); any other failure is the test's.
 */
export async function startOnFreePort<T>(start: (port: number) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await start(await freePort());
    } catch (error) {
      if (attempt >= PORT_ATTEMPTS || !/EADDRINUSE/.test(String(error))) throw error;
    }
  }
}
