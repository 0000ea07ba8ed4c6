import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { instantOf } from '../src/lib/clock.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// Every time filter of the API (`since`, `until`) takes an ISO 8601 date-time or a plain date, which means
// 00:00:00Z of that day; anything else is a 422 naming the parameter, on every list and action that has one.

const DAY = 86_400_000;
const dateOf = (time: number) => new Date(time).toISOString().slice(0, 10);

test('instantOf: a plain date is 00:00:00Z of that day; a date-time is itself', () => {
  assert.equal(instantOf('2026-11-20').toISOString(), '2026-11-20T00:00:00.000Z');
  assert.equal(instantOf('2026-11-20T09:30:00Z').toISOString(), '2026-11-20T09:30:00.000Z');
  assert.equal(instantOf('2026-11-20T09:30:00+02:00').toISOString(), '2026-11-20T07:30:00.000Z');
});

for (const engine of ALL_ENGINES) {
  describe(`time filters (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let emailId: string;
    let webhookId: string;
    const today = dateOf(Date.now());
    const tomorrow = dateOf(Date.now() + DAY);

    before(async () => {
      api = await startTestApp(engine);
      const sent = await api.request('POST', '/v1/emails', {
        body: { from: 'shop@example.com', to: 'ada@example.org', subject: 'hi', text: 'x' },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      emailId = sent.body.id;
      const webhook = await api.request('POST', '/v1/webhooks', {
        body: { url: 'https://example.com/hooks', events: ['email.sent'] },
      });
      assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
      webhookId = webhook.body.data.id;
    });
    after(() => api.close());

    test('GET /v1/emails: since and until take a plain date (00:00:00Z of that day)', async () => {
      const ids = async (query: string) => {
        const response = await api.request('GET', `/v1/emails?${query}`);
        assert.equal(response.status, 200, JSON.stringify(response.body));
        return response.body.data.map((email: { id: string }) => email.id);
      };
      assert.deepEqual(await ids(`since=${today}`), [emailId]);
      assert.deepEqual(await ids(`since=${tomorrow}`), []);
      assert.deepEqual(await ids(`until=${tomorrow}`), [emailId]);
      assert.deepEqual(await ids(`until=${today}`), []);
      assert.deepEqual(await ids(`since=${today}&until=${tomorrow}`), [emailId]);
      // The date-time form still works.
      assert.deepEqual(await ids(`since=${today}T00:00:00Z&until=${tomorrow}T00:00:00.000Z`), [emailId]);
    });

    test('GET /v1/received-emails: since and until take a plain date', async () => {
      const response = await api.request('GET', `/v1/received-emails?since=${today}&until=${tomorrow}`);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      assert.deepEqual(response.body.data, []);
    });

    test('GET /v1/stats: since and until take a plain date or a date-time (its day)', async () => {
      const response = await api.request('GET', `/v1/stats?since=${today}&until=${tomorrow}T12:00:00Z`);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      assert.equal(response.body.since, today);
      assert.equal(response.body.until, tomorrow);
    });

    test('POST /v1/webhooks/{id}/recover: since takes a plain date', async () => {
      const response = await api.request('POST', `/v1/webhooks/${webhookId}/recover`, {
        body: { since: today },
      });
      assert.equal(response.status, 200, JSON.stringify(response.body));
      assert.equal(response.body.since, `${today}T00:00:00.000Z`);
    });

    test('a value that is neither a date-time nor a date is a 422 naming the parameter', async () => {
      const forms = 'must be an ISO 8601 date-time (2026-11-20T09:30:00Z) or a date (2026-11-20).';
      for (const path of ['/v1/emails', '/v1/received-emails', '/v1/stats']) {
        for (const param of ['since', 'until']) {
          for (const value of ['yesterday', '2026-13-01', '2026-11-31', '20261120', '2026-11-20T25:00:00Z']) {
            const response = await api.request('GET', `${path}?${param}=${value}`);
            assert.equal(response.status, 422, `${path} ${param}=${value}`);
            assert.deepEqual(
              { ...response.body.error, request_id: undefined },
              {
                code: 'parameter_invalid',
                message: `The query parameter '${param}' ${forms}`,
                param,
                request_id: undefined,
              },
              `${path} ${param}=${value}`,
            );
          }
        }
      }
      const recover = await api.request('POST', `/v1/webhooks/${webhookId}/recover`, {
        body: { since: 'last week' },
      });
      assert.equal(recover.status, 422);
      assert.equal(recover.body.error.param, 'since');
      assert.equal(recover.body.error.message, `The field 'since' ${forms}`);
    });

    test('the OpenAPI document says both forms, once per filter', async () => {
      const document = (await api.request('GET', '/v1/openapi.json', { key: null })).body;
      const filters = [
        ...['/v1/emails', '/v1/received-emails', '/v1/stats'].flatMap((path) =>
          document.paths[path].get.parameters.filter((p: { name: string }) =>
            ['since', 'until'].includes(p.name),
          ),
        ),
      ];
      assert.equal(filters.length, 6);
      for (const filter of filters) {
        assert.match(
          filter.description ?? filter.schema.description,
          /plain date \(`2026-11-20`\), which means 00:00:00Z/,
        );
      }
    });
  });
}
