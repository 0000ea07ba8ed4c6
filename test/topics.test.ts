import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError as assertError, created as createdIn, idsOf as ids } from './helpers/answers.ts';

// Topics under /v1: what contacts subscribe to (exact bodies), each contact's subscription (its own choice, or
// the topic's default), the contacts list filtered by topic, bad input refused with nothing stored.

const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

for (const engine of ALL_ENGINES) {
  describe(`topics (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    const created = (path: string, body: unknown) => createdIn(api, path, body);

    test('create, get, list, update, delete: exact bodies; the default stays as created', async () => {
      const news = await created('/v1/topics', {
        name: 'Product updates',
        description: 'What shipped this month',
        default_subscription: 'opt_in',
      });
      assert.match(news.id, /^top_[0-9a-z]{26}$/);
      assert.match(news.created_at, TIME);
      assert.deepEqual(news, {
        object: 'topic',
        id: news.id,
        name: 'Product updates',
        description: 'What shipped this month',
        default_subscription: 'opt_in',
        created_at: news.created_at,
        updated_at: news.created_at,
      });
      const offers = await created('/v1/topics', { name: 'Offers', default_subscription: 'opt_out' });
      assert.equal(offers.description, null);
      assert.deepEqual((await api.request('GET', `/v1/topics/${news.id}`)).body, news);
      assert.deepEqual((await api.request('GET', '/v1/topics')).body, {
        object: 'list',
        data: [offers, news],
        has_more: false,
      });

      const updated = await api.request('PATCH', `/v1/topics/${offers.id}`, {
        body: { name: 'Deals', description: 'Now and then' },
      });
      assert.equal(updated.status, 200);
      assert.deepEqual(updated.body, {
        ...offers,
        name: 'Deals',
        description: 'Now and then',
        updated_at: updated.body.updated_at,
      });
      const cleared = await api.request('PATCH', `/v1/topics/${offers.id}`, { body: { description: null } });
      assert.equal(cleared.body.description, null);
      assert.equal(cleared.body.name, 'Deals');

      const before = await api.rowCounts();
      const fixed = await api.request('PATCH', `/v1/topics/${offers.id}`, {
        body: { default_subscription: 'opt_in' },
      });
      assert.equal(fixed.status, 422, 'the default is fixed once created');
      assertError(
        await api.request('PATCH', `/v1/topics/${offers.id}`, { body: {} }),
        422,
        'parameter_missing',
        'Send at least one of name, description.',
      );
      for (const body of [
        { name: 'x' },
        { name: '', default_subscription: 'opt_in' },
        { name: 'x', default_subscription: 'maybe' },
        { name: 'x', default_subscription: 'opt_in', description: 'd'.repeat(1001) },
      ]) {
        assert.equal((await api.request('POST', '/v1/topics', { body })).status, 422, JSON.stringify(body));
      }
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');

      const deleted = await api.request('DELETE', `/v1/topics/${offers.id}`);
      assert.deepEqual(deleted.body, { object: 'topic', id: offers.id, deleted: true });
      assertError(
        await api.request('GET', `/v1/topics/${offers.id}`),
        404,
        'resource_missing',
        `No topic with id '${offers.id}'.`,
        'id',
      );
    });

    test("a contact follows each topic's default until it chooses; the topic filter", async () => {
      const weekly = await created('/v1/topics', { name: 'Weekly', default_subscription: 'opt_in' });
      const beta = await created('/v1/topics', { name: 'Beta', default_subscription: 'opt_out' });
      const eve = await created('/v1/contacts', { email: 'eve@example.org' });
      const fred = await created('/v1/contacts', { email: 'fred@example.org' });
      const view = (topic: any, subscription: string, chosen: boolean) => ({
        object: 'contact_topic',
        topic_id: topic.id,
        name: topic.name,
        description: topic.description,
        subscription,
        chosen,
      });

      const defaults = await api.request('GET', `/v1/contacts/${eve.id}/topics`);
      assert.equal(defaults.status, 200);
      assert.deepEqual(defaults.body.data.slice(0, 2), [
        view(beta, 'opt_out', false),
        view(weekly, 'opt_in', false),
      ]);

      const chosen = await api.request('PATCH', '/v1/contacts/EVE@example.org/topics', {
        body: {
          topics: [
            { id: weekly.id, subscription: 'opt_out' },
            { id: beta.id, subscription: 'opt_in' },
          ],
        },
      });
      assert.equal(chosen.status, 200, JSON.stringify(chosen.body));
      assert.deepEqual(chosen.body, {
        object: 'list',
        data: [view(weekly, 'opt_out', true), view(beta, 'opt_in', true)],
        has_more: false,
      });
      const now = await api.request('GET', `/v1/contacts/${eve.id}/topics?limit=2`);
      assert.deepEqual(now.body.data, [view(beta, 'opt_in', true), view(weekly, 'opt_out', true)]);

      // Subscribed: Eve opted in to beta (its default is out); Fred follows weekly's default (in).
      assert.deepEqual(ids(await api.request('GET', `/v1/contacts?topic_id=${beta.id}`)), [eve.id]);
      assert.deepEqual(ids(await api.request('GET', `/v1/contacts?topic_id=${weekly.id}`)), [fred.id]);
      // A choice made again with the other value replaces the first.
      await api.request('PATCH', `/v1/contacts/${eve.id}/topics`, {
        body: { topics: [{ id: weekly.id, subscription: 'opt_in' }] },
      });
      assert.deepEqual(ids(await api.request('GET', `/v1/contacts?topic_id=${weekly.id}`)), [
        fred.id,
        eve.id,
      ]);

      // A topic's delete takes the choices for it; the contacts stay.
      await api.request('DELETE', `/v1/topics/${beta.id}`);
      const left = await api.request('GET', `/v1/contacts/${eve.id}/topics`);
      assert.ok(!left.body.data.some((each: any) => each.topic_id === beta.id));
      assert.equal((await api.request('GET', `/v1/contacts/${eve.id}`)).status, 200);
    });

    test('bad choices are refused whole: nothing stored', async () => {
      const topic = await created('/v1/topics', { name: 'Kept', default_subscription: 'opt_in' });
      await created('/v1/contacts', { email: 'gil@example.org' });
      const before = await api.rowCounts();
      const path = '/v1/contacts/gil@example.org/topics';
      assertError(
        await api.request('PATCH', path, {
          body: {
            topics: [
              { id: topic.id, subscription: 'opt_out' },
              { id: 'top_nope', subscription: 'opt_in' },
            ],
          },
        }),
        404,
        'resource_missing',
        "No topic with id 'top_nope'.",
        'id',
      );
      assertError(
        await api.request('PATCH', path, {
          body: {
            topics: [
              { id: topic.id, subscription: 'opt_out' },
              { id: topic.id, subscription: 'opt_in' },
            ],
          },
        }),
        422,
        'parameter_invalid',
        `The topic '${topic.id}' is named twice.`,
        'topics[1].id',
      );
      for (const body of [{ topics: [] }, { topics: [{ id: topic.id, subscription: 'yes' }] }, {}]) {
        assert.equal((await api.request('PATCH', path, { body })).status, 422, JSON.stringify(body));
      }
      assertError(
        await api.request('PATCH', '/v1/contacts/nobody@example.org/topics', {
          body: { topics: [{ id: topic.id, subscription: 'opt_out' }] },
        }),
        404,
        'resource_missing',
        "No contact with id 'nobody@example.org'.",
        'id',
      );
      assertError(
        await api.request('GET', '/v1/contacts?topic_id=top_nope'),
        404,
        'resource_missing',
        "No topic with id 'top_nope'.",
        'id',
      );
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
    });
  });
}
