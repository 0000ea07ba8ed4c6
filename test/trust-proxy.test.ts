import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, loadConfig, type TrustProxy } from '../src/config.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';

const FAILURE_LIMIT = 3;

/** A test app whose failed-auth limit trips after FAILURE_LIMIT bad keys from one client. */
async function appTrusting(trustProxy: TrustProxy): Promise<TestApp> {
  return startTestApp('sqlite', {
    authFailureLimit: { limit: FAILURE_LIMIT, windowMs: 60_000 },
    config: { trustProxy },
  });
}

/** A request with a wrong key, as if relayed for `forwardedFor` (or with no such header). */
async function failAuth(api: TestApp, forwardedFor?: string): Promise<number> {
  const response = await api.request('GET', '/v1/webhooks', {
    key: 'pw_not_a_key_at_all_0123456789',
    headers: forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor },
  });
  return response.status;
}

describe('TRUST_PROXY', () => {
  test('reads off, a hop count, or addresses and CIDR networks; anything else is a configuration error', () => {
    assert.equal(loadConfig({}).trustProxy, false);
    assert.equal(loadConfig({ TRUST_PROXY: 'off' }).trustProxy, false);
    assert.equal(loadConfig({ TRUST_PROXY: '1' }).trustProxy, 1);
    assert.deepEqual(loadConfig({ TRUST_PROXY: '10.0.0.0/8, 192.0.2.7,fd00::/8' }).trustProxy, [
      '10.0.0.0/8',
      '192.0.2.7',
      'fd00::/8',
    ]);
    for (const bad of ['true', 'proxy.internal', '10.0.0.0/33', '10.0.0.0/8/1', '1000']) {
      assert.throws(
        () => loadConfig({ TRUST_PROXY: bad }),
        (error: unknown) =>
          error instanceof ConfigError &&
          error.message.includes(`TRUST_PROXY must be off, a hop count from 1 to 100`) &&
          error.message.includes(`got '${bad}'`),
        bad,
      );
    }
  });

  test('a hop count: the failed-auth limit counts the client the nearest proxy names', async (t) => {
    const api = await appTrusting(1);
    t.after(() => api.close());
    for (let attempt = 1; attempt <= FAILURE_LIMIT; attempt++) {
      assert.equal(await failAuth(api, '203.0.113.5'), 401, `attempt ${attempt}`);
    }
    assert.equal(await failAuth(api, '203.0.113.5'), 429, 'that client is locked out');
    // What the client itself put in front of the proxy's entry changes nothing: the proxy's entry is the client.
    assert.equal(await failAuth(api, '198.51.100.77, 203.0.113.5'), 429);
    assert.equal(await failAuth(api, '203.0.113.6'), 401, 'another client behind the same proxy is not');
    assert.equal(await failAuth(api), 401, 'nor is the proxy itself');
  });

  for (const [label, trustProxy] of [
    ['off', false],
    ['a network that does not hold the connecting address', ['10.0.0.0/8']],
  ] as const) {
    test(`${label}: a forged X-Forwarded-For is ignored, every forged value counts against the real address`, async (t) => {
      const api = await appTrusting(trustProxy === false ? false : [...trustProxy]);
      t.after(() => api.close());
      for (let attempt = 1; attempt <= FAILURE_LIMIT; attempt++) {
        assert.equal(await failAuth(api, `203.0.113.${attempt}`), 401, `attempt ${attempt}`);
      }
      // Had each forged value its own window, this would be a first failure (401).
      assert.equal(await failAuth(api, '203.0.113.200'), 429);
      assert.equal(await failAuth(api), 429);
    });
  }

  test('the public routes’ per-address limit counts the forwarded client too', async (t) => {
    const api = await startTestApp('sqlite', {
      publicUrl: 'http://127.0.0.1',
      publicRateLimit: { limit: 2, windowMs: 60_000 },
      config: { trustProxy: ['127.0.0.1'] },
    });
    t.after(() => api.close());
    const open = (forwardedFor: string) =>
      api.request('GET', '/o/not-a-token', { key: null, headers: { 'x-forwarded-for': forwardedFor } });
    const statuses = [];
    for (let attempt = 0; attempt < 3; attempt++) statuses.push((await open('203.0.113.9')).status);
    assert.equal(statuses.at(-1), 429, JSON.stringify(statuses));
    assert.notEqual((await open('203.0.113.10')).status, 429, 'another client has its own window');
  });
});
