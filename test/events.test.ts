import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { DELIVERY_KEYS } from './helpers/deliveries.ts';

for (const engine of ALL_ENGINES) {
  describe(`events API (${engine})`, { skip: engineSkip(engine) }, () => {
    let t: TestApp;
    before(async () => {
      // No worker: these tests read what emit stored; the deliveries stay pending.
      t = await startTestApp(engine, { allowPrivateUrls: true });
    });
    after(() => t.close());

    const createWebhook = async (events: string[], key?: string) => {
      const response = await t.request('POST', '/v1/webhooks', {
        body: { url: 'https://hooks.example.com/postwire', events },
        ...(key ? { key } : {}),
      });
      assert.equal(response.status, 201);
      return response.body.data.id as string;
    };

    test('emit stores the event with one pending delivery per subscribed webhook', async () => {
      const sent = await createWebhook(['email.sent', 'email.delivered']);
      const delivered = await createWebhook(['email.delivered']);
      await createWebhook(['email.bounced']);

      const event = await t.events.emit(t.projectId, 'email.delivered', { email_id: 'msg_1', n: 1 });
      assert.match(event.id, /^evt_/);
      assert.equal(event.delivery_ids.length, 2);

      const response = await t.request('GET', `/v1/events/${event.id}`);
      assert.equal(response.status, 200);
      const body = response.body;
      assert.deepEqual(
        { object: body.object, id: body.id, type: body.type, created_at: body.created_at, data: body.data },
        {
          object: 'event',
          id: event.id,
          type: 'email.delivered',
          created_at: event.created_at,
          data: { email_id: 'msg_1', n: 1 },
        },
      );
      assert.match(body.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.deepEqual(
        body.deliveries.map((delivery: any) => delivery.webhook_id).sort(),
        [sent, delivered].sort(),
      );
      for (const delivery of body.deliveries) {
        assert.deepEqual(Object.keys(delivery).sort(), DELIVERY_KEYS);
        assert.equal(delivery.object, 'delivery');
        assert.match(delivery.id, /^dlv_/);
        assert.equal(delivery.event_id, event.id);
        assert.equal(delivery.event_type, 'email.delivered');
        assert.equal(delivery.status, 'pending');
        assert.equal(delivery.attempts, 0);
        assert.deepEqual(delivery.attempt_log, []);
        assert.equal(delivery.next_attempt_at, event.created_at, 'due at once');
        assert.equal(delivery.last_attempt_at, null);
        assert.equal(delivery.last_status_code, null);
        assert.equal(delivery.last_error, null);
        assert.equal(delivery.completed_at, null);
        assert.equal(delivery.created_at, event.created_at);
      }
    });

    test('an event no webhook wants is still stored', async () => {
      const event = await t.events.emit(t.projectId, 'email.clicked', { link: 'https://example.com' });
      assert.deepEqual(event.delivery_ids, []);
      const response = await t.request('GET', `/v1/events/${event.id}`);
      assert.equal(response.status, 200);
      assert.deepEqual(response.body.deliveries, []);
    });

    test('the webhookId option targets one webhook, subscribed or not', async () => {
      const target = await createWebhook(['email.bounced']);
      const event = await t.events.emit(t.projectId, 'email.sent', { test: true }, { webhookId: target });
      const response = await t.request('GET', `/v1/events/${event.id}`);
      assert.deepEqual(
        response.body.deliveries.map((delivery: any) => delivery.webhook_id),
        [target],
      );
    });

    test('emit refuses unknown kinds and non-object data', async () => {
      await assert.rejects(t.events.emit(t.projectId, 'email.exploded' as never, {}), /Unknown event kind/);
      await assert.rejects(t.events.emit(t.projectId, 'email.sent', [] as never), /must be an object/);
    });

    test('lists events newest first, filtered by type, with cursors', async () => {
      const { projectId, key } = await t.createProject('Listing');
      const ids: string[] = [];
      for (let i = 0; i < 5; i += 1) {
        const kind = i % 2 === 0 ? 'email.sent' : 'email.opened';
        ids.push((await t.events.emit(projectId, kind, { i })).id);
      }
      const newestFirst = [...ids].reverse();

      const all = await t.request('GET', '/v1/events', { key });
      assert.equal(all.status, 200);
      assert.equal(all.body.object, 'list');
      assert.equal(all.body.has_more, false);
      assert.deepEqual(
        all.body.data.map((event: any) => event.id),
        newestFirst,
      );
      assert.deepEqual(Object.keys(all.body.data[0]).sort(), ['created_at', 'data', 'id', 'object', 'type']);
      assert.deepEqual(all.body.data[0].data, { i: 4 });

      const firstPage = await t.request('GET', '/v1/events?limit=2', { key });
      assert.deepEqual(
        firstPage.body.data.map((event: any) => event.id),
        newestFirst.slice(0, 2),
      );
      assert.equal(firstPage.body.has_more, true);
      const secondPage = await t.request('GET', `/v1/events?limit=2&after=${newestFirst[1]}`, { key });
      assert.deepEqual(
        secondPage.body.data.map((event: any) => event.id),
        newestFirst.slice(2, 4),
      );
      assert.equal(secondPage.body.has_more, true);
      const previous = await t.request('GET', `/v1/events?limit=2&before=${newestFirst[2]}`, { key });
      assert.deepEqual(
        previous.body.data.map((event: any) => event.id),
        newestFirst.slice(0, 2),
      );

      const sent = await t.request('GET', '/v1/events?type=email.sent', { key });
      assert.deepEqual(
        sent.body.data.map((event: any) => event.id),
        [ids[4], ids[2], ids[0]],
      );
      const sentPage = await t.request('GET', `/v1/events?type=email.sent&limit=1&after=${ids[4]}`, { key });
      assert.deepEqual(
        sentPage.body.data.map((event: any) => event.id),
        [ids[2]],
      );
      assert.equal(sentPage.body.has_more, true);

      const unknown = await t.request('GET', '/v1/events?type=email.exploded', { key });
      assert.equal(unknown.status, 422);
      assert.equal(unknown.body.error.param, 'type');
      const extra = await t.request('GET', '/v1/events?colour=red', { key });
      assert.equal(extra.status, 422);
      const both = await t.request('GET', `/v1/events?after=${ids[0]}&before=${ids[1]}`, { key });
      assert.equal(both.status, 422);
    });

    test("another project's events are invisible and its webhooks receive nothing", async () => {
      const other = await t.createProject('Other');
      const otherWebhook = await createWebhook(['email.complained'], other.key);
      const mine = await createWebhook(['email.complained']);

      const event = await t.events.emit(t.projectId, 'email.complained', { email_id: 'msg_9' });
      const detail = await t.request('GET', `/v1/events/${event.id}`);
      assert.deepEqual(
        detail.body.deliveries.map((delivery: any) => delivery.webhook_id),
        [mine],
      );
      assert.notEqual(mine, otherWebhook);

      const hidden = await t.request('GET', `/v1/events/${event.id}`, { key: other.key });
      assert.equal(hidden.status, 404);
      assert.equal(hidden.body.error.code, 'resource_missing');
      const list = await t.request('GET', '/v1/events?type=email.complained', { key: other.key });
      assert.deepEqual(list.body.data, []);

      const theirs = await t.events.emit(other.projectId, 'email.complained', {});
      const theirDetail = await t.request('GET', `/v1/events/${theirs.id}`, { key: other.key });
      assert.deepEqual(
        theirDetail.body.deliveries.map((delivery: any) => delivery.webhook_id),
        [otherWebhook],
      );
    });

    test('unknown ids are 404; the routes need a key', async () => {
      for (const id of ['evt_01h455vb4pex5vsknk084sn02q', 'nope', 'wh_01h455vb4pex5vsknk084sn02q']) {
        const response = await t.request('GET', `/v1/events/${id}`);
        assert.equal(response.status, 404, id);
      }
      assert.equal((await t.request('GET', '/v1/events', { key: null })).status, 401);
      assert.equal((await t.request('GET', '/v1/events/evt_x', { key: null })).status, 401);
    });

    test('webhooks show disabled_reason (null unless the service disabled them)', async () => {
      const id = await createWebhook(['email.sent']);
      const created = await t.request('GET', `/v1/webhooks/${id}`);
      assert.equal(created.body.data.disabled_reason, null);
      const disabled = await t.request('PATCH', `/v1/webhooks/${id}`, { body: { enabled: false } });
      assert.equal(disabled.body.data.enabled, false);
      assert.equal(disabled.body.data.disabled_reason, null);
    });
  });
}
