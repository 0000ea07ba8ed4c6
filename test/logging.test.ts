import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.ts';
import { childEnv, REPO_ROOT } from './helpers/process.ts';

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
          const found = stdout.split('\n').find((each) => /Server listening at http/.test(each));
          if (found) resolve(found);
        });
        void exited.then(() => reject(new Error(`exited first:\n${stdout}`)));
      });
      if (format === 'pretty') {
        // `[10:41:07.123] INFO: Server listening at http://127.0.0.1:40123`
        assert.match(line, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: Server listening at http:\/\/127\.0\.0\.1:\d+$/);
      } else {
        const entry = JSON.parse(line);
        assert.equal(entry.level, 30);
        assert.match(entry.msg, /^Server listening at http:\/\/127\.0\.0\.1:\d+$/);
      }
    });
  }
});
