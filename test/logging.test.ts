import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { Writable } from 'node:stream';
import { ConfigError, loadConfig } from '../src/config.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { childEnv, REPO_ROOT, runFailingServer } from './helpers/process.ts';
import { until } from './helpers/until.ts';

describe('log format', () => {
  test('pretty on a terminal, JSON otherwise, unless LOG_FORMAT says', () => {
    assert.equal(loadConfig({}, { stdoutIsTTY: true }).logFormat, 'pretty');
    assert.equal(loadConfig({}, { stdoutIsTTY: false }).logFormat, 'json');
    assert.equal(loadConfig({ LOG_FORMAT: 'json' }, { stdoutIsTTY: true }).logFormat, 'json');
    assert.equal(loadConfig({ LOG_FORMAT: 'pretty' }, { stdoutIsTTY: false }).logFormat, 'pretty');
    assert.throws(
      () => loadConfig({ LOG_FORMAT: 'yaml' }),
      (error: unknown) =>
        error instanceof ConfigError &&
        /LOG_FORMAT must be one of json, pretty, got 'yaml'/.test(error.message),
    );
  });

  // The server as an operator starts it. Its stdout is a pipe here, so without LOG_FORMAT it would log JSON
  // (every other process test reads those lines); LOG_FORMAT=pretty must give readable lines instead.
  for (const format of ['pretty', 'json'] as const) {
    test(`the server logs ${format} lines with LOG_FORMAT=${format}`, async (t) => {
      const dataDir = mkdtempSync(path.join(tmpdir(), 'postwire-logs-'));
      t.after(() => rmSync(dataDir, { recursive: true, force: true }));
      const child = spawn(process.execPath, ['src/main.ts'], {
        cwd: REPO_ROOT,
        env: childEnv({
          PORT: '0',
          POSTWIRE_DATA_DIR: dataDir,
          POSTWIRE_ENCRYPTION_KEY: 'ab'.repeat(32),
          LOG_FORMAT: format,
        }),
      });
      const exited = new Promise((resolve) => child.on('exit', resolve));
      t.after(async () => {
        child.kill('SIGTERM');
        await exited;
      });
      let stdout = '';
      const line = await new Promise<string>((resolve, reject) => {
        child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
          stdout += chunk;
          const found = stdout.split('\n').find((each) => /Postwire is listening on http/.test(each));
          if (found) resolve(found);
        });
        void exited.then(() => reject(new Error(`exited first:\n${stdout}`)));
      });
      const address = String.raw`http:\/\/127\.0\.0\.1:\d+`;
      const message =
        String.raw`Postwire is listening on ${address}: dashboard at ${address}\/dashboard ` +
        String.raw`\(sign in with the API key shown above\), API reference at ${address}\/docs`;
      if (format === 'pretty') {
        // `[10:41:07.123] INFO: Postwire is listening on http://127.0.0.1:40123 (API reference at …/docs)`
        assert.match(line, new RegExp(String.raw`^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: ${message}$`));
      } else {
        const entry = JSON.parse(line);
        assert.equal(entry.level, 30);
        assert.match(entry.msg, new RegExp(`^${message}$`));
        assert.match(entry.url, new RegExp(`^${address}$`));
      }
      // One start-up line names the address: Fastify's own "Server listening at" is not there beside it.
      assert.doesNotMatch(stdout, /Server listening at/);
      assert.equal(stdout.split('\n').filter((each) => /listening/i.test(each)).length, 1, stdout);

      // A first start ends with the key and the dashboard: nothing but the shutdown follows the listening line,
      // and the key's box is right above it, after every other start-up line (pretty lines come from a worker
      // thread, which once wrote the migrations' lines after the box).
      child.kill('SIGTERM');
      await exited;
      // Pretty lines carry their fields on indented lines below them.
      const lines = stdout.split('\n').filter((each) => each.trim() !== '' && !/^\s/.test(each));
      const listening = lines.findIndex((each) => /Postwire is listening on http/.test(each));
      for (const after of lines.slice(listening + 1)) assert.match(after, /Received SIGTERM|Stopped/, stdout);
      const box = lines.slice(listening - 8, listening);
      assert.match(box[0]!, /^┌─+┐$/, stdout);
      assert.match(box[1]!, /^│ Your API key \(shown once\): pw_[A-Za-z0-9_-]+ +│$/);
      assert.match(
        box[6]!,
        new RegExp(String.raw`^│ Dashboard: ${address}\/dashboard \(sign in with this key\) +│$`),
      );
      assert.match(box[7]!, /^└─+┘$/);
    });
  }
});

