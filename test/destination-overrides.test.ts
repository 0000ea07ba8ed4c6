import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Clock } from '../src/lib/clock.ts';
import { createDestinationSync } from '../src/modules/destinations/destinations.sync.ts';
import { createSourcedShaping } from '../src/modules/destinations/source-shaping.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// Issue 38: the operator's destination overrides through the API (PUT, GET, DELETE
// /v1/destinations/overrides), with the METRICS_TOKEN of GET /v1/destinations, persisted, and taken up by
// every sending worker within a second of the clock: here two workers' destination states on one database.

const TOKEN = 'operator-token-0123456789';
const operator = { key: null, headers: { authorization: `Bearer ${TOKEN}` } };
const SETTINGS = [{ pattern: 'yahoo', limits: { connections: 2 } }];
const GMAIL_MX = ['gmail-smtp-in.l.google.com', 'alt1.gmail-smtp-in.l.google.com'];

for (const engine of ALL_ENGINES) {
  describe(`destination overrides by API (${engine})`, { skip: engineSkip(engine) }, () => {
    let app: TestApp;
    let nowMs = Date.parse('2026-03-02T10:00:00.000Z');
    const clock: Clock = { now: () => new Date(nowMs) };

    before(async () => {
      app = await startTestApp(engine, {
        clock,
        config: {
          metricsToken: TOKEN,
          destinationLimits: SETTINGS,
        },
      });
    });
    after(async () => {
      await app?.close();
    });

    test('set, shown, taken up by every worker, and cleared', async () => {
      const workers = [0, 1].map(() =>
        createDestinationSync({
          repo: app.services.repositories.destinations,
          shaping: createSourcedShaping({ overrides: SETTINGS }),
          overrides: SETTINGS,
        }),
      );
      for (const worker of workers) {
        worker.shaping.learn('gmail.com', GMAIL_MX, nowMs);
        await worker.sync(nowMs);
        // The table's five connections to Google: a second one may open.
        assert.equal(worker.shaping.of('default').startAt('google', nowMs, 1), nowMs);
      }

      // Only the operator, and only with a body that is one.
      assert.equal(
        (await app.request('PUT', '/v1/destinations/overrides/google', { body: { connections: 1 } })).status,
        401,
      );
      assert.equal(
        (
          await app.request('PUT', '/v1/destinations/overrides/google', {
            key: null,
            body: { connections: 1 },
          })
        ).status,
        401,
      );
      const noConnections = await app.request('PUT', '/v1/destinations/overrides/google', {
        ...operator,
        body: { connections: 0 },
      });
      assert.equal(noConnections.status, 422, JSON.stringify(noConnections.body));
      const badPattern = await app.request('PUT', '/v1/destinations/overrides/not%20a%20host', {
        ...operator,
        body: { per_minute: 5 },
      });
      assert.equal(badPattern.status, 422, JSON.stringify(badPattern.body));
      assert.equal(badPattern.body.error.param, 'pattern');

      const set = await app.request('PUT', '/v1/destinations/overrides/Google', {
        ...operator,
        body: { connections: 1, per_minute: 30 },
      });
      assert.equal(set.status, 200, JSON.stringify(set.body));
      assert.deepEqual(set.body, {
        object: 'destination_override',
        pattern: 'google',
        origin: 'api',
        connections: 1,
        messages_per_connection: null,
        per_minute: 30,
        per_hour: null,
        updated_at: '2026-03-02T10:00:00.000Z',
      });
      const listed = await app.request('GET', '/v1/destinations/overrides', operator);
      assert.equal(listed.status, 200);
      assert.deepEqual(
        listed.body.data.map((entry: any) => [entry.pattern, entry.origin, entry.connections]),
        [
          ['yahoo', 'settings', 2],
          ['google', 'api', 1],
        ],
      );

      // Every worker takes it up at its next read (at most a second later): one connection to Google now.
      nowMs += 1000;
      for (const worker of workers) {
        await worker.sync(nowMs);
        assert.equal(
          worker.shaping.of('default').startAt('google', nowMs, 1),
          Infinity,
          'a second connection waits',
        );
        assert.equal(worker.shaping.of('default').stateOf('google')?.rate, 30);
      }
      const destinations = await app.request('GET', '/v1/destinations', operator);
      const google = destinations.body.data.find((entry: any) => entry.key === 'google');
      assert.deepEqual(google.limits, {
        connections: 1,
        messages_per_connection: 50,
        per_minute: 30,
        per_hour: 20_000,
      });

      // Cleared: the table's limits again.
      const removed = await app.request('DELETE', '/v1/destinations/overrides/google', operator);
      assert.equal(removed.status, 200, JSON.stringify(removed.body));
      assert.deepEqual(removed.body, { object: 'destination_override', pattern: 'google', deleted: true });
      assert.equal((await app.request('DELETE', '/v1/destinations/overrides/google', operator)).status, 404);
      const after = await app.request('GET', '/v1/destinations', operator);
      assert.equal(after.body.data.find((entry: any) => entry.key === 'google').limits.connections, 5);
    });
  });
}
