import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// GET /v1/emails filters: status, a part of a recipient's address, a tag, and a time range, with cursors.

for (const engine of ALL_ENGINES) {
  describe(`email list filters (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    const ids: Record<string, string> = {};
    const listed = async (query: string) => {
      const response = await api.request('GET', `/v1/emails?${query}`);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      return response.body.data.map((email: { id: string }) => email.id);
    };

    before(async () => {
      api = await startTestApp(engine);
      const sends: Array<[string, unknown, Record<string, string>]> = [
        ['receipt', ['Ada@Example.org'], { kind: 'receipt' }],
        ['news', ['bob@example.net', 'ada_x@example.org'], { kind: 'news' }],
        ['later', ['eve@example.org'], { kind: 'receipt' }],
      ];
      for (const [name, to, tags] of sends) {
        const response = await api.request('POST', '/v1/emails', {
          body: {
            from: 'shop@example.com',
            to,
            subject: name,
            text: 'x',
            tags,
            ...(name === 'later' ? { scheduled_at: new Date(Date.now() + 3_600_000).toISOString() } : {}),
          },
        });
        assert.equal(response.status, 202);
        ids[name] = response.body.id;
      }
    });
    after(() => api.close());

    test('by status, recipient (part, any case, wildcards as text), tag and time, newest first', async () => {
      assert.deepEqual(await listed('status=scheduled'), [ids.later]);
      assert.deepEqual(await listed('recipient=ADA'), [ids.news, ids.receipt]);
      assert.deepEqual(await listed('recipient=ada_'), [ids.news], 'an underscore is not a wildcard');
      assert.deepEqual(await listed('recipient=%25'), [], 'nor is a percent sign');
      assert.deepEqual(await listed('tag=kind:receipt'), [ids.later, ids.receipt]);
      assert.deepEqual(await listed('tag=kind:receipt&recipient=eve'), [ids.later]);
      assert.deepEqual(
        await listed(`since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`),
        [],
      );
      assert.deepEqual(
        await listed(`until=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`),
        [ids.later, ids.news, ids.receipt],
      );
      // Cursors page through the filtered list.
      assert.deepEqual(await listed(`tag=kind:receipt&limit=1`), [ids.later]);
      assert.deepEqual(await listed(`tag=kind:receipt&limit=1&after=${ids.later}`), [ids.receipt]);
    });

    test('bad filters are a 422 naming the parameter', async () => {
      for (const [query, param] of [
        ['status=lost', 'status'],
        ['tag=kind', 'tag'],
        ['tag=kind:a%25', 'tag'],
        ['since=yesterday', 'since'],
        ['recipient=', 'recipient'],
      ]) {
        const response = await api.request('GET', `/v1/emails?${query}`);
        assert.equal(response.status, 422, query);
        assert.equal(response.body.error.param, param, query);
      }
    });
  });
}
