import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestApp, type TestApp } from './helpers/app.ts';

// A 422 for a value that breaks the schema says, in words, what the field must be — an enum or a union of
// constants names every allowed value — and `param` is the field's path. One formatter
// (src/http/error-handler.ts) writes these for every route; here are several routes' bodies, exactly.

describe('validation error messages', () => {
  let api: TestApp;
  let webhookId: string;
  const send = { from: 'shop@example.com', to: 'ada@example.org', subject: 'Hi', text: 'x' };

  before(async () => {
    api = await startTestApp('sqlite');
    const webhook = await api.request('POST', '/v1/webhooks', {
      body: { url: 'https://example.com/hooks', events: ['email.sent'] },
    });
    webhookId = webhook.body.data.id;
  });
  after(() => api.close());

  const refused = async (
    method: string,
    path: string,
    body: unknown,
    expected: { code: string; message: string; param?: string },
  ) => {
    const response = await api.request(method, path, body === undefined ? {} : { body });
    assert.equal(response.status, 422, `${method} ${path}: ${JSON.stringify(response.body)}`);
    assert.deepEqual(response.body, {
      error: { ...expected, request_id: response.headers.get('x-request-id') },
    });
  };

  test('an enum names its allowed values (query strings and bodies, unions of constants and enums)', async () => {
    await refused('GET', '/v1/emails?status=done', undefined, {
      code: 'parameter_invalid',
      message:
        "The query parameter 'status' must be one of: scheduled, queued, delayed, sent, delivered, bounced, failed, complained, cancelled, suppressed, mixed.",
      param: 'status',
    });
    await refused('GET', '/v1/suppressions?reason=spam', undefined, {
      code: 'parameter_invalid',
      message: "The query parameter 'reason' must be one of: hard_bounce, complaint, unsubscribe, manual.",
      param: 'reason',
    });
    await refused('GET', `/v1/webhooks/${webhookId}/deliveries?status=done`, undefined, {
      code: 'parameter_invalid',
      message: "The query parameter 'status' must be one of: pending, succeeded, failed.",
      param: 'status',
    });
    await refused(
      'POST',
      '/v1/webhooks',
      { url: 'https://example.com/h', events: ['email.sent', 'email.read'] },
      {
        code: 'parameter_invalid',
        message:
          "The field 'events[1]' must be one of: email.sent, email.delivered, email.delivery_delayed, email.bounced, email.failed, email.complained, email.suppressed, email.opened, email.clicked, email.unsubscribed, email.received, domain.verified, domain.failed, project.warning, project.sending_paused, project.sending_resumed, contact.created, contact.updated, contact.deleted, contact.topics_updated, broadcast.sent, destination.suspended, destination.resumed.",
        param: 'events[1]',
      },
    );
  });

  test('required, unknown, type, nullable, empty, too long, too few, pattern and format in words', async () => {
    await refused(
      'POST',
      '/v1/emails',
      { from: send.from, subject: 'Hi', text: 'x' },
      {
        code: 'parameter_missing',
        message: "The field 'to' is required.",
        param: 'to',
      },
    );
    await refused(
      'POST',
      '/v1/emails',
      { ...send, tags: [{ name: 'kind' }] },
      {
        code: 'parameter_missing',
        message: "The field 'tags[0].value' is required.",
        param: 'tags[0].value',
      },
    );
    await refused(
      'POST',
      '/v1/domains',
      { name: 'example.com', region: 'eu' },
      {
        code: 'parameter_unknown',
        message: "Unknown field 'region'.",
        param: 'region',
      },
    );
    await refused(
      'POST',
      '/v1/emails',
      { ...send, tracking: { opens: 'yes' } },
      {
        code: 'parameter_invalid',
        message: "The field 'tracking.opens' must be a boolean (true or false).",
        param: 'tracking.opens',
      },
    );
    await refused(
      'PATCH',
      `/v1/webhooks/${webhookId}`,
      { secret: 5 },
      {
        code: 'parameter_invalid',
        message: "The field 'secret' must be a string or null.",
        param: 'secret',
      },
    );
    await refused(
      'POST',
      '/v1/emails',
      { ...send, subject: '' },
      {
        code: 'parameter_invalid',
        message: "The field 'subject' must not be empty.",
        param: 'subject',
      },
    );
    await refused(
      'POST',
      '/v1/suppressions',
      { addresses: [] },
      {
        code: 'parameter_invalid',
        message: "The field 'addresses' must have at least 1 item.",
        param: 'addresses',
      },
    );
    await refused(
      'POST',
      '/v1/emails',
      { ...send, to: `${'a'.repeat(320)}@example.org` },
      {
        code: 'parameter_invalid',
        message: "The field 'to' must be at most 320 characters long.",
        param: 'to',
      },
    );
    await refused(
      'POST',
      '/v1/emails',
      { ...send, to: 5 },
      {
        code: 'parameter_invalid',
        message: "The field 'to' must be an array or a string.",
        param: 'to',
      },
    );
    await refused('GET', '/v1/emails?tag=kind', undefined, {
      code: 'parameter_invalid',
      message:
        "The query parameter 'tag' must match the pattern ^[A-Za-z0-9_-]{1,256}:[A-Za-z0-9_-]{1,256}$.",
      param: 'tag',
    });
    await refused(
      'POST',
      '/v1/emails',
      { ...send, scheduled_at: 'tomorrow' },
      {
        code: 'parameter_invalid',
        message: "The field 'scheduled_at' must be an ISO 8601 date-time (2026-11-20T09:30:00Z).",
        param: 'scheduled_at',
      },
    );
    await refused('GET', '/v1/webhooks?limit=0', undefined, {
      code: 'parameter_invalid',
      message: "The query parameter 'limit' must be at least 1.",
      param: 'limit',
    });
    await refused('GET', '/v1/webhooks?limit=many', undefined, {
      code: 'parameter_invalid',
      message: "The query parameter 'limit' must be an integer.",
      param: 'limit',
    });
    await refused('POST', '/v1/emails', [send], {
      code: 'parameter_invalid',
      message: 'The request body must be a JSON object.',
    });
  });

  test('no message carries the validator’s own wording', async () => {
    const cases: Array<[string, string, unknown]> = [
      ['GET', '/v1/events?type=email.read', undefined],
      ['POST', '/v1/emails', { ...send, to: [] }],
      ['POST', '/v1/templates', { name: 'x', variables: [5] }],
      ['POST', '/v1/emails', { ...send, attachments: [{ filename: 'a.txt' }] }],
    ];
    for (const [method, path, body] of cases) {
      const response = await api.request(method, path, body === undefined ? {} : { body });
      assert.equal(response.status, 422);
      assert.doesNotMatch(
        response.body.error.message,
        /must be equal to|must NOT|must match format|must be (string|integer|boolean|array|object)\b|allowed values/,
        response.body.error.message,
      );
      assert.ok(response.body.error.param, JSON.stringify(response.body));
    }
  });
});
