import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import { assertResendError as assertError, dataOf } from './helpers/answers.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// Resend's SDK, unchanged, drives segments (and its deprecated audiences, which are them), topics, and
// contacts' segments and topics at /resend: what it answers, and what it refuses, as Resend's errors.

for (const engine of ALL_ENGINES) {
  describe(
    `the resend SDK's segments and topics against /resend (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      let api: TestApp;
      let resend: Resend;
      before(async () => {
        api = await startTestApp(engine);
        resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend` });
      });
      after(() => api.close());

      test('segments (and audiences): create, get, list, update, remove; refusals', async () => {
        const beta = dataOf(await resend.segments.create({ name: 'Beta' }));
        assert.match(beta.id, /^seg_/);
        assert.deepEqual(beta, { object: 'segment', id: beta.id, name: 'Beta' });
        const got = dataOf(await resend.segments.get(beta.id));
        assert.deepEqual(got, { object: 'segment', id: beta.id, name: 'Beta', created_at: got.created_at });
        const old = dataOf(await resend.audiences.create({ name: 'Old' }));
        assert.deepEqual(dataOf(await resend.segments.list()), {
          object: 'list',
          data: [
            { id: old.id, name: 'Old', created_at: dataOf(await resend.audiences.get(old.id)).created_at },
            { id: beta.id, name: 'Beta', created_at: got.created_at },
          ],
          has_more: false,
        });
        assert.deepEqual(dataOf(await resend.segments.update(beta.id, { name: 'Betas' })), {
          object: 'segment',
          id: beta.id,
        });
        assert.equal(dataOf(await resend.segments.get(beta.id)).name, 'Betas');
        assert.deepEqual(dataOf(await resend.audiences.remove(old.id)), {
          object: 'segment',
          id: old.id,
          deleted: true,
        });
        assertError(await resend.segments.get(old.id), 404, 'not_found', `No segment with id '${old.id}'.`);
        assertError(
          await resend.segments.create({ name: '' }),
          422,
          'validation_error',
          "The field 'name' must not be empty.",
        );
      });

      test("contacts' segments: add, list, remove; contacts.list({ segmentId }); create into segments", async () => {
        const segment = dataOf(await resend.segments.create({ name: 'Readers' }));
        const ada = dataOf(await resend.contacts.create({ email: 'ada@example.org', firstName: 'Ada' }));
        const bob = dataOf(
          await resend.contacts.create({ email: 'bob@example.org', segments: [{ id: segment.id }] }),
        );
        assert.deepEqual(
          dataOf(await resend.contacts.segments.add({ email: 'ada@example.org', segmentId: segment.id })),
          {
            id: segment.id,
          },
        );
        const listed = dataOf(await resend.contacts.list({ segmentId: segment.id }));
        assert.deepEqual(
          listed.data.map((contact) => [contact.id, contact.email, contact.first_name]),
          [
            [bob.id, 'bob@example.org', null],
            [ada.id, 'ada@example.org', 'Ada'],
          ],
        );
        assert.deepEqual(
          dataOf(await resend.contacts.list({ audienceId: segment.id })).data.map((contact) => contact.id),
          [bob.id, ada.id],
        );
        const mine = dataOf(await resend.contacts.segments.list({ contactId: ada.id }));
        assert.deepEqual(
          mine.data.map((each) => [each.id, each.name]),
          [[segment.id, 'Readers']],
        );
        assert.deepEqual(
          dataOf(await resend.contacts.segments.remove({ contactId: ada.id, segmentId: segment.id })),
          { id: segment.id, deleted: true },
        );
        assert.deepEqual(dataOf(await resend.contacts.segments.list({ email: 'ada@example.org' })).data, []);
        assertError(
          await resend.contacts.segments.remove({ contactId: ada.id, segmentId: segment.id }),
          404,
          'not_found',
          `The contact 'ada@example.org' is not in the segment '${segment.id}'.`,
        );
        assertError(
          await resend.contacts.segments.add({ email: 'nobody@example.org', segmentId: segment.id }),
          404,
          'not_found',
          "No contact with id 'nobody@example.org'.",
        );
        const before = await api.rowCounts();
        assertError(
          await resend.contacts.create({ email: 'cy@example.org', segments: [{ id: 'seg_nope' }] }),
          404,
          'not_found',
          "No segment with id 'seg_nope'.",
        );
        assert.deepEqual(await api.rowCounts(), before, 'the contact is not created either');
      });

      test('topics: create, get, list, update, remove; refusals', async () => {
        const news = dataOf(
          await resend.topics.create({ name: 'News', description: 'Monthly', defaultSubscription: 'opt_in' }),
        );
        assert.deepEqual(Object.keys(news), ['id']);
        assert.match(news.id, /^top_/);
        const got = dataOf(await resend.topics.get(news.id));
        assert.deepEqual(got, {
          object: 'topic',
          id: news.id,
          name: 'News',
          description: 'Monthly',
          default_subscription: 'opt_in',
          created_at: got.created_at,
        });
        const { object: _object, ...listedNews } = got as typeof got & { object: string };
        assert.deepEqual(dataOf(await resend.topics.list()), {
          object: 'list',
          data: [listedNews],
          has_more: false,
        });
        assert.deepEqual(dataOf(await resend.topics.update({ id: news.id, name: 'Newsletter' })), {
          id: news.id,
        });
        assert.equal(dataOf(await resend.topics.get(news.id)).name, 'Newsletter');
        assertError(
          await resend.topics.create({ name: 'x', defaultSubscription: 'sometimes' as 'opt_in' }),
          422,
          'validation_error',
          "The field 'default_subscription' must be one of: opt_in, opt_out.",
        );
        assert.deepEqual(dataOf(await resend.topics.remove(news.id)), {
          object: 'topic',
          id: news.id,
          deleted: true,
        });
        assertError(await resend.topics.get(news.id), 404, 'not_found', `No topic with id '${news.id}'.`);
      });

      test("contacts' topics: list with defaults, update, create with topics; refusals", async () => {
        const weekly = dataOf(await resend.topics.create({ name: 'Weekly', defaultSubscription: 'opt_in' }));
        const beta = dataOf(await resend.topics.create({ name: 'Beta', defaultSubscription: 'opt_out' }));
        const eve = dataOf(
          await resend.contacts.create({
            email: 'eve@example.org',
            topics: [{ id: beta.id, subscription: 'opt_in' }],
          }),
        );
        const topics = async () =>
          dataOf(await resend.contacts.topics.list({ email: 'eve@example.org' })).data.filter((each) =>
            [weekly.id, beta.id].includes(each.id),
          );
        assert.deepEqual(await topics(), [
          { id: beta.id, name: 'Beta', description: null, subscription: 'opt_in' },
          { id: weekly.id, name: 'Weekly', description: null, subscription: 'opt_in' },
        ]);
        assert.deepEqual(
          dataOf(
            await resend.contacts.topics.update({
              id: eve.id,
              topics: [{ id: weekly.id, subscription: 'opt_out' }],
            }),
          ),
          { id: eve.id },
        );
        assert.deepEqual(
          (await topics()).map((each) => [each.id, each.subscription]),
          [
            [beta.id, 'opt_in'],
            [weekly.id, 'opt_out'],
          ],
        );
        const before = await api.rowCounts();
        assertError(
          await resend.contacts.topics.update({
            email: 'eve@example.org',
            topics: [{ id: 'top_nope', subscription: 'opt_in' }],
          }),
          404,
          'not_found',
          "No topic with id 'top_nope'.",
        );
        assertError(
          await resend.contacts.topics.list({ email: 'nobody@example.org' }),
          404,
          'not_found',
          "No contact with id 'nobody@example.org'.",
        );
        assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
      });

      test("another project's segments and topics are 404; a read_only key reads and cannot write", async () => {
        const other = await api.createProject('elsewhere');
        const theirs = new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` });
        const segment = dataOf(await resend.segments.create({ name: 'Mine' }));
        const topic = dataOf(await resend.topics.create({ name: 'Mine', defaultSubscription: 'opt_in' }));
        assertError(
          await theirs.segments.get(segment.id),
          404,
          'not_found',
          `No segment with id '${segment.id}'.`,
        );
        assertError(
          await theirs.topics.remove(topic.id),
          404,
          'not_found',
          `No topic with id '${topic.id}'.`,
        );
        const token = (
          await api.request('POST', '/v1/api-keys', { body: { name: 'reader', permission: 'read_only' } })
        ).body.token;
        const reader = new Resend(token, { baseUrl: `${api.baseUrl}/resend` });
        dataOf(await reader.segments.get(segment.id));
        dataOf(await reader.topics.list());
        const refused = await reader.segments.create({ name: 'No' });
        assert.equal((refused.error as { statusCode: number }).statusCode, 403);
        const refusedTopic = await reader.topics.update({ id: topic.id, name: 'No' });
        assert.equal((refusedTopic.error as { statusCode: number }).statusCode, 403);
      });
    },
  );
}
