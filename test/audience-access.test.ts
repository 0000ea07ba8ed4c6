import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { created as createdIn } from './helpers/answers.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';

// Who may see and change segments and topics: tenants apart, scoped keys; and contact.topics_updated reaching
// a webhook, only when a subscription changed.

for (const engine of ALL_ENGINES) {
  describe(`segments and topics: projects, keys and events (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let receiver: Receiver;
    let segment: any;
    let topic: any;
    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true, worker: true });
      receiver = await startReceiver();
      segment = await created('/v1/segments', { name: 'Mine' });
      topic = await created('/v1/topics', { name: 'News', default_subscription: 'opt_in' });
      await created('/v1/contacts', { email: 'ada@example.org' });
    });
    after(async () => {
      await api.close();
      await receiver.close();
    });

    const created = (path: string, body: unknown, key?: string) => createdIn(api, path, body, key);

    test("another project's segments and topics are 404 and never listed", async () => {
      const other = await api.createProject('other');
      const theirSegment = await created('/v1/segments', { name: 'Theirs' }, other.key);
      const theirTopic = await created(
        '/v1/topics',
        { name: 'Theirs', default_subscription: 'opt_in' },
        other.key,
      );
      const before = await api.rowCounts();
      for (const [method, path, body] of [
        ['GET', `/v1/segments/${theirSegment.id}`],
        ['PATCH', `/v1/segments/${theirSegment.id}`, { name: 'x' }],
        ['DELETE', `/v1/segments/${theirSegment.id}`],
        ['GET', `/v1/segments/${theirSegment.id}/contacts`],
        ['GET', `/v1/contacts?segment_id=${theirSegment.id}`],
        ['POST', `/v1/contacts/ada@example.org/segments/${theirSegment.id}`],
        ['GET', `/v1/topics/${theirTopic.id}`],
        ['PATCH', `/v1/topics/${theirTopic.id}`, { name: 'x' }],
        ['DELETE', `/v1/topics/${theirTopic.id}`],
        ['GET', `/v1/contacts?topic_id=${theirTopic.id}`],
        [
          'PATCH',
          '/v1/contacts/ada@example.org/topics',
          { topics: [{ id: theirTopic.id, subscription: 'opt_out' }] },
        ],
      ] as const) {
        const response = await api.request(method, path, body ? { body } : {});
        assert.equal(response.status, 404, `${method} ${path}: ${JSON.stringify(response.body)}`);
      }
      // Nor may they reach this project's contact through their own segment.
      const reach = await api.request('POST', `/v1/contacts/ada@example.org/segments/${segment.id}`, {
        key: other.key,
      });
      assert.equal(reach.status, 404);
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
      const segments = await api.request('GET', '/v1/segments', { key: other.key });
      assert.deepEqual(
        segments.body.data.map((each: any) => each.id),
        [theirSegment.id],
      );
      const topics = await api.request('GET', '/v1/topics', { key: other.key });
      assert.deepEqual(
        topics.body.data.map((each: any) => each.id),
        [theirTopic.id],
      );
    });

    test('scoped keys: read_only reads, sending_access neither reads nor writes', async () => {
      const key = async (permission: string) =>
        (await api.request('POST', '/v1/api-keys', { body: { name: permission, permission } })).body.token;
      const readOnly = await key('read_only');
      const sending = await key('sending_access');
      const reads = [
        '/v1/segments',
        `/v1/segments/${segment.id}`,
        `/v1/segments/${segment.id}/contacts`,
        '/v1/contacts/ada@example.org/segments',
        '/v1/topics',
        `/v1/topics/${topic.id}`,
        '/v1/contacts/ada@example.org/topics',
      ];
      for (const path of reads) {
        assert.equal((await api.request('GET', path, { key: readOnly })).status, 200, path);
        assert.equal((await api.request('GET', path, { key: sending })).status, 403, path);
      }
      const before = await api.rowCounts();
      for (const token of [readOnly, sending]) {
        for (const [method, path, body] of [
          ['POST', '/v1/segments', { name: 'z' }],
          ['PATCH', `/v1/segments/${segment.id}`, { name: 'z' }],
          ['DELETE', `/v1/segments/${segment.id}`],
          ['POST', `/v1/contacts/ada@example.org/segments/${segment.id}`],
          ['DELETE', `/v1/contacts/ada@example.org/segments/${segment.id}`],
          ['POST', '/v1/topics', { name: 'z', default_subscription: 'opt_in' }],
          ['PATCH', `/v1/topics/${topic.id}`, { name: 'z' }],
          ['DELETE', `/v1/topics/${topic.id}`],
          [
            'PATCH',
            '/v1/contacts/ada@example.org/topics',
            { topics: [{ id: topic.id, subscription: 'opt_out' }] },
          ],
        ] as const) {
          const response = await api.request(method, path, { key: token, ...(body ? { body } : {}) });
          assert.equal(response.status, 403, `${method} ${path}`);
          assert.equal(response.body.error.code, 'insufficient_permission');
        }
      }
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
    });

    test('contact.topics_updated reaches a webhook with what changed, and only when something did', async () => {
      const webhook = await api.request('POST', '/v1/webhooks', {
        body: { url: receiver.url, events: ['contact.topics_updated'] },
      });
      assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
      const beta = await created('/v1/topics', { name: 'Beta', default_subscription: 'opt_out' });
      const bea = await created('/v1/contacts', { email: 'bea@example.org' });
      const choose = async (topics: unknown) => {
        const response = await api.request('PATCH', `/v1/contacts/${bea.id}/topics`, { body: { topics } });
        assert.equal(response.status, 200, JSON.stringify(response.body));
      };
      // The default made explicit changes nothing: no event.
      await choose([{ id: topic.id, subscription: 'opt_in' }]);
      await choose([
        { id: topic.id, subscription: 'opt_out' },
        { id: beta.id, subscription: 'opt_out' },
      ]);
      await choose([{ id: beta.id, subscription: 'opt_in' }]);
      const requests = await receiver.waitFor(2);
      const bodies = requests
        .map((request) => JSON.parse(request.body))
        .sort((a, b) => (a.id < b.id ? -1 : 1));
      assert.deepEqual(
        bodies.map((body) => [body.type, body.data]),
        [
          [
            'contact.topics_updated',
            {
              id: bea.id,
              email: 'bea@example.org',
              topics: [{ id: topic.id, subscription: 'opt_out', previous_subscription: 'opt_in' }],
            },
          ],
          [
            'contact.topics_updated',
            {
              id: bea.id,
              email: 'bea@example.org',
              topics: [{ id: beta.id, subscription: 'opt_in', previous_subscription: 'opt_out' }],
            },
          ],
        ],
      );
      const events = await api.request('GET', '/v1/events?type=contact.topics_updated');
      assert.equal(events.body.data.length, 2, 'two events, not three');
    });

    test('contact.updated and contact.deleted name the segments the contact is in (was in)', async () => {
      const hooks = await startReceiver();
      try {
        const webhook = await api.request('POST', '/v1/webhooks', {
          body: { url: hooks.url, events: ['contact.updated', 'contact.deleted'] },
        });
        assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
        const other = await created('/v1/segments', { name: 'Other' });
        const cal = await created('/v1/contacts', { email: 'cal@example.org' });
        for (const id of [segment.id, other.id]) {
          const added = await api.request('POST', `/v1/contacts/${cal.id}/segments/${id}`);
          assert.equal(added.status, 200);
        }
        await api.request('PATCH', `/v1/contacts/${cal.id}`, { body: { first_name: 'Cal' } });
        await api.request('DELETE', `/v1/contacts/${cal.id}`);
        const bodies = (await hooks.waitFor(2))
          .map((request) => JSON.parse(request.body))
          .sort((a, b) => (a.id < b.id ? -1 : 1));
        const both = [segment.id, other.id].sort();
        assert.deepEqual(
          bodies.map((body) => [body.type, body.data.segment_ids]),
          [
            ['contact.updated', both],
            ['contact.deleted', both],
          ],
        );
      } finally {
        await hooks.close();
      }
    });
  });
}
