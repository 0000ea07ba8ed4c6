import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError as assertError, created as createdIn, idsOf as ids } from './helpers/answers.ts';

// Segments under /v1: named lists of contacts (exact bodies, membership by contact id or email, the contacts
// list filtered by segment), bad input refused with nothing stored (test/topics.test.ts: topics; test/
// audience-access.test.ts: projects, keys, events).

const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

for (const engine of ALL_ENGINES) {
  describe(`segments (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    const created = (path: string, body: unknown) => createdIn(api, path, body);

    test('create, get, list, rename, delete: exact bodies', async () => {
      const beta = await created('/v1/segments', { name: 'Beta testers' });
      assert.match(beta.id, /^seg_[0-9a-z]{26}$/);
      assert.match(beta.created_at, TIME);
      assert.deepEqual(beta, {
        object: 'segment',
        id: beta.id,
        name: 'Beta testers',
        filter: null,
        created_at: beta.created_at,
        updated_at: beta.created_at,
      });
      const vip = await created('/v1/segments', { name: 'VIP' });
      assert.deepEqual((await api.request('GET', `/v1/segments/${beta.id}`)).body, beta);
      const listed = await api.request('GET', '/v1/segments?limit=1');
      assert.deepEqual(listed.body, { object: 'list', data: [vip], has_more: true });
      const next = await api.request('GET', `/v1/segments?limit=1&after=${vip.id}`);
      assert.deepEqual(next.body, { object: 'list', data: [beta], has_more: false });

      const renamed = await api.request('PATCH', `/v1/segments/${vip.id}`, { body: { name: 'VIPs' } });
      assert.equal(renamed.status, 200);
      assert.deepEqual(renamed.body, { ...vip, name: 'VIPs', updated_at: renamed.body.updated_at });
      assert.ok(renamed.body.updated_at > vip.updated_at);

      const deleted = await api.request('DELETE', `/v1/segments/${vip.id}`);
      assert.deepEqual(deleted.body, { object: 'segment', id: vip.id, deleted: true });
      assertError(
        await api.request('GET', `/v1/segments/${vip.id}`),
        404,
        'resource_missing',
        `No segment with id '${vip.id}'.`,
        'id',
      );
      assertError(
        await api.request('DELETE', `/v1/segments/${vip.id}`),
        404,
        'resource_missing',
        `No segment with id '${vip.id}'.`,
        'id',
      );
      assertError(
        await api.request('GET', '/v1/segments/nope'),
        404,
        'resource_missing',
        "No segment with id 'nope'.",
        'id',
      );
    });

    test('bad input is a 4xx with nothing stored', async () => {
      const segment = await created('/v1/segments', { name: 'Kept' });
      const before = await api.rowCounts();
      for (const body of [
        {},
        { name: '' },
        { name: 'x'.repeat(201) },
        { name: 'a', extra: 1 },
        { name: 3 },
      ]) {
        const response = await api.request('POST', '/v1/segments', { body });
        assert.equal(response.status, 422, JSON.stringify(body));
        assert.match(response.body.error.code, /^parameter_/);
      }
      const rename = await api.request('PATCH', `/v1/segments/${segment.id}`, { body: { name: '' } });
      assert.equal(rename.status, 422);
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
      assert.equal((await api.request('GET', `/v1/segments/${segment.id}`)).body.name, 'Kept');
    });

    test('contacts added and removed by id or email; the contacts list filtered by segment', async () => {
      const segment = await created('/v1/segments', { name: 'Readers' });
      const other = await created('/v1/segments', { name: 'Others' });
      const ada = await created('/v1/contacts', { email: 'ada@example.org' });
      const bob = await created('/v1/contacts', { email: 'bob@example.org' });
      await created('/v1/contacts', { email: 'cy@example.org' });

      const added = await api.request('POST', `/v1/contacts/${ada.id}/segments/${segment.id}`);
      assert.equal(added.status, 200);
      assert.deepEqual(added.body, {
        object: 'segment_membership',
        segment_id: segment.id,
        contact_id: ada.id,
        added: true,
      });
      const again = await api.request('POST', `/v1/contacts/ADA@example.org/segments/${segment.id}`);
      assert.deepEqual(again.body, { ...added.body, added: false }, 'added once');
      await api.request('POST', `/v1/contacts/bob@example.org/segments/${segment.id}`);
      await api.request('POST', `/v1/contacts/bob@example.org/segments/${other.id}`);

      const members = await api.request('GET', `/v1/contacts?segment_id=${segment.id}`);
      assert.deepEqual(members.body, {
        object: 'list',
        data: [bob, ada].map((contact) => ({ ...contact })),
        has_more: false,
      });
      assert.deepEqual((await api.request('GET', `/v1/segments/${segment.id}/contacts`)).body, members.body);
      const both = await api.request('GET', `/v1/contacts?segment_id=${other.id}&email_prefix=bob`);
      assert.deepEqual(ids(both), [bob.id]);
      assert.deepEqual(ids(await api.request('GET', `/v1/contacts/${bob.id}/segments`)), [
        other.id,
        segment.id,
      ]);
      assert.deepEqual(ids(await api.request('GET', '/v1/contacts/cy@example.org/segments')), []);

      const removed = await api.request('DELETE', `/v1/contacts/bob@example.org/segments/${segment.id}`);
      assert.deepEqual(removed.body, {
        object: 'segment_membership',
        segment_id: segment.id,
        contact_id: bob.id,
        deleted: true,
      });
      assertError(
        await api.request('DELETE', `/v1/contacts/${bob.id}/segments/${segment.id}`),
        404,
        'resource_missing',
        `The contact 'bob@example.org' is not in the segment '${segment.id}'.`,
        'segment_id',
      );
      assert.deepEqual(ids(await api.request('GET', `/v1/contacts?segment_id=${segment.id}`)), [ada.id]);

      // A contact's delete takes it out of its segments; a segment's delete leaves its contacts.
      await api.request('DELETE', `/v1/contacts/${ada.id}`);
      assert.deepEqual(ids(await api.request('GET', `/v1/segments/${segment.id}/contacts`)), []);
      await api.request('DELETE', `/v1/segments/${other.id}`);
      assert.equal((await api.request('GET', `/v1/contacts/${bob.id}`)).status, 200);
      assert.deepEqual(ids(await api.request('GET', `/v1/contacts/${bob.id}/segments`)), []);
    });

    test('a missing contact or segment is a 404, with nothing stored', async () => {
      const segment = await created('/v1/segments', { name: 'Empty' });
      await created('/v1/contacts', { email: 'dee@example.org' });
      const before = await api.rowCounts();
      assertError(
        await api.request('POST', `/v1/contacts/nobody@example.org/segments/${segment.id}`),
        404,
        'resource_missing',
        "No contact with id 'nobody@example.org'.",
        'id',
      );
      assertError(
        await api.request('POST', '/v1/contacts/dee@example.org/segments/seg_nope'),
        404,
        'resource_missing',
        "No segment with id 'seg_nope'.",
        'id',
      );
      assertError(
        await api.request('GET', '/v1/contacts?segment_id=seg_nope'),
        404,
        'resource_missing',
        "No segment with id 'seg_nope'.",
        'id',
      );
      assertError(
        await api.request('GET', '/v1/segments/seg_nope/contacts'),
        404,
        'resource_missing',
        "No segment with id 'seg_nope'.",
        'id',
      );
      assertError(
        await api.request('GET', '/v1/contacts/nobody@example.org/segments'),
        404,
        'resource_missing',
        "No contact with id 'nobody@example.org'.",
        'id',
      );
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
    });
  });
}
