import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { afterEach, describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { ConfigError, loadConfig } from '../src/config.ts';
import { ALL_ENGINES, engineSkip, type TestApp } from './helpers/app.ts';
import {
  createWebhook,
  DELIVERY_KEYS,
  harness,
  settled,
  testClock,
  waitForEvent,
  webhookRow,
} from './helpers/deliveries.ts';
import type { ReceivedRequest, Receiver } from './helpers/receiver.ts';

const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const UNKNOWN_WEBHOOK = 'wh_01h455vb4pex5vsknk084sn02q';

const whsec = () => `whsec_${randomBytes(32).toString('base64')}`;

const headersOf = (request: ReceivedRequest) => request.headers as Record<string, string>;

/** Whether a Standard Webhooks receiver holding `secret` accepts the request. */
function verifies(secret: string, request: ReceivedRequest): boolean {
  try {
    new Webhook(secret).verify(request.body, headersOf(request));
    return true;
  } catch {
    return false;
  }
}

const signaturesOf = (request: ReceivedRequest) =>
  String(request.headers['webhook-signature'] ?? '')
    .split(' ')
    .filter(Boolean);

async function deliveryStatuses(t: TestApp, webhookId: string) {
  const rows = await t.database.handle.db
    .selectFrom('deliveries')
    .select(['id', 'status'])
    .where('webhook_id', '=', webhookId)
    .orderBy('id')
    .execute();
  return rows.map((row) => `${row.id}:${row.status}`);
}

/** Emits one event and returns the request the receiver got for it. */
async function deliverOne(t: TestApp, receiver: Receiver): Promise<ReceivedRequest> {
  const seen = receiver.requests.length;
  await t.events.emit(t.projectId, 'email.delivered', { email_id: 'msg_rot' });
  return (await receiver.waitFor(seen + 1))[seen]!;
}

describe('webhook secret rotation window configuration', () => {
  test('defaults to 24 h; WEBHOOK_SECRET_ROTATION_WINDOW takes a duration', () => {
    assert.equal(loadConfig({}).webhookSecretRotationWindowMs, 86_400_000);
    assert.equal(
      loadConfig({ WEBHOOK_SECRET_ROTATION_WINDOW: '2h' }).webhookSecretRotationWindowMs,
      7_200_000,
    );
    assert.throws(() => loadConfig({ WEBHOOK_SECRET_ROTATION_WINDOW: 'soon' }), ConfigError);
  });
});

for (const engine of ALL_ENGINES) {
  describe(`webhook operations (${engine})`, { skip: engineSkip(engine) }, () => {
    const h = harness();
    afterEach(() => h.close());

    test('the delivery log: newest first, every attempt, filtered by status, paged', async () => {
      const t = await h.app(engine, { worker: { schedule: [0, 50] } });
      const [receiver, otherReceiver] = await Promise.all([h.receiver(), h.receiver()]);
      receiver.script(
        { status: 500, body: 'oops' },
        { status: 200, body: 'thanks' },
        { status: 503, body: 'busy' },
        { status: 500, body: 'down' },
      );
      const id = await createWebhook(t, { url: receiver.url, events: ['email.sent', 'email.bounced'] });
      const otherId = await createWebhook(t, { url: otherReceiver.url, events: ['email.sent'] });

      const first = await t.events.emit(t.projectId, 'email.sent', { email_id: 'msg_1' });
      await waitForEvent(t, first.id, settled);
      const second = await t.events.emit(t.projectId, 'email.bounced', { email_id: 'msg_2' });
      await waitForEvent(t, second.id, settled);
      await t.worker!.stop();
      const third = await t.events.emit(t.projectId, 'email.sent', { email_id: 'msg_3' });

      const all = await t.request('GET', `/v1/webhooks/${id}/deliveries`);
      assert.equal(all.status, 200);
      assert.deepEqual(Object.keys(all.body), ['object', 'data', 'has_more']);
      assert.equal(all.body.object, 'list');
      assert.equal(all.body.has_more, false);
      assert.deepEqual(
        all.body.data.map((delivery: any) => delivery.event_id),
        [third.id, second.id, first.id],
      );
      for (const delivery of all.body.data) {
        assert.deepEqual(Object.keys(delivery).sort(), DELIVERY_KEYS);
        assert.equal(delivery.object, 'delivery');
        assert.equal(delivery.webhook_id, id);
      }
      const [pending, failed, succeeded] = all.body.data;

      assert.equal(succeeded.status, 'succeeded');
      assert.equal(succeeded.event_type, 'email.sent');
      assert.equal(succeeded.attempts, 2);
      assert.deepEqual(
        succeeded.attempt_log.map((attempt: any) => [
          attempt.status_code,
          attempt.error,
          attempt.response_excerpt,
        ]),
        [
          [500, 'the receiver answered 500', 'oops'],
          [200, null, 'thanks'],
        ],
      );
      for (const attempt of succeeded.attempt_log) {
        assert.deepEqual(Object.keys(attempt).sort(), [
          'attempted_at',
          'duration_ms',
          'error',
          'id',
          'response_excerpt',
          'status_code',
        ]);
        assert.match(attempt.id, /^att_/);
        assert.match(attempt.attempted_at, TIMESTAMP);
        assert.ok(Number.isInteger(attempt.duration_ms) && attempt.duration_ms >= 0);
      }
      assert.ok(succeeded.attempt_log[0].attempted_at <= succeeded.attempt_log[1].attempted_at);
      assert.equal(succeeded.last_attempt_at, succeeded.attempt_log[1].attempted_at);

      assert.equal(failed.status, 'failed');
      assert.equal(failed.event_type, 'email.bounced');
      assert.equal(failed.attempts, 2);
      assert.deepEqual(
        failed.attempt_log.map((attempt: any) => [attempt.status_code, attempt.response_excerpt]),
        [
          [503, 'busy'],
          [500, 'down'],
        ],
      );
      assert.equal(failed.last_error, 'the receiver answered 500');
      assert.equal(failed.next_attempt_at, null);
      assert.match(failed.completed_at, TIMESTAMP);

      assert.equal(pending.status, 'pending');
      assert.equal(pending.attempts, 0);
      assert.deepEqual(pending.attempt_log, []);
      assert.equal(pending.next_attempt_at, pending.created_at);

      // The event shows the same delivery in the same shape.
      const detail = await t.request('GET', `/v1/events/${first.id}`);
      assert.deepEqual(
        detail.body.deliveries.find((delivery: any) => delivery.webhook_id === id),
        succeeded,
      );

      for (const [status, expected] of [
        ['succeeded', succeeded],
        ['failed', failed],
        ['pending', pending],
      ]) {
        const filtered = await t.request('GET', `/v1/webhooks/${id}/deliveries?status=${status}`);
        assert.equal(filtered.status, 200);
        assert.deepEqual(
          filtered.body.data.map((delivery: any) => delivery.id),
          [expected.id],
          status,
        );
      }

      const page = await t.request('GET', `/v1/webhooks/${id}/deliveries?limit=2`);
      assert.deepEqual(
        page.body.data.map((delivery: any) => delivery.id),
        [pending.id, failed.id],
      );
      assert.equal(page.body.has_more, true);
      const next = await t.request('GET', `/v1/webhooks/${id}/deliveries?limit=2&after=${failed.id}`);
      assert.deepEqual(
        next.body.data.map((delivery: any) => delivery.id),
        [succeeded.id],
      );
      assert.equal(next.body.has_more, false);
      const previous = await t.request('GET', `/v1/webhooks/${id}/deliveries?limit=1&before=${failed.id}`);
      assert.deepEqual(
        previous.body.data.map((delivery: any) => delivery.id),
        [pending.id],
      );
      const failedAfter = await t.request(
        'GET',
        `/v1/webhooks/${id}/deliveries?status=succeeded&after=${pending.id}`,
      );
      assert.deepEqual(
        failedAfter.body.data.map((delivery: any) => delivery.id),
        [succeeded.id],
      );

      // Each webhook's log holds its own deliveries only.
      const others = await t.request('GET', `/v1/webhooks/${otherId}/deliveries`);
      assert.deepEqual(
        others.body.data.map((delivery: any) => [delivery.webhook_id, delivery.event_id]),
        [
          [otherId, third.id],
          [otherId, first.id],
        ],
      );
    });

    test('the delivery log: bad queries are 422 with their param; other projects and unknown ids 404', async () => {
      const t = await h.app(engine, { worker: false });
      const id = await createWebhook(t, { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] });
      await t.events.emit(t.projectId, 'email.sent', {});

      for (const [query, param] of [
        ['?status=done', 'status'],
        ['?status=', 'status'],
        ['?status=PENDING', 'status'],
        ['?limit=0', 'limit'],
        ['?limit=101', 'limit'],
        ['?colour=red', 'colour'],
        ['?after=dlv_a&before=dlv_b', 'before'],
      ] as const) {
        const response = await t.request('GET', `/v1/webhooks/${id}/deliveries${query}`);
        assert.equal(response.status, 422, query);
        assert.equal(response.body.error.param, param, query);
      }
      const wrong = await t.request('GET', `/v1/webhooks/${id}/deliveries?status=done`);
      assert.match(wrong.body.error.message, /must be one of: pending, succeeded, failed\./);

      const other = await t.createProject('Other');
      for (const [webhookId, key] of [
        [id, other.key],
        [UNKNOWN_WEBHOOK, t.key],
        ['nope', t.key],
      ] as const) {
        const response = await t.request('GET', `/v1/webhooks/${webhookId}/deliveries`, { key });
        assert.equal(response.status, 404, webhookId);
        assert.equal(response.body.error.code, 'resource_missing');
      }
      assert.equal((await t.request('GET', `/v1/webhooks/${id}/deliveries`, { key: null })).status, 401);
    });

    test('test send: to that webhook alone, through the queue, answering the first attempt', async () => {
      const t = await h.app(engine);
      const [target, bystander] = await Promise.all([h.receiver(), h.receiver()]);
      target.script({ status: 200, body: 'hello from the receiver' });
      const secret = whsec();
      // Subscribed to another kind: a test send goes to the webhook regardless.
      const id = await createWebhook(t, { url: target.url, events: ['email.bounced'], secret });
      await createWebhook(t, { url: bystander.url, events: ['email.sent'] });

      const response = await t.request('POST', `/v1/webhooks/${id}/test`);
      assert.equal(response.status, 200, JSON.stringify(response.body));
      const result = response.body;
      assert.deepEqual(Object.keys(result).sort(), [
        'attempted_at',
        'delivery_id',
        'delivery_status',
        'duration_ms',
        'error',
        'event_id',
        'object',
        'response_excerpt',
        'status_code',
        'success',
        'webhook_id',
      ]);
      assert.equal(result.object, 'webhook_test');
      assert.equal(result.webhook_id, id);
      assert.match(result.event_id, /^evt_/);
      assert.match(result.delivery_id, /^dlv_/);
      assert.equal(result.success, true);
      assert.equal(result.delivery_status, 'succeeded');
      assert.equal(result.status_code, 200);
      assert.equal(result.error, null);
      assert.equal(result.response_excerpt, 'hello from the receiver');
      assert.match(result.attempted_at, TIMESTAMP);
      assert.ok(Number.isInteger(result.duration_ms) && result.duration_ms >= 0);

      assert.equal(target.requests.length, 1);
      const [request] = target.requests;
      assert.equal(request!.headers['webhook-id'], result.event_id);
      assert.ok(verifies(secret, request!), 'signed like every delivery');
      const payload = JSON.parse(request!.body);
      assert.equal(payload.id, result.event_id);
      assert.equal(payload.type, 'email.sent');
      assert.equal(payload.data.test, true);
      assert.equal(payload.data.email_id, 'msg_test');
      assert.equal(typeof payload.data.from, 'string');
      assert.ok(Array.isArray(payload.data.to) && payload.data.to.length === 1);
      assert.equal(typeof payload.data.subject, 'string');

      // A real event with one delivery, the one answered about.
      const event = await t.request('GET', `/v1/events/${result.event_id}`);
      assert.equal(event.body.type, 'email.sent');
      assert.deepEqual(
        event.body.deliveries.map((delivery: any) => [delivery.id, delivery.webhook_id]),
        [[result.delivery_id, id]],
      );

      const bounced = await t.request('POST', `/v1/webhooks/${id}/test`, { body: { type: 'email.bounced' } });
      assert.equal(bounced.status, 200);
      assert.equal(bounced.body.success, true);
      const bouncedPayload = JSON.parse(target.requests[1]!.body);
      assert.equal(bouncedPayload.type, 'email.bounced');
      assert.match(bouncedPayload.data.smtp_response, /^550 /);

      // The worker has looked again and found nothing due: a delivery to the bystander would have gone.
      await t.worker!.whenIdle();
      assert.equal(bystander.requests.length, 0, 'no other webhook gets a test event');
    });

    test('a failing test send reports the attempt and is retried on the schedule', async () => {
      const t = await h.app(engine);
      const receiver = await h.receiver({ fallback: { status: 500, body: 'nope' } });
      const id = await createWebhook(t, { url: receiver.url, events: ['email.sent'] });

      const response = await t.request('POST', `/v1/webhooks/${id}/test`, { body: {} });
      assert.equal(response.status, 200);
      assert.equal(response.body.success, false);
      assert.equal(response.body.status_code, 500);
      assert.equal(response.body.error, 'the receiver answered 500');
      assert.equal(response.body.response_excerpt, 'nope');
      assert.equal(response.body.delivery_status, 'pending', 'retries are still to come');

      await receiver.waitFor(3);
      const [delivery] = (await waitForEvent(t, response.body.event_id, settled)).deliveries;
      assert.equal(delivery.status, 'failed');
      assert.equal(delivery.attempts, 3);
    });

    test('with no worker running, a test send says so and stays queued', async () => {
      const t = await h.app(engine, { worker: false });
      const receiver = await h.receiver();
      const id = await createWebhook(t, { url: receiver.url, events: ['email.sent'] });

      const started = performance.now();
      const response = await t.request('POST', `/v1/webhooks/${id}/test`);
      const took = performance.now() - started;
      assert.equal(response.status, 200);
      assert.equal(response.body.success, false);
      assert.equal(response.body.delivery_status, 'pending');
      assert.equal(response.body.attempted_at, null);
      assert.equal(response.body.status_code, null);
      assert.equal(response.body.duration_ms, null);
      assert.equal(response.body.response_excerpt, null);
      // The test app waits the worker timeout (500 ms) plus a 500 ms margin.
      assert.match(response.body.error, /^no attempt within 1000 ms/);
      assert.ok(took >= 1000, `answered after ${Math.round(took)} ms: it waited the whole time`);

      await t.startWorker();
      const [request] = await receiver.waitFor(1);
      assert.equal(request!.headers['webhook-id'], response.body.event_id);
    });

    test('test send: a bad type is 422 and stores nothing; disabled is 409; other projects 404', async () => {
      const t = await h.app(engine, { worker: false });
      const id = await createWebhook(t, { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] });
      const before = await t.rowCounts();

      for (const [body, param] of [
        [{ type: 'email.exploded' }, 'type'],
        [{ type: 5 }, 'type'],
        [{ type: null }, 'type'],
        [{ colour: 'red' }, 'colour'],
      ] as const) {
        const response = await t.request('POST', `/v1/webhooks/${id}/test`, { body });
        assert.equal(response.status, 422, JSON.stringify(body));
        assert.equal(response.body.error.param, param, JSON.stringify(body));
      }
      assert.deepEqual(await t.rowCounts(), before);

      await t.request('PATCH', `/v1/webhooks/${id}`, { body: { enabled: false } });
      const disabled = await t.request('POST', `/v1/webhooks/${id}/test`);
      assert.equal(disabled.status, 409);
      assert.equal(disabled.body.error.code, 'webhook_disabled');
      assert.match(disabled.body.error.message, /enable it first/);

      const other = await t.createProject('Other');
      const foreign = await t.request('POST', `/v1/webhooks/${id}/test`, { key: other.key });
      assert.equal(foreign.status, 404);
      assert.equal((await t.request('POST', `/v1/webhooks/${UNKNOWN_WEBHOOK}/test`)).status, 404);
      const after = await t.rowCounts();
      assert.deepEqual({ ...after, projects: 0, api_keys: 0 }, { ...before, projects: 0, api_keys: 0 });
    });

    test('redeliver: a new delivery per webhook, old ones kept as history; or to one webhook', async () => {
      const t = await h.app(engine);
      const [a, b, c] = await Promise.all([h.receiver(), h.receiver(), h.receiver()]);
      const secret = whsec();
      const aId = await createWebhook(t, { url: a.url, events: ['email.delivered'], secret });
      const bId = await createWebhook(t, { url: b.url, events: ['email.delivered'] });
      const event = await t.events.emit(t.projectId, 'email.delivered', { email_id: 'msg_r' });
      const original = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(original.length, 2);

      const all = await t.request('POST', `/v1/events/${event.id}/redeliver`);
      assert.equal(all.status, 200, JSON.stringify(all.body));
      assert.deepEqual(Object.keys(all.body).sort(), [
        'delivery_ids',
        'event_id',
        'object',
        'skipped_webhook_ids',
      ]);
      assert.equal(all.body.object, 'redelivery');
      assert.equal(all.body.event_id, event.id);
      assert.equal(all.body.delivery_ids.length, 2);
      assert.deepEqual(all.body.skipped_webhook_ids, []);
      await Promise.all([a.waitFor(2), b.waitFor(2)]);
      // The same event again: same body and webhook-id (receivers can drop a duplicate), freshly signed.
      assert.equal(a.requests[1]!.body, a.requests[0]!.body);
      assert.equal(a.requests[1]!.headers['webhook-id'], event.id);
      assert.ok(verifies(secret, a.requests[1]!));

      const detail = await waitForEvent(
        t,
        event.id,
        (deliveries) => deliveries.length === 4 && settled(deliveries),
      );
      assert.ok(detail.deliveries.every((delivery: any) => delivery.status === 'succeeded'));
      for (const old of original) {
        const kept = detail.deliveries.find((delivery: any) => delivery.id === old.id);
        assert.deepEqual(kept, old, 'the first deliveries and their attempts stay as they were');
      }
      for (const id of all.body.delivery_ids) {
        const fresh = detail.deliveries.find((delivery: any) => delivery.id === id);
        assert.equal(fresh.attempts, 1);
        assert.ok(fresh.created_at >= event.created_at);
      }

      const one = await t.request('POST', `/v1/events/${event.id}/redeliver`, { body: { webhook_id: aId } });
      assert.equal(one.status, 200);
      assert.equal(one.body.delivery_ids.length, 1);
      await a.waitFor(3);

      // A webhook that never had the event gets it when named, if it subscribes to the kind.
      const cId = await createWebhook(t, { url: c.url, events: ['email.delivered'] });
      const toNew = await t.request('POST', `/v1/events/${event.id}/redeliver`, {
        body: { webhook_id: cId },
      });
      assert.equal(toNew.status, 200);
      await c.waitFor(1);

      // Disabled webhooks are skipped among all, and a conflict when named.
      await t.request('PATCH', `/v1/webhooks/${bId}`, { body: { enabled: false } });
      const skipping = await t.request('POST', `/v1/events/${event.id}/redeliver`);
      assert.equal(skipping.status, 200);
      assert.equal(skipping.body.delivery_ids.length, 2, 'a and c');
      assert.deepEqual(skipping.body.skipped_webhook_ids, [bId]);
      await Promise.all([a.waitFor(4), c.waitFor(2)]);
      const named = await t.request('POST', `/v1/events/${event.id}/redeliver`, {
        body: { webhook_id: bId },
      });
      assert.equal(named.status, 409);
      assert.equal(named.body.error.code, 'webhook_disabled');
      assert.equal(named.body.error.param, 'webhook_id');
      // Neither redelivery queued anything for b, and the worker, having looked again, sent it nothing.
      assert.equal((await deliveryStatuses(t, bId)).length, 2);
      await t.worker!.whenIdle();
      assert.equal(b.requests.length, 2);
    });

    test('redeliver: bad input is 422 and stores nothing; other projects 404', async () => {
      const t = await h.app(engine, { worker: false });
      await createWebhook(t, { url: 'http://127.0.0.1:9/a', events: ['email.delivered'] });
      const unsubscribed = await createWebhook(t, { url: 'http://127.0.0.1:9/b', events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.delivered', {});
      const other = await t.createProject('Other');
      const foreignWebhook = await createWebhook(
        t,
        { url: 'http://127.0.0.1:9/c', events: ['email.delivered'] },
        other.key,
      );
      const foreignEvent = await t.events.emit(other.projectId, 'email.delivered', {});
      const before = await t.rowCounts();

      for (const [body, status, param, code] of [
        [{ webhook_id: 5 }, 422, 'webhook_id', 'parameter_invalid'],
        [{ colour: 'red' }, 422, 'colour', 'parameter_unknown'],
        [{ webhook_id: unsubscribed }, 422, 'webhook_id', 'webhook_not_subscribed'],
        [{ webhook_id: foreignWebhook }, 404, 'webhook_id', 'resource_missing'],
        [{ webhook_id: 'nope' }, 404, 'webhook_id', 'resource_missing'],
      ] as const) {
        const response = await t.request('POST', `/v1/events/${event.id}/redeliver`, { body });
        assert.equal(response.status, status, JSON.stringify(body));
        assert.equal(response.body.error.param, param, JSON.stringify(body));
        assert.equal(response.body.error.code, code, JSON.stringify(body));
      }
      for (const [eventId, key] of [
        [foreignEvent.id, t.key],
        [event.id, other.key],
        ['evt_01h455vb4pex5vsknk084sn02q', t.key],
        ['nope', t.key],
      ] as const) {
        const response = await t.request('POST', `/v1/events/${eventId}/redeliver`, { key });
        assert.equal(response.status, 404, eventId);
      }
      assert.deepEqual(await t.rowCounts(), before);
    });

    test('recover re-queues the failed deliveries since a time; the retry schedule starts over', async () => {
      const clock = testClock();
      const t = await h.app(engine, { clock, worker: { schedule: [0, 50] } });
      const receiver = await h.receiver({ fallback: { status: 500, body: 'down' } });
      const id = await createWebhook(t, { url: receiver.url, events: ['email.sent'] });

      const old = await t.events.emit(t.projectId, 'email.sent', { n: 0 });
      await waitForEvent(t, old.id, settled);
      // Moved on, not waited for: `since` falls strictly between the old event and the recent ones.
      clock.advance(1000);
      const since = clock.now().toISOString();
      clock.advance(1000);
      const recent = [
        await t.events.emit(t.projectId, 'email.sent', { n: 1 }),
        await t.events.emit(t.projectId, 'email.sent', { n: 2 }),
      ];
      for (const event of recent) {
        const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
        assert.equal(delivery.status, 'failed');
        assert.equal(delivery.attempts, 2);
      }

      // The receiver is back, after one more failure: that delivery needs the schedule's second step,
      // which it gets only if recovery started the schedule over.
      receiver.setFallback({ status: 200, body: 'ok' });
      receiver.script({ status: 500, body: 'still down' });
      const response = await t.request('POST', `/v1/webhooks/${id}/recover`, { body: { since } });
      assert.equal(response.status, 200, JSON.stringify(response.body));
      assert.deepEqual(response.body, { object: 'webhook_recovery', webhook_id: id, since, requeued: 2 });

      const attempts: number[] = [];
      for (const event of recent) {
        const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
        assert.equal(delivery.status, 'succeeded');
        assert.equal(delivery.attempt_log.at(-1).status_code, 200);
        assert.equal(delivery.attempts, delivery.attempt_log.length, 'the log keeps the earlier attempts');
        attempts.push(delivery.attempts);
      }
      assert.deepEqual(attempts.sort(), [3, 4]);
      const [untouched] = (await t.request('GET', `/v1/events/${old.id}`)).body.deliveries;
      assert.equal(untouched.status, 'failed', 'created before since');
      assert.equal(untouched.attempts, 2);

      const again = await t.request('POST', `/v1/webhooks/${id}/recover`, { body: { since } });
      assert.equal(again.body.requeued, 0, 'succeeded deliveries are not re-queued');
    });

    test('recover: a bad since is 422 and changes nothing; disabled is 409; other projects 404', async () => {
      const t = await h.app(engine, { worker: { schedule: [0] } });
      const receiver = await h.receiver({ fallback: { status: 500 } });
      const id = await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});
      await waitForEvent(t, event.id, settled);
      const state = await deliveryStatuses(t, id);
      assert.equal(state.length, 1);
      assert.match(state[0]!, /:failed$/);

      const day = 86_400_000;
      const since = new Date(Date.now() - 60_000).toISOString();
      for (const [body, param, message] of [
        [undefined, 'since', /required/],
        [{}, 'since', /required/],
        [{ since: 'yesterday' }, 'since', /date-time/],
        [{ since: 12 }, 'since', /string/],
        [{ since: '2026-13-45T00:00:00Z' }, 'since', /date-time/],
        [{ since: new Date(Date.now() + 60_000).toISOString() }, 'since', /future/],
        [{ since: new Date(Date.now() - 31 * day).toISOString() }, 'since', /30 days/],
        [{ since, colour: 'red' }, 'colour', /Unknown field/],
      ] as const) {
        const response = await t.request('POST', `/v1/webhooks/${id}/recover`, body ? { body } : {});
        assert.equal(response.status, 422, JSON.stringify(body));
        assert.equal(response.body.error.param, param, JSON.stringify(body));
        assert.match(response.body.error.message, message, JSON.stringify(body));
      }
      assert.deepEqual(await deliveryStatuses(t, id), state);

      await t.request('PATCH', `/v1/webhooks/${id}`, { body: { enabled: false } });
      const disabled = await t.request('POST', `/v1/webhooks/${id}/recover`, { body: { since } });
      assert.equal(disabled.status, 409);
      assert.equal(disabled.body.error.code, 'webhook_disabled');
      assert.match(disabled.body.error.message, /enable it first/);
      assert.equal(
        (await webhookRow(t, id)).enabled ? 'enabled' : 'disabled',
        'disabled',
        'not enabled by it',
      );

      const other = await t.createProject('Other');
      const foreign = await t.request('POST', `/v1/webhooks/${id}/recover`, {
        body: { since },
        key: other.key,
      });
      assert.equal(foreign.status, 404);
      const unknown = await t.request('POST', `/v1/webhooks/${UNKNOWN_WEBHOOK}/recover`, { body: { since } });
      assert.equal(unknown.status, 404);
      assert.deepEqual(await deliveryStatuses(t, id), state);

      // Enabled again, it recovers (30 days back is still allowed).
      await t.request('PATCH', `/v1/webhooks/${id}`, { body: { enabled: true } });
      receiver.setFallback({ status: 204 });
      const recovered = await t.request('POST', `/v1/webhooks/${id}/recover`, {
        body: { since: new Date(Date.now() - 29 * day).toISOString() },
      });
      assert.equal(recovered.status, 200);
      assert.equal(recovered.body.requeued, 1);
      const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(delivery.status, 'succeeded');
    });

    test('secret rotation: new and old signatures during the window, then only the new', async () => {
      // The window ends when the test moves the clock past it. (It stays within the five minutes that
      // Standard Webhooks receivers allow a timestamp to be off, so the signatures still verify.)
      const window = 60_000;
      const clock = testClock();
      const t = await h.app(engine, { clock, webhookSecretRotationWindowMs: window });
      const receiver = await h.receiver();
      const [first, second, third] = [whsec(), whsec(), whsec()];
      const id = await createWebhook(t, { url: receiver.url, events: ['email.delivered'], secret: first });

      let request = await deliverOne(t, receiver);
      assert.equal(signaturesOf(request).length, 1);
      assert.ok(verifies(first, request));

      const rotated = await t.request('PATCH', `/v1/webhooks/${id}`, { body: { secret: second } });
      assert.equal(rotated.status, 200);
      assert.equal(rotated.body.data.has_secret, true);
      request = await deliverOne(t, receiver);
      const signatures = signaturesOf(request);
      assert.equal(signatures.length, 2, 'new and old, space-separated');
      const signedAt = new Date(Number(request.headers['webhook-timestamp']) * 1000);
      const messageId = String(request.headers['webhook-id']);
      assert.deepEqual(signatures, [
        new Webhook(second).sign(messageId, signedAt, request.body),
        new Webhook(first).sign(messageId, signedAt, request.body),
      ]);
      assert.ok(verifies(second, request), 'a receiver with the new secret accepts it');
      assert.ok(verifies(first, request), 'a receiver still on the old secret accepts it');

      const row = await webhookRow(t, id);
      const expiresAt = Date.parse(row.previous_secret_expires_at!);
      const patchedAt = Date.parse(rotated.body.data.updated_at);
      assert.ok(Math.abs(expiresAt - patchedAt - window) <= 1, `expires ${expiresAt - patchedAt} ms after`);
      for (const secret of [first, second]) {
        for (const text of [JSON.stringify(row), JSON.stringify(rotated.body)]) {
          assert.ok(!text.includes(secret.slice('whsec_'.length)), 'no secret in the clear');
        }
      }

      clock.advance(expiresAt - 10_000 - clock.now().getTime());
      request = await deliverOne(t, receiver);
      assert.equal(signaturesOf(request).length, 2, 'ten seconds before the window ends');
      clock.advance(expiresAt - clock.now().getTime());
      request = await deliverOne(t, receiver);
      assert.equal(signaturesOf(request).length, 1, 'the window is over');
      assert.ok(verifies(second, request));
      assert.ok(!verifies(first, request));

      // Rotating again keeps the secret it replaces, not the one before.
      await t.request('PATCH', `/v1/webhooks/${id}`, { body: { secret: third } });
      request = await deliverOne(t, receiver);
      assert.equal(signaturesOf(request).length, 2);
      assert.ok(verifies(third, request));
      assert.ok(verifies(second, request));
      assert.ok(!verifies(first, request));

      // The same secret sent again is no rotation: the window in progress stays as it was.
      const during = await webhookRow(t, id);
      await t.request('PATCH', `/v1/webhooks/${id}`, { body: { secret: third } });
      const unchanged = await webhookRow(t, id);
      assert.equal(unchanged.previous_secret_sealed, during.previous_secret_sealed);
      assert.equal(unchanged.previous_secret_expires_at, during.previous_secret_expires_at);
      assert.equal(unchanged.secret_sealed, during.secret_sealed);

      // null removes both: nothing is signed.
      const removed = await t.request('PATCH', `/v1/webhooks/${id}`, { body: { secret: null } });
      assert.equal(removed.body.data.has_secret, false);
      const cleared = await webhookRow(t, id);
      assert.equal(cleared.secret_sealed, null);
      assert.equal(cleared.previous_secret_sealed, null);
      assert.equal(cleared.previous_secret_expires_at, null);
      request = await deliverOne(t, receiver);
      assert.equal(request.headers['webhook-signature'], undefined);

      // A first secret after none starts no rotation.
      await t.request('PATCH', `/v1/webhooks/${id}`, { body: { secret: first } });
      request = await deliverOne(t, receiver);
      assert.equal(signaturesOf(request).length, 1);
      assert.ok(verifies(first, request));
    });

    test('secret rotation: the window defaults to 24 h', async () => {
      const t = await h.app(engine, { worker: false });
      const id = await createWebhook(t, {
        url: 'http://127.0.0.1:9/hook',
        events: ['email.sent'],
        secret: 'the first secret',
      });
      const rotated = await t.request('PATCH', `/v1/webhooks/${id}`, {
        body: { secret: 'the second secret' },
      });
      const row = await webhookRow(t, id);
      assert.ok(row.previous_secret_sealed && !row.previous_secret_sealed.includes('the first secret'));
      assert.match(row.previous_secret_sealed, /^v1\./);
      const left = Date.parse(row.previous_secret_expires_at!) - Date.parse(rotated.body.data.updated_at);
      assert.ok(Math.abs(left - 86_400_000) <= 1, `${left} ms`);
    });
  });
}