describe('log level', () => {
  test('LOG_LEVEL takes pino’s levels, in any case; anything else is a configuration error', () => {
    assert.equal(loadConfig({}).logLevel, 'info');
    assert.equal(loadConfig({ LOG_LEVEL: 'DEBUG' }).logLevel, 'debug');
    assert.throws(
      () => loadConfig({ LOG_LEVEL: 'verbose' }),
      (error: unknown) =>
        error instanceof ConfigError &&
        error.message ===
          "Invalid configuration:\n  - LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got 'verbose'.",
    );
  });

  test('the server refuses LOG_LEVEL=verbose with the configuration message, not a logging library’s', async (t) => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'postwire-logs-'));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const result = await runFailingServer({ POSTWIRE_DATA_DIR: dataDir, LOG_LEVEL: 'verbose' });
    assert.equal(result.code, 1);
    assert.equal(
      result.stderr,
      "Invalid configuration:\n  - LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got 'verbose'.\n",
    );
    assert.equal(result.stdout, '');
  });
});

describe('request lines', () => {
  /** An app whose log lines land in `lines`, at `level`. */
  async function loggedApp(level: string): Promise<{ api: TestApp; lines: any[] }> {
    const lines: any[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
        done();
      },
    });
    const api = await startTestApp('sqlite', { logger: { level, stream } });
    return { api, lines };
  }

  const STATIC_FILES = ['/', '/dashboard', '/dashboard/vendor/preact.js', '/docs', '/docs/static/index.html'];

  test('at info: one line per API request with method, route, status, time and request id; none for static files', async (t) => {
    const { api, lines } = await loggedApp('info');
    t.after(() => api.close());
    for (const file of STATIC_FILES) {
      const response = await api.request('GET', file, { key: null });
      assert.ok(response.status < 400, `${file}: ${response.status}`);
    }
    const listed = await api.request('GET', '/v1/webhooks?limit=5');
    const refused = await api.request('GET', '/v1/webhooks', { key: null });
    const missing = await api.request('GET', '/v1/no-such-thing');
    await until(() => lines.some((line) => line.status === 404), 5_000, 'the last request’s line');

    const requestLines = lines.filter((line) => line.reqId);
    assert.deepEqual(
      requestLines.map(({ reqId, method, route, status }) => ({ reqId, method, route, status })),
      [
        { response: listed, status: 200, route: '/v1/webhooks' },
        { response: refused, status: 401, route: '/v1/webhooks' },
        { response: missing, status: 404, route: '(no route)' },
      ].map(({ response, status, route }) => ({
        reqId: response.headers.get('x-request-id'),
        method: 'GET',
        route,
        status,
      })),
    );
    for (const line of requestLines) {
      assert.equal(line.level, 30);
      assert.equal(typeof line.ms, 'number');
      assert.equal(line.msg, `${line.method} ${line.route} ${line.status} ${line.ms} ms`);
    }
    // Neither the path's query nor the key reaches the log.
    assert.ok(!JSON.stringify(lines).includes('limit=5'));
    assert.ok(!JSON.stringify(lines).includes(api.key));
  });

  test('at debug: static files have their line too', async (t) => {
    const { api, lines } = await loggedApp('debug');
    t.after(() => api.close());
    await api.request('GET', '/dashboard/vendor/preact.js', { key: null });
    const line = await until(
      () => lines.find((each) => each.route === '/dashboard/*'),
      5_000,
      'the asset’s line',
    );
    assert.equal(line.level, 20);
    assert.equal(line.status, 200);
  });
});
