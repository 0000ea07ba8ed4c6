import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createDns } from '../src/lib/dns.ts';
import { startTestApp, type ApiResponse, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';

// Every POST whose body may be left out (an action: cancel, verify, rotate, publish, render, test,
// redeliver, recover) takes no body, an empty body labelled JSON (zero bytes, as SDKs that set
// content-type on every request send it) and `{}` as the same request. One rule (installOptionalBodies in
// src/http/validation.ts), not one per route.

const VARIANTS = {
  'no body': {},
  'empty body labelled JSON': { rawBody: '', headers: { 'content-type': 'application/json' } },
  '{}': { body: {} },
} as const;

describe('actions take no body, an empty JSON body and {} alike', () => {
  let api: TestApp;
  let dns: TestDnsServer;
  let sequence = 0;

  before(async () => {
    dns = await startDnsServer();
    api = await startTestApp('sqlite', { dns: createDns({ servers: [dns.address] }) });
  });
  after(async () => {
    await api.close();
    await dns.close();
  });

  const ok = async (response: Promise<ApiResponse>, status = 201) => {
    const answer = await response;
    assert.equal(answer.status, status, JSON.stringify(answer.body));
    return answer.body;
  };
  const scheduledEmail = async () =>
    (
      await ok(
        api.request('POST', '/v1/emails', {
          body: {
            from: 'shop@example.com',
            to: 'ada@example.org',
            subject: 'Later',
            text: 'x',
            scheduled_at: new Date(Date.now() + 3_600_000).toISOString(),
          },
        }),
        202,
      )
    ).id;
  const domain = async () =>
    (await ok(api.request('POST', '/v1/domains', { body: { name: `d${++sequence}.example` } }))).id;
  const template = async () =>
    (
      await ok(
        api.request('POST', '/v1/templates', {
          body: { name: `t${++sequence}`, subject: 'Hi {{ name }}', html: '<p>Hi {{ name }}</p>' },
        }),
      )
    ).id;
  const webhook = async (enabled: boolean) =>
    (
      await ok(
        api.request('POST', '/v1/webhooks', {
          body: { url: 'https://example.com/hooks', events: ['email.sent'], enabled },
        }),
      )
    ).data.id;

  // Each action, on a fresh resource per variant, and what of its answer must be the same.
  const actions: Array<[string, () => Promise<string>, (body: any) => unknown]> = [
    ['cancel an email', async () => `/v1/emails/${await scheduledEmail()}/cancel`, (body) => body.status],
    [
      'verify a domain',
      async () => `/v1/domains/${await domain()}/verify`,
      (body) => [body.object, body.status],
    ],
    [
      'rotate a DKIM key',
      async () => `/v1/domains/${await domain()}/dkim/rotate`,
      (body) => body.error?.code ?? body.object,
    ],
    [
      'publish a template',
      async () => `/v1/templates/${await template()}/publish`,
      (body) => [body.object, body.version],
    ],
    [
      'render a template',
      async () => `/v1/templates/${await template()}/render`,
      (body) => [body.subject, body.html],
    ],
    // A disabled webhook refuses a test after the body was read and validated: 409, not 400 or 422.
    ['test a webhook', async () => `/v1/webhooks/${await webhook(false)}/test`, (body) => body.error.code],
    [
      'redeliver an event',
      async () => {
        const event = await api.events.emit(api.projectId, 'email.sent', { email_id: 'msg_1' });
        return `/v1/events/${event.id}/redeliver`;
      },
      (body) => [body.object, body.webhooks ?? body.deliveries ?? null],
    ],
    // recover requires `since`: every variant is the same 422 naming it.
    ['recover a webhook', async () => `/v1/webhooks/${await webhook(true)}/recover`, (body) => body.error],
  ];

  for (const [name, target, outcome] of actions) {
    test(name, async () => {
      const answers: Array<[string, number, unknown]> = [];
      for (const [variant, options] of Object.entries(VARIANTS)) {
        const response = await api.request('POST', await target(), options);
        assert.notEqual(response.status, 400, `${variant}: ${JSON.stringify(response.body)}`);
        assert.notEqual(response.status, 415, `${variant}: ${JSON.stringify(response.body)}`);
        const body = response.body.error
          ? { ...response.body, error: { ...response.body.error, request_id: undefined } }
          : response.body;
        answers.push([variant, response.status, outcome(body)]);
      }
      const [first] = answers;
      for (const answer of answers) {
        assert.deepEqual(answer.slice(1), first!.slice(1), `${answer[0]} vs ${first![0]}`);
      }
    });
  }

  test('recover without a body reports since missing, by name', async () => {
    const response = await api.request('POST', `/v1/webhooks/${await webhook(true)}/recover`, {
      rawBody: '',
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(response.status, 422);
    assert.equal(response.body.error.code, 'parameter_missing');
    assert.equal(response.body.error.param, 'since');
  });

  test('a route that needs a body still refuses an empty one labelled JSON as malformed (400)', async () => {
    const response = await api.request('POST', '/v1/webhooks', {
      rawBody: '',
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(response.status, 400);
    assert.equal(response.body.error.code, 'invalid_json');
  });

  test('the OpenAPI document marks those bodies optional', async () => {
    const document = (await api.request('GET', '/v1/openapi.json', { key: null })).body;
    for (const path of [
      '/v1/templates/{id}/publish',
      '/v1/templates/{id}/render',
      '/v1/webhooks/{webhook_id}/test',
      '/v1/events/{id}/redeliver',
    ]) {
      assert.equal(document.paths[path].post.requestBody.required, false, path);
    }
    for (const path of ['/v1/emails', '/v1/webhooks', '/v1/templates', '/v1/webhooks/{webhook_id}/recover']) {
      assert.equal(document.paths[path].post.requestBody.required, true, path);
    }
  });
});
