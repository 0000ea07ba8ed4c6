import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// The suppression list's API: add, read, list, remove; addresses match in any case; bad input stores nothing.

const entryShape = (entry: any) => ({
  object: 'suppression',
  id: entry.id,
  address: entry.address,
  reason: entry.reason,
  email_id: entry.email_id,
  detail: entry.detail,
  created_at: entry.created_at,
});

for (const engine of ALL_ENGINES) {
  describe(`suppression list (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    test('adds addresses by hand, answers every entry, and keeps an existing one as it was', async () => {
      const added = await api.request('POST', '/v1/suppressions', {
        body: { addresses: ['Ada@Example.org', 'bob@example.org', 'ADA@example.org'] },
      });
      assert.equal(added.status, 201);
      assert.equal(added.body.object, 'list');
      assert.equal(added.body.has_more, false);
      assert.deepEqual(
        added.body.data.map((entry: any) => [entry.address, entry.reason, entry.email_id, entry.detail]),
        [
          ['ada@example.org', 'manual', null, null],
          ['bob@example.org', 'manual', null, null],
        ],
      );
      for (const entry of added.body.data) {
        assert.deepEqual(entry, entryShape(entry));
        assert.match(entry.id, /^sup_/);
        assert.match(entry.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      }
      const again = await api.request('POST', '/v1/suppressions', {
        body: { addresses: ['ada@example.org'] },
      });
      assert.deepEqual(again.body.data, [added.body.data[0]], 'the first entry stays');
    });

    test('reads one entry in any case, lists newest first with cursors and a reason filter', async () => {
      const one = await api.request('GET', '/v1/suppressions/BOB@EXAMPLE.ORG');
      assert.equal(one.status, 200);
      assert.equal(one.body.address, 'bob@example.org');

      await api.request('POST', '/v1/suppressions', { body: { addresses: ['carol@example.org'] } });
      const all = await api.request('GET', '/v1/suppressions');
      assert.deepEqual(
        all.body.data.map((entry: any) => entry.address),
        ['carol@example.org', 'bob@example.org', 'ada@example.org'],
      );
      const first = await api.request('GET', '/v1/suppressions?limit=1');
      assert.equal(first.body.has_more, true);
      const next = await api.request('GET', `/v1/suppressions?limit=1&after=${first.body.data[0].id}`);
      assert.equal(next.body.data[0].address, 'bob@example.org');
      const manual = await api.request('GET', '/v1/suppressions?reason=manual');
      assert.equal(manual.body.data.length, 3);
      const bounced = await api.request('GET', '/v1/suppressions?reason=hard_bounce');
      assert.deepEqual(bounced.body.data, []);
    });

    test('removes an entry; a second removal, or an address never listed, is 404', async () => {
      const removed = await api.request('DELETE', '/v1/suppressions/Carol@example.org');
      assert.equal(removed.status, 200);
      assert.deepEqual(removed.body, { object: 'suppression', address: 'carol@example.org', deleted: true });
      for (const path of ['/v1/suppressions/carol@example.org', '/v1/suppressions/nobody@example.org']) {
        for (const method of ['GET', 'DELETE']) {
          const missing = await api.request(method, path);
          assert.equal(missing.status, 404, `${method} ${path}`);
          assert.equal(missing.body.error.code, 'resource_missing');
          assert.equal(missing.body.error.param, 'address');
        }
      }
    });

    test("another project's entries are its own", async () => {
      const other = await api.createProject();
      assert.equal(
        (await api.request('GET', '/v1/suppressions/ada@example.org', { key: other.key })).status,
        404,
      );
      const list = await api.request('GET', '/v1/suppressions', { key: other.key });
      assert.deepEqual(list.body.data, []);
      assert.equal(
        (await api.request('DELETE', '/v1/suppressions/ada@example.org', { key: other.key })).status,
        404,
      );
      assert.equal((await api.request('GET', '/v1/suppressions/ada@example.org')).status, 200, 'still ours');
    });

    const refusals: Array<[string, unknown, string, string | undefined]> = [
      ['no addresses', {}, 'parameter_missing', 'addresses'],
      ['empty list', { addresses: [] }, 'parameter_invalid', 'addresses'],
      [
        '1,001 addresses',
        { addresses: Array.from({ length: 1001 }, (_, i) => `u${i}@example.org`) },
        'parameter_invalid',
        'addresses',
      ],
      [
        'not an address',
        { addresses: ['ok@example.org', 'not-an-address'] },
        'invalid_address',
        'addresses[1]',
      ],
      [
        'an address with a name',
        { addresses: ['Ada <ada2@example.org>'] },
        'invalid_address',
        'addresses[0]',
      ],
      ['unknown field', { addresses: ['x@example.org'], reason: 'complaint' }, 'parameter_unknown', 'reason'],
    ];
    for (const [name, body, code, param] of refusals) {
      test(`refuses ${name} with 422 and stores nothing`, async () => {
        const before = (await api.request('GET', '/v1/suppressions')).body.data.length;
        const response = await api.request('POST', '/v1/suppressions', { body });
        assert.equal(response.status, 422, JSON.stringify(response.body));
        assert.equal(response.body.error.code, code);
        assert.equal(response.body.error.param, param);
        assert.equal((await api.request('GET', '/v1/suppressions')).body.data.length, before);
      });
    }

    test('a list filter that is not a reason is 422', async () => {
      const response = await api.request('GET', '/v1/suppressions?reason=bored');
      assert.equal(response.status, 422);
      assert.equal(response.body.error.param, 'reason');
    });
  });
}
