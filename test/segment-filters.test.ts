import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Clock } from '../src/lib/clock.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError, created } from './helpers/answers.ts';
import { startFanOutWorker } from './helpers/fan-out.ts';
import { BROWSER, onServer, parseMail } from './helpers/engagement.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// Filter segments under /v1 (issue 37, item 2): a segment that is a filter over contacts' properties, topic
// subscriptions, engagement recency and creation time. Created, shown and updated with its filter, refused with
// a 422 naming the bad condition, its contacts listed as it matches now, and a broadcast to it arriving at a
// real SMTP server for the matching contacts only.

const PUBLIC_URL = 'https://mail.acme.test';
const DAY = 86_400_000;

for (const engine of ALL_ENGINES) {
  describe(`filter segments (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let smtp: TestSmtpServer;
    let sending: SendingWorker;
    let fanOut: QueueWorker;
    let offset = 0;
    const clock: Clock = { now: () => new Date(Date.now() + offset) };
    const ids = new Map<string, string>();
    let news: { id: string };
    let since: string;

    before(async () => {
      api = await startTestApp(engine, { clock, publicUrl: PUBLIC_URL });
      smtp = await startSmtpServer();
      sending = await startSendingWorker(api, { relayPort: smtp.port, clock, publicUrl: PUBLIC_URL });
      fanOut = await startFanOutWorker(api, { clock });

      // The audience: a plan (string, fallback free), seats (number), a newsletter topic (opt-in by choice).
      await created(api, '/v1/contact-properties', { key: 'plan', type: 'string', fallback_value: 'free' });
      await created(api, '/v1/contact-properties', { key: 'seats', type: 'number' });
      news = await created(api, '/v1/topics', { name: 'Newsletter', default_subscription: 'opt_out' });
      const people: Array<Record<string, unknown>> = [
        { email: 'ada@filter.test', first_name: 'Ada', properties: { plan: 'pro', seats: 10 } },
        { email: 'bob@filter.test', first_name: 'Bob', properties: { seats: 3 } },
        { email: 'cat@filter.test', first_name: 'Cat', properties: { plan: 'pro', seats: 2 } },
        { email: 'dan@filter.test', first_name: 'Dan', properties: { plan: 'pro', seats: 50 } },
        { email: 'eve@filter.test', first_name: 'Ève' },
      ];
      for (const body of people) {
        const contact = await created(api, '/v1/contacts', body);
        ids.set(contact.email, contact.id);
      }
      const subscribed = await api.request('PATCH', `/v1/contacts/${ids.get('ada@filter.test')}/topics`, {
        body: { topics: [{ id: news.id, subscription: 'opt_in' }] },
      });
      assert.equal(subscribed.status, 200, JSON.stringify(subscribed.body));

      // Eve opens and clicks a tracked email: engagement the filters read.
      const sent = await api.request('POST', '/v1/emails', {
        body: {
          from: 'Acme <hello@acme.test>',
          to: 'Eve@Filter.test',
          subject: 'Welcome',
          html: '<p>Welcome aboard, Ève.</p>\n<p><a href="https://acme.test/start">Start here</a></p>',
          tracking: { opens: true, clicks: true },
        },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const [message] = await smtp.waitFor(1, 20_000);
      const mail = await parseMail(message!.raw);
      const opened = await fetch(onServer(mail.pixel!, api.baseUrl), { headers: { 'user-agent': BROWSER } });
      assert.equal(opened.status, 200);
      const clicked = await fetch(onServer(mail.links[0]!, api.baseUrl), {
        redirect: 'manual',
        headers: { 'user-agent': BROWSER },
      });
      assert.equal(clicked.status, 302);
      await until(async () => {
        const email = await api.request('GET', `/v1/emails/${sent.body.id}`);
        return email.body.recipients[0].open_count === 1 && email.body.recipients[0].clicks.length === 1;
      });
      smtp.messages.length = 0;
      since = clock.now().toISOString();
      await created(api, '/v1/contacts', { email: 'fay@filter.test', properties: { plan: 'team' } });
    });
    after(async () => {
      await fanOut.stop();
      await sending.stop();
      await smtp.close();
      await api.close();
    });

    /** The addresses a segment's contact list shows now. */
    async function members(segmentId: string): Promise<string[]> {
      const page = await api.request('GET', `/v1/segments/${segmentId}/contacts?limit=100`);
      assert.equal(page.status, 200, JSON.stringify(page.body));
      return page.body.data.map((contact: { email: string }) => contact.email).sort();
    }

    const segmentOf = (conditions: unknown[], match = 'all') =>
      created(api, '/v1/segments', { name: `Filter ${Math.random()}`, filter: { match, conditions } });

    test('created, shown and updated with its filter; its contacts are whoever matches now', async () => {
      const pros = await segmentOf([
        { type: 'property', key: 'plan', operator: 'equals', value: 'pro' },
        { type: 'property', key: 'seats', operator: 'greater', value: 5 },
      ]);
      assert.deepEqual(pros.filter, {
        match: 'all',
        conditions: [
          { type: 'property', key: 'plan', operator: 'equals', value: 'pro' },
          { type: 'property', key: 'seats', operator: 'greater', value: 5 },
        ],
      });
      assert.deepEqual((await api.request('GET', `/v1/segments/${pros.id}`)).body, pros);
      assert.deepEqual(await members(pros.id), ['ada@filter.test', 'dan@filter.test']);
      // The same through the contacts list.
      const listed = await api.request('GET', `/v1/contacts?segment_id=${pros.id}`);
      assert.deepEqual(listed.body.data.map((contact: any) => contact.email).sort(), [
        'ada@filter.test',
        'dan@filter.test',
      ]);

      // The fallback counts: Bob has no plan, so he is on `free`.
      const free = await segmentOf([{ type: 'property', key: 'plan', operator: 'equals', value: 'free' }]);
      assert.deepEqual(await members(free.id), ['bob@filter.test', 'eve@filter.test']);
      const notPro = await segmentOf([
        { type: 'property', key: 'plan', operator: 'not_equals', value: 'pro' },
      ]);
      assert.deepEqual(await members(notPro.id), ['bob@filter.test', 'eve@filter.test', 'fay@filter.test']);
      const few = await segmentOf([{ type: 'property', key: 'seats', operator: 'less', value: 5 }]);
      assert.deepEqual(await members(few.id), ['bob@filter.test', 'cat@filter.test']);
      const withPlan = await segmentOf([{ type: 'property', key: 'plan', operator: 'exists' }]);
      assert.deepEqual(await members(withPlan.id), [
        'ada@filter.test',
        'cat@filter.test',
        'dan@filter.test',
        'fay@filter.test',
      ]);
      const readers = await segmentOf([{ type: 'topic', topic_id: news.id, subscribed: true }]);
      assert.deepEqual(await members(readers.id), ['ada@filter.test']);
      const nonReaders = await segmentOf([
        { type: 'topic', topic_id: news.id, subscribed: false },
        { type: 'property', key: 'plan', operator: 'equals', value: 'pro' },
      ]);
      assert.deepEqual(await members(nonReaders.id), ['cat@filter.test', 'dan@filter.test']);
      const recent = await segmentOf([{ type: 'created', since }]);
      assert.deepEqual(await members(recent.id), ['fay@filter.test']);
      const either = await segmentOf(
        [
          { type: 'clicked', within_days: 7 },
          { type: 'property', key: 'seats', operator: 'greater', value: 20 },
        ],
        'any',
      );
      assert.deepEqual(await members(either.id), ['dan@filter.test', 'eve@filter.test']);

      // Engagement recency counts from now: 31 days on, Eve's open is older than 30 days.
      const engaged = await segmentOf([{ type: 'opened', within_days: 30 }]);
      assert.deepEqual(await members(engaged.id), ['eve@filter.test']);
      offset += 31 * DAY;
      try {
        assert.deepEqual(await members(engaged.id), []);
      } finally {
        offset -= 31 * DAY;
      }

      // Its filter (and name) change; a list does not become a filter, nor is a filter added to.
      const updated = await api.request('PATCH', `/v1/segments/${pros.id}`, {
        body: {
          name: 'Big pro accounts',
          filter: {
            match: 'all',
            conditions: [{ type: 'property', key: 'seats', operator: 'greater', value: 20 }],
          },
        },
      });
      assert.equal(updated.status, 200, JSON.stringify(updated.body));
      assert.equal(updated.body.name, 'Big pro accounts');
      assert.deepEqual(updated.body.filter.conditions, [
        { type: 'property', key: 'seats', operator: 'greater', value: 20 },
      ]);
      assert.deepEqual(await members(pros.id), ['dan@filter.test']);
      const list = await created(api, '/v1/segments', { name: 'A list' });
      assert.equal(list.filter, null);
      assertApiError(
        await api.request('PATCH', `/v1/segments/${list.id}`, { body: { filter: pros.filter } }),
        422,
        'segment_is_list',
        `The segment '${list.id}' is a list: a list does not become a filter (create a filter segment instead).`,
        'filter',
      );
      assertApiError(
        await api.request('POST', `/v1/contacts/${ids.get('bob@filter.test')}/segments/${pros.id}`),
        422,
        'segment_is_filter',
        `The segment '${pros.id}' is a filter: its members are the contacts that match it, not added or removed.`,
        'segment_id',
      );
    });

    test('a bad condition is a 422 that names it; nothing is stored', async () => {
      const refused = async (conditions: unknown[], param: string, message: string) => {
        const response = await api.request('POST', '/v1/segments', {
          body: { name: 'Refused', filter: { match: 'all', conditions } },
        });
        assertApiError(response, 422, 'filter_invalid', `${param}: ${message}`, param);
      };
      const ok = { type: 'opened', within_days: 30 };
      await refused(
        [ok, { type: 'property', key: 'tier', operator: 'equals', value: 'gold' }],
        'filter.conditions[1]',
        "'tier' is not a declared contact property.",
      );
      await refused(
        [{ type: 'property', key: 'seats', operator: 'equals', value: 'ten' }],
        'filter.conditions[0]',
        `'seats' is a number property: "ten" is not a number.`,
      );
      await refused(
        [ok, ok, { type: 'property', key: 'plan', operator: 'greater', value: 'pro' }],
        'filter.conditions[2]',
        "greater compares numbers: 'plan' is a string property.",
      );
      await refused(
        [{ type: 'property', key: 'plan', operator: 'exists', value: 'pro' }],
        'filter.conditions[0]',
        'exists takes no value.',
      );
      await refused(
        [{ type: 'property', key: 'plan', operator: 'equals' }],
        'filter.conditions[0]',
        'equals needs a value.',
      );
      await refused(
        [{ type: 'topic', topic_id: 'top_00000000000000000000000000', subscribed: true }],
        'filter.conditions[0]',
        "No topic with id 'top_00000000000000000000000000'.",
      );
      await refused(
        [{ type: 'opened', within_days: 0 }],
        'filter.conditions[0]',
        'within_days is a whole number of days from 1 to 3650.',
      );
      await refused(
        [{ type: 'clicked', within_days: 7, key: 'plan' }],
        'filter.conditions[0]',
        'a clicked condition takes within_days, not key.',
      );
      await refused(
        [{ type: 'created' }],
        'filter.conditions[0]',
        'a created condition needs since, a date-time (ISO 8601).',
      );
      // The schema's own refusals: an unknown type, an empty filter.
      const unknown = await api.request('POST', '/v1/segments', {
        body: { name: 'Refused', filter: { match: 'all', conditions: [{ type: 'bought' }] } },
      });
      assert.equal(unknown.status, 422, JSON.stringify(unknown.body));
      const empty = await api.request('POST', '/v1/segments', {
        body: { name: 'Refused', filter: { match: 'all', conditions: [] } },
      });
      assert.equal(empty.status, 422, JSON.stringify(empty.body));
      const listed = await api.request('GET', '/v1/segments?limit=100');
      assert.ok(!listed.body.data.some((segment: { name: string }) => segment.name === 'Refused'));
    });

    test('a broadcast to a filter segment arrives only for the contacts that match', async () => {
      const segment = await segmentOf(
        [
          { type: 'topic', topic_id: news.id, subscribed: true },
          { type: 'opened', within_days: 30 },
          { type: 'property', key: 'seats', operator: 'greater', value: 20 },
        ],
        'any',
      );
      const broadcast = await created(api, '/v1/broadcasts', {
        name: 'December',
        from: 'Acme News <news@acme.test>',
        subject: 'Hello {{ contact.first_name }}',
        html: '<p>Hi {{ contact.first_name }}, you are on {{ contact.properties.plan }}.</p>\n<p>Ünïcode ✓</p>',
        text: 'Hi {{ contact.first_name }}, you are on {{ contact.properties.plan }}.\nÜnïcode ✓',
        segment_id: segment.id,
        send: true,
      });
      await until(
        async () => (await api.request('GET', `/v1/broadcasts/${broadcast.id}`)).body.status === 'sent',
        30_000,
        'the broadcast to be sent',
      );
      await smtp.waitFor(3, 30_000);
      const to = smtp.messages.map((message) => message.to.join(',')).sort();
      assert.deepEqual(to, ['ada@filter.test', 'dan@filter.test', 'eve@filter.test']);
      const eve = await parseMail(
        smtp.messages.find((message) => message.to.includes('eve@filter.test'))!.raw,
      );
      assert.match(eve.text, /Hi Ève, you are on free\.\nÜnïcode ✓/);
      const dan = await parseMail(
        smtp.messages.find((message) => message.to.includes('dan@filter.test'))!.raw,
      );
      assert.match(dan.html, /Hi Dan, you are on pro\./);
      const got = await api.request('GET', `/v1/broadcasts/${broadcast.id}`);
      assert.equal(got.body.counts.copies, 3);
      assert.equal(got.body.counts.excluded, 0);
      // Nothing else arrives: the worker is idle with the broadcast sent.
      await sending.whenIdle();
      assert.equal(smtp.messages.length, 3);
    });
  });
}
