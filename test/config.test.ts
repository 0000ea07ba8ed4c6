import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CONFIG_SCHEMA, loadConfig } from '../src/config.ts';
import { SETTINGS_USAGE } from '../src/cli.ts';
import { settingsOf } from '../src/lib/settings.ts';

const settings = settingsOf(CONFIG_SCHEMA);

test('every setting has a heading and a one-line description', () => {
  for (const setting of settings) {
    assert.ok(setting.group, setting.env.join());
    assert.ok(setting.description && !setting.description.includes('\n'), setting.env.join());
  }
  const names = settings.flatMap((setting) => setting.env);
  assert.equal(new Set(names).size, names.length, 'an environment variable read by two settings');
});

test('the documented default is the default: setting it explicitly changes nothing', () => {
  const defaults = loadConfig({}, { stdoutIsTTY: false });
  let checked = 0;
  for (const setting of settings) {
    const literal = /^`([^`]+)`$/.exec(setting.shownDefault)?.[1];
    if (literal === undefined || setting.env.length !== 1) continue;
    const explicit = loadConfig({ [setting.env[0]!]: literal }, { stdoutIsTTY: false });
    assert.deepEqual(explicit, defaults, `${setting.env[0]}=${literal}`);
    checked += 1;
  }
  assert.ok(checked > 40, `only ${checked} settings checked`);
});

test("the CLI's `help settings` names every setting", () => {
  for (const name of settings.flatMap((setting) => setting.env))
    assert.match(SETTINGS_USAGE, new RegExp(`\\b${name}\\b`));
});

test('SUBMISSION_PORT without a certificate refuses to start, naming the settings, unless plain AUTH on loopback is asked for', () => {
  assert.throws(
    () => loadConfig({ SUBMISSION_PORT: '2587' }),
    (error: unknown) =>
      error instanceof Error &&
      error.message ===
        'Invalid configuration:\n  - SUBMISSION_PORT needs SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY (AUTH only ' +
          'after STARTTLS), or, to try it on this machine, SUBMISSION_ALLOW_PLAIN_LOOPBACK=true (AUTH without TLS ' +
          'from loopback only).',
  );
  const local = loadConfig({ SUBMISSION_PORT: '2587', SUBMISSION_ALLOW_PLAIN_LOOPBACK: 'true' });
  assert.equal(local.submission.port, 2587);
  assert.equal(local.submission.allowPlainLoopback, true);
});
