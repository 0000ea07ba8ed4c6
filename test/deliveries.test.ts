import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type net from 'node:net';
import { after, afterEach, before, describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { ConfigError, loadConfig } from '../src/config.ts';
import type { Clock } from '../src/lib/clock.ts';
import { type ClaimedDelivery, createDeliveryQueue } from '../src/modules/deliveries/deliveries.queue.ts';
import { webhookPayload } from '../src/modules/deliveries/deliveries.worker.ts';
import { nextRetryDelay, parseRetryAfter } from '../src/queue/retry.ts';
import { createSender } from '../src/modules/deliveries/sender.ts';
import { signingKey, signWebhook } from '../src/modules/deliveries/signing.ts';
import { ALL_ENGINES, engineSkip, type TestApp } from './helpers/app.ts';
import {
  attemptsIn,
  createWebhook,
  harness,
  settled,
  testClock,
  waitForEvent,
  webhookRow,
} from './helpers/deliveries.ts';
import { createTracker, type Receiver, startReceiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';
import { createWebhookRepo } from '../src/modules/webhooks/webhooks.repo.ts';

const attemptsOf = (t: TestApp, deliveryId: string) => attemptsIn(t.database.handle, { deliveryId });

describe('signing', () => {
  test('whsec_ secrets sign with their base64 bytes, others with their UTF-8 bytes', () => {
    const bytes = randomBytes(32);
    assert.deepEqual(signingKey(`whsec_${bytes.toString('base64')}`), bytes);
    assert.deepEqual(signingKey('plain sécret'), Buffer.from('plain sécret', 'utf8'));
  });

  test('matches the standardwebhooks library for both kinds of secret', () => {
    const whsec = `whsec_${randomBytes(24).toString('base64')}`;
    const plain = 'a plain shared secret';
    const when = new Date('2026-01-02T03:04:05.678Z');
    const body = '{"id":"evt_1","data":{"x":"ü"}}';
    const ts = Math.floor(when.getTime() / 1000);
    assert.equal(signWebhook([whsec], 'msg_1', ts, body), new Webhook(whsec).sign('msg_1', when, body));
    const plainAsBase64 = Buffer.from(plain, 'utf8').toString('base64');
    assert.equal(
      signWebhook([plain], 'msg_1', ts, body),
      new Webhook(plainAsBase64).sign('msg_1', when, body),
    );
    // Two secrets (rotation) give two space-separated signatures.
    assert.equal(signWebhook([whsec, plain], 'msg_1', ts, body).split(' ').length, 2);
  });

  test('the payload splices the stored data JSON', () => {
    const body = webhookPayload({
      eventId: 'evt_1',
      eventType: 'email.sent',
      eventCreatedAt: '2026-01-01T00:00:00.000Z',
      eventData: '{"a":[1,2],"b":"\\u00fc"}',
    });
    assert.deepEqual(JSON.parse(body), {
      id: 'evt_1',
      type: 'email.sent',
      created_at: '2026-01-01T00:00:00.000Z',
      data: { a: [1, 2], b: 'ü' },
    });
  });
});

describe('retry schedule', () => {
  const schedule = [0, 5000, 300_000];
  const fixed = () => 0.5;

  test('step i is the delay before attempt i+1; past the last step there is none', () => {
    assert.equal(nextRetryDelay({ attemptsMade: 0, schedule, jitter: 0.2, random: fixed }), 0);
    assert.equal(nextRetryDelay({ attemptsMade: 1, schedule, jitter: 0.2, random: fixed }), 5000);
    assert.equal(nextRetryDelay({ attemptsMade: 2, schedule, jitter: 0.2, random: fixed }), 300_000);
    assert.equal(nextRetryDelay({ attemptsMade: 3, schedule, jitter: 0.2, random: fixed }), undefined);
  });

  test('jitter stays within ± the fraction', () => {
    const low = nextRetryDelay({ attemptsMade: 1, schedule, jitter: 0.2, random: () => 0 });
    const high = nextRetryDelay({ attemptsMade: 1, schedule, jitter: 0.2, random: () => 0.999999 });
    assert.equal(low, 4000);
    assert.ok(high! <= 6000 && high! > 5990);
  });

  test('retry-after replaces the delay, capped at twice the step', () => {
    const delay = (retryAfterMs: number) =>
      nextRetryDelay({ attemptsMade: 1, schedule, jitter: 0.2, random: fixed, retryAfterMs });
    assert.equal(delay(1000), 1000);
    assert.equal(delay(8000), 8000);
    assert.equal(delay(3_600_000), 10_000);
    assert.equal(
      nextRetryDelay({ attemptsMade: 3, schedule, jitter: 0, random: fixed, retryAfterMs: 1000 }),
      undefined,
    );
  });

  test('retry-after reads seconds and HTTP dates', () => {
    const now = new Date('2026-01-01T00:00:00.000Z');
    assert.equal(parseRetryAfter('120', now), 120_000);
    assert.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:30 GMT', now), 30_000);
    assert.equal(parseRetryAfter('Wed, 31 Dec 2025 00:00:00 GMT', now), 0);
    assert.equal(parseRetryAfter('soon', now), undefined);
    assert.equal(parseRetryAfter('-5', now), undefined);
    assert.equal(parseRetryAfter(undefined, now), undefined);
  });
});

describe('webhook configuration', () => {
  test('defaults', () => {
    const config = loadConfig({});
    assert.equal(config.webhookTimeoutMs, 15_000);
    assert.deepEqual(
      config.webhookRetrySchedule,
      [0, 5000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
    );
    assert.equal(config.webhookRetryJitter, 0.2);
    assert.equal(config.webhookConcurrency, 64);
    assert.equal(config.webhookConcurrencyPerEndpoint, 4);
    assert.equal(config.webhookDisableAfterMs, 5 * 86_400_000);
  });

  test('values are read and checked', () => {
    const config = loadConfig({
      WEBHOOK_TIMEOUT_MS: '2000',
      WEBHOOK_RETRY_SCHEDULE: '0,250ms,1s,1m',
      WEBHOOK_RETRY_JITTER: '0',
      WEBHOOK_CONCURRENCY: '8',
      WEBHOOK_CONCURRENCY_PER_ENDPOINT: '2',
      WEBHOOK_DISABLE_AFTER: '1d',
    });
    assert.deepEqual(config.webhookRetrySchedule, [0, 250, 1000, 60_000]);
    assert.equal(config.webhookTimeoutMs, 2000);
    assert.equal(config.webhookRetryJitter, 0);
    assert.equal(config.webhookDisableAfterMs, 86_400_000);
    for (const env of [
      { WEBHOOK_RETRY_SCHEDULE: '0,5x' },
      { WEBHOOK_RETRY_SCHEDULE: '5s,1m' },
      { WEBHOOK_RETRY_JITTER: '1.5' },
      { WEBHOOK_TIMEOUT_MS: 'soon' },
      { WEBHOOK_CONCURRENCY: '0' },
    ]) {
      assert.throws(() => loadConfig(env), ConfigError, JSON.stringify(env));
    }
  });
});

describe('sender: deadlines and idle connections', () => {
  const servers: http.Server[] = [];
  after(() => {
    for (const server of servers) server.close();
  });
  /** A local server; `answer` decides per request. Resolves to its URL once listening. */
  const serve = async (answer: (request: http.IncomingMessage, response: http.ServerResponse) => void) => {
    const server = http.createServer(answer);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook` };
  };

  test('each attempt gets its whole timeout, however many are in flight, and a fast one is unaffected', async () => {
    const arrived: Array<() => void> = [];
    const hanging = await serve((request) => {
      request.resume();
      arrived.shift()?.();
    });
    const fast = await serve((request, response) => {
      request.resume();
      response.end('ok');
    });
    const sender = createSender({ resolver: async () => [], allowPrivateUrls: true, timeoutMs: 200 });
    const arrival = () => new Promise<void>((resolve) => arrived.push(resolve));
    try {
      // Started one after the other, each once the previous one has reached the receiver.
      let reached = arrival();
      const first = sender.send({ url: hanging.url, headers: {}, body: '{}' });
      await reached;
      reached = arrival();
      const second = sender.send({ url: hanging.url, headers: {}, body: '{}' });
      await reached;
      const quick = await sender.send({ url: fast.url, headers: {}, body: '{}' });
      assert.deepEqual([quick.statusCode, quick.responseExcerpt, quick.error], [200, 'ok', null]);
      for (const result of await Promise.all([first, second])) {
        assert.deepEqual([result.statusCode, result.error], [null, 'timed out after 200 ms']);
        assert.ok(result.durationMs >= 200, `ran ${result.durationMs} ms before timing out`);
      }
    } finally {
      sender.close();
    }
  });

  test(
    'a keep-alive connection left idle is closed by the sender; the next attempt opens another',
    { timeout: 10_000 },
    async () => {
      const connections: net.Socket[] = [];
      const closed: Array<() => void> = [];
      const { server, url } = await serve((request, response) => {
        request.resume();
        response.end('ok');
      });
      server.on('connection', (socket: net.Socket) => {
        connections.push(socket);
        socket.on('close', () => closed.shift()?.());
      });
      // Longer than the server's own keep-alive timeout would be no test: the server would close it first.
      server.keepAliveTimeout = 60_000;
      const sender = createSender({
        resolver: async () => [],
        allowPrivateUrls: true,
        timeoutMs: 1000,
        idleSocketMs: 100,
      });
      try {
        const gone = new Promise<void>((resolve) => closed.push(resolve));
        assert.equal((await sender.send({ url, headers: {}, body: '{}' })).statusCode, 200);
        await gone;
        assert.equal((await sender.send({ url, headers: {}, body: '{}' })).statusCode, 200);
        assert.equal(connections.length, 2);
      } finally {
        sender.close();
      }
    },
  );
});

describe('sender: private addresses are refused at connect time', () => {
  let receiver: Receiver;
  before(async () => {
    receiver = await startReceiver();
  });
  after(() => receiver.close());

  const post = (url: string, allowPrivateUrls: boolean, resolved: string[]) => {
    const sender = createSender({ resolver: async () => resolved, allowPrivateUrls, timeoutMs: 1000 });
    return sender.send({ url, headers: {}, body: '{}' }).finally(() => sender.close());
  };

  test('an IP literal is checked without any lookup', async () => {
    const result = await post(receiver.url, false, []);
    assert.equal(result.statusCode, null);
    assert.match(result.error!, /refused to connect: 127\.0\.0\.1 is a loopback, private or link-local/);
    assert.equal(receiver.requests.length, 0);
  });

  test('a name is checked on every address it resolves to', async () => {
    const port = new URL(receiver.url).port;
    const metadata = await post(`http://metadata.example:${port}/`, false, [
      '93.184.216.34',
      '169.254.169.254',
    ]);
    assert.match(metadata.error!, /'metadata\.example' resolves to 169\.254\.169\.254/);
    const unresolved = await post(`http://nowhere.example:${port}/`, false, []);
    assert.match(unresolved.error!, /could not resolve 'nowhere\.example'/);
    assert.equal(receiver.requests.length, 0);
  });

  test('allowed when private URLs are allowed', async () => {
    const port = new URL(receiver.url).port;
    const literal = await post(receiver.url, true, []);
    assert.equal(literal.statusCode, 200);
    const named = await post(`http://receiver.test:${port}/hook`, true, ['127.0.0.1']);
    assert.equal(named.statusCode, 200);
    assert.equal(named.responseExcerpt, 'ok');
    assert.equal(receiver.requests.length, 2);
  });
});

for (const engine of ALL_ENGINES) {
  describe(`webhook deliveries (${engine})`, { skip: engineSkip(engine) }, () => {
    const h = harness();
    afterEach(() => h.close());

    test('signed by Standard Webhooks; receivers verify with whsec_ and plain secrets', async () => {
      const t = await h.app(engine);
      const [withWhsec, withPlain, unsigned] = await Promise.all([h.receiver(), h.receiver(), h.receiver()]);
      const whsec = `whsec_${randomBytes(32).toString('base64')}`;
      const plain = 'correct horse battery staple';
      await createWebhook(t, { url: withWhsec.url, events: ['email.delivered'], secret: whsec });
      await createWebhook(t, { url: withPlain.url, events: ['email.delivered'], secret: plain });
      await createWebhook(t, { url: unsigned.url, events: ['email.delivered'] });

      const event = await t.events.emit(t.projectId, 'email.delivered', { email_id: 'msg_1', to: ['a@b.c'] });
      const [[signed], [plainSigned], [bare]] = await Promise.all([
        withWhsec.waitFor(1),
        withPlain.waitFor(1),
        unsigned.waitFor(1),
      ]);

      for (const request of [signed!, plainSigned!, bare!]) {
        assert.equal(request.method, 'POST');
        assert.equal(request.headers['content-type'], 'application/json');
        assert.match(request.headers['user-agent']!, /^Postwire-Webhooks\/\d+\.\d+\.\d+$/);
        assert.equal(request.headers['webhook-id'], event.id);
        assert.ok(Math.abs(Number(request.headers['webhook-timestamp']) - Date.now() / 1000) < 10);
        assert.deepEqual(JSON.parse(request.body), {
          id: event.id,
          type: 'email.delivered',
          created_at: event.created_at,
          data: { email_id: 'msg_1', to: ['a@b.c'] },
        });
      }
      const headersOf = (request: typeof signed) => request!.headers as Record<string, string>;
      assert.match(headersOf(signed)['webhook-signature']!, /^v1,[A-Za-z0-9+/]+=*$/);
      assert.deepEqual(new Webhook(whsec).verify(signed!.body, headersOf(signed)), JSON.parse(signed!.body));
      const plainKey = Buffer.from(plain, 'utf8').toString('base64');
      assert.deepEqual(
        new Webhook(plainKey).verify(plainSigned!.body, headersOf(plainSigned)),
        JSON.parse(plainSigned!.body),
      );
      assert.throws(() => new Webhook(plainKey).verify(signed!.body, headersOf(signed)), /signature/i);
      assert.throws(
        () => new Webhook(whsec).verify(`${signed!.body} `, headersOf(signed)),
        /No matching signature/,
      );
      assert.equal(bare!.headers['webhook-signature'], undefined);

      const detail = await waitForEvent(t, event.id, settled);
      assert.equal(detail.deliveries.length, 3);
      for (const delivery of detail.deliveries) {
        assert.equal(delivery.status, 'succeeded');
        assert.equal(delivery.attempts, 1);
        assert.equal(delivery.last_status_code, 200);
        assert.equal(delivery.last_error, null);
        assert.equal(delivery.next_attempt_at, null);
        assert.ok(delivery.completed_at);
      }
    });

    test('only enabled webhooks subscribed to the kind receive it', async () => {
      const t = await h.app(engine);
      const [subscribed, other, disabled] = await Promise.all([h.receiver(), h.receiver(), h.receiver()]);
      const subscribedId = await createWebhook(t, {
        url: subscribed.url,
        events: ['email.sent', 'email.bounced'],
      });
      await createWebhook(t, { url: other.url, events: ['email.delivered'] });
      await createWebhook(t, { url: disabled.url, events: ['email.sent'], enabled: false });

      const event = await t.events.emit(t.projectId, 'email.sent', { email_id: 'msg_2' });
      assert.equal(event.delivery_ids.length, 1);
      await subscribed.waitFor(1);
      const detail = await waitForEvent(t, event.id, settled);
      assert.deepEqual(
        detail.deliveries.map((delivery: any) => delivery.webhook_id),
        [subscribedId],
      );
      // The worker has looked again and found nothing due: whatever it was going to send, it has sent.
      await t.worker!.whenIdle();
      assert.equal(other.requests.length, 0);
      assert.equal(disabled.requests.length, 0);
      assert.equal(subscribed.requests.length, 1);
    });

    test('500, 500, 200: lands on the third attempt, every attempt recorded', async () => {
      const t = await h.app(engine);
      const receiver = await h.receiver();
      receiver.script(
        { status: 500, body: 'oops' },
        { status: 500, body: 'x'.repeat(10_000) },
        { status: 200, body: 'thanks' },
      );
      await createWebhook(t, { url: receiver.url, events: ['email.bounced'] });
      const event = await t.events.emit(t.projectId, 'email.bounced', { email_id: 'msg_3' });

      const detail = await waitForEvent(t, event.id, settled);
      const [delivery] = detail.deliveries;
      assert.equal(delivery.status, 'succeeded');
      assert.equal(delivery.attempts, 3);
      assert.equal(delivery.last_status_code, 200);
      assert.equal(delivery.last_error, null);

      const attempts = await attemptsOf(t, delivery.id);
      assert.deepEqual(
        attempts.map((attempt) => attempt.status_code),
        [500, 500, 200],
      );
      assert.deepEqual(
        attempts.map((attempt) => attempt.error),
        ['the receiver answered 500', 'the receiver answered 500', null],
      );
      assert.equal(attempts[0]!.response_excerpt, 'oops');
      assert.equal(attempts[1]!.response_excerpt, 'x'.repeat(4096), 'the excerpt is capped at 4 KiB');
      assert.equal(attempts[2]!.response_excerpt, 'thanks');
      for (const attempt of attempts) {
        assert.equal(attempt.webhook_id, delivery.webhook_id);
        assert.equal(attempt.event_id, event.id);
        assert.ok(attempt.duration_ms >= 0);
        assert.ok(attempt.attempted_at >= event.created_at);
      }
      // The schedule (0, 50 ms, 100 ms) spaced them; the same webhook-id each time, for de-duplication.
      const [first, second, third] = receiver.requests;
      assert.ok(second!.at - first!.at >= 45, `second after ${second!.at - first!.at} ms`);
      assert.ok(third!.at - second!.at >= 95, `third after ${third!.at - second!.at} ms`);
      assert.deepEqual(new Set(receiver.requests.map((request) => request.headers['webhook-id'])).size, 1);
    });

    test('after the last step the delivery has failed', async () => {
      const clock = testClock();
      const t = await h.app(engine, { clock });
      const receiver = await h.receiver({ fallback: { status: 500 } });
      await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});

      const detail = await waitForEvent(t, event.id, settled);
      const [delivery] = detail.deliveries;
      assert.equal(delivery.status, 'failed');
      assert.equal(delivery.attempts, 3);
      assert.equal(delivery.last_status_code, 500);
      assert.equal(delivery.last_error, 'the receiver answered 500');
      assert.equal(delivery.next_attempt_at, null);
      assert.ok(delivery.completed_at >= delivery.last_attempt_at);
      // A day on, any retry there were would be due: the worker looks and finds nothing to send.
      clock.advance(86_400_000);
      await t.worker!.whenIdle();
      assert.equal(receiver.requests.length, 3);
      assert.equal((await attemptsOf(t, delivery.id)).length, 3);
    });

    test('a redirect is not followed and fails the attempt', async () => {
      const t = await h.app(engine, { worker: { schedule: [0] } });
      const [receiver, target] = await Promise.all([h.receiver(), h.receiver()]);
      receiver.script({ status: 302, headers: { location: target.url } });
      await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});

      const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(delivery.status, 'failed');
      assert.equal(delivery.last_status_code, 302);
      assert.equal(delivery.last_error, `redirect not followed (302 to ${target.url})`);
      assert.equal(target.requests.length, 0);
    });

    test('410 disables the webhook at once and says why; enabling it clears the reason', async () => {
      const t = await h.app(engine);
      const receiver = await h.receiver();
      receiver.script({ status: 410 });
      const id = await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      assert.equal((await t.request('GET', `/v1/webhooks/${id}`)).body.data.disabled_reason, null);
      const event = await t.events.emit(t.projectId, 'email.sent', {});

      const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(delivery.status, 'failed');
      assert.equal(delivery.attempts, 1, 'no retries after a 410');
      assert.equal(delivery.last_status_code, 410);
      const webhook = (await t.request('GET', `/v1/webhooks/${id}`)).body.data;
      assert.equal(webhook.enabled, false);
      assert.match(webhook.disabled_reason, /410 Gone/);
      assert.ok(webhook.updated_at >= webhook.created_at);

      const ignored = await t.events.emit(t.projectId, 'email.sent', {});
      assert.deepEqual(ignored.delivery_ids, []);

      const enabled = await t.request('PATCH', `/v1/webhooks/${id}`, { body: { enabled: true } });
      assert.equal(enabled.status, 200);
      assert.equal(enabled.body.data.enabled, true);
      assert.equal(enabled.body.data.disabled_reason, null);
      assert.equal((await webhookRow(t, id)).failing_since, null);
      const again = await t.events.emit(t.projectId, 'email.sent', {});
      const [redelivered] = (await waitForEvent(t, again.id, settled)).deliveries;
      assert.equal(redelivered.status, 'succeeded');
    });

    test('deliveries of a webhook disabled before they were sent fail without an attempt', async () => {
      const t = await h.app(engine, { worker: false });
      const receiver = await h.receiver();
      const id = await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});
      await t.request('PATCH', `/v1/webhooks/${id}`, { body: { enabled: false } });
      await t.startWorker();

      const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(delivery.status, 'failed');
      assert.equal(delivery.attempts, 0);
      assert.match(delivery.last_error, /webhook is disabled/);
      assert.equal(receiver.requests.length, 0);
      assert.equal((await attemptsOf(t, delivery.id)).length, 0);
    });

    test('retry-after on 429/503 is honoured, up to twice the next step', async () => {
      // The clock stands still unless the test moves it: a retry comes due only when the test says so.
      const clock = testClock({ frozen: true });
      const t = await h.app(engine, { clock, worker: { schedule: [0, 200, 200] } });
      const [sooner, later] = await Promise.all([h.receiver(), h.receiver()]);
      sooner.script({ status: 503, headers: { 'retry-after': '0' } });
      later.script({ status: 429, headers: { 'retry-after': '30' } });
      await createWebhook(t, { url: sooner.url, events: ['email.sent'] });
      const laterId = await createWebhook(t, { url: later.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});

      // retry-after: 0 replaces the 200 ms step: the retry comes with the clock standing still.
      await Promise.all([sooner.waitFor(2), later.waitFor(1)]);
      await t.worker!.whenIdle();
      assert.equal(sooner.requests.length, 2);
      assert.equal(later.requests.length, 1);
      // retry-after: 30 s is capped at 2 × 200 ms.
      const laterDelivery = async () =>
        (await t.request('GET', `/v1/events/${event.id}`)).body.deliveries.find(
          (delivery: any) => delivery.webhook_id === laterId,
        );
      const waiting = await laterDelivery();
      assert.equal(waiting.status, 'pending');
      assert.equal(Date.parse(waiting.next_attempt_at) - Date.parse(waiting.last_attempt_at), 400);
      clock.advance(399);
      await t.worker!.whenIdle();
      assert.equal(later.requests.length, 1, 'not retried before the 400 ms are up');
      clock.advance(1);
      await later.waitFor(2);

      const detail = await waitForEvent(t, event.id, settled);
      assert.ok(detail.deliveries.every((delivery: any) => delivery.status === 'succeeded'));
    });

    test('a receiver that does not answer in time fails the attempt', async () => {
      const t = await h.app(engine, { worker: { schedule: [0], timeoutMs: 300 } });
      const receiver = await h.receiver({ fallback: { hang: true } });
      await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});

      const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(delivery.status, 'failed');
      assert.equal(delivery.last_status_code, null);
      assert.equal(delivery.last_error, 'timed out after 300 ms');
      const [attempt] = await attemptsOf(t, delivery.id);
      // The timeout ended it (the error says so); how much later the machine got to it is not asserted.
      assert.ok(attempt!.duration_ms >= 290, `took ${attempt!.duration_ms} ms`);
      assert.equal(attempt!.response_excerpt, null);
    });

    test('a refused connection fails the attempt', async () => {
      const t = await h.app(engine, { worker: { schedule: [0] } });
      const receiver = await startReceiver();
      const url = receiver.url;
      await receiver.close();
      await createWebhook(t, { url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});
      const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(delivery.status, 'failed');
      assert.equal(delivery.last_error, 'connection refused (ECONNREFUSED)');
    });

    test('SSRF: a name that resolved public at validation but private at connect is refused', async () => {
      const t = await h.app(engine, {
        allowPrivateUrls: false,
        // Validation sees a public address; the worker's connect-time lookup gets loopback (DNS rebinding).
        resolver: async () => ['93.184.216.34'],
        worker: { schedule: [0], resolver: async () => ['127.0.0.1'] },
      });
      const receiver = await h.receiver();
      const port = new URL(receiver.url).port;
      await createWebhook(t, { url: `https://hooks.rebind.test:${port}/hook`, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});

      const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(delivery.status, 'failed');
      assert.equal(delivery.last_status_code, null);
      assert.equal(
        delivery.last_error,
        "refused to connect: 'hooks.rebind.test' resolves to 127.0.0.1, a loopback, private or link-local address",
      );
      const [attempt] = await attemptsOf(t, delivery.id);
      assert.equal(attempt!.error, delivery.last_error);
      assert.equal(receiver.requests.length, 0);
    });

    test('a webhook that hangs does not slow the others', async () => {
      const t = await h.app(engine, {
        worker: { schedule: [0], timeoutMs: 5000, concurrencyPerEndpoint: 2 },
      });
      const [hanging, healthy] = await Promise.all([
        h.receiver({ fallback: { hang: true } }),
        h.receiver({ fallback: { status: 204, delayMs: 10 } }),
      ]);
      const hangingId = await createWebhook(t, { url: hanging.url, events: ['email.sent'] });
      await createWebhook(t, { url: healthy.url, events: ['email.sent'] });

      for (let i = 0; i < 10; i += 1) await t.events.emit(t.projectId, 'email.sent', { n: i });
      await hanging.waitFor(2);
      await healthy.waitFor(10, 20_000);
      // All ten went while the hanging webhook's first two attempts were still open (none has timed out
      // and been recorded, none after them has started): they did not wait for its slots to free up.
      assert.equal(hanging.requests.length, 2);
      assert.equal(hanging.concurrency.current, 2);
      assert.equal(hanging.concurrency.max, 2);
      assert.equal((await attemptsIn(t.database.handle, { webhookId: hangingId })).length, 0);
    });

    test('concurrency is bounded per webhook and overall', async () => {
      const t = await h.app(engine, { worker: { schedule: [0], concurrency: 3, concurrencyPerEndpoint: 2 } });
      const overall = createTracker();
      const receivers = await Promise.all(
        [1, 2, 3].map(() => h.receiver({ fallback: { status: 200, delayMs: 80 }, tracker: overall })),
      );
      for (const receiver of receivers) await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      for (let i = 0; i < 5; i += 1) await t.events.emit(t.projectId, 'email.sent', { n: i });
      await Promise.all(receivers.map((receiver) => receiver.waitFor(5)));
      assert.equal(overall.max, 3, 'at most 3 attempts at once overall');
      for (const receiver of receivers) assert.ok(receiver.concurrency.max <= 2, 'at most 2 per webhook');
    });

    test('a webhook with no success for 5 days of failures is disabled; a success resets the count', async () => {
      let offset = 0;
      const clock: Clock = { now: () => new Date(Date.now() + offset) };
      const t = await h.app(engine, { worker: { schedule: [0], clock } });
      const receiver = await h.receiver({ fallback: { status: 500 } });
      const id = await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const deliver = async () => {
        const event = await t.events.emit(t.projectId, 'email.sent', {});
        return (await waitForEvent(t, event.id, settled)).deliveries[0];
      };
      const day = 86_400_000;

      // The streak shows on the webhook (what the dashboard's list says: "failing since …"), within the second
      // the API keeps a project's streaks, and ends with a success.
      const streakIs = (expected: string | null) =>
        until(
          async () => {
            const one = (await t.request('GET', `/v1/webhooks/${id}`)).body.data.failing_since;
            const listed = (await t.request('GET', '/v1/webhooks')).body.data;
            const inList = listed.find((webhook: { id: string }) => webhook.id === id).failing_since;
            return one === expected && inList === expected;
          },
          5000,
          `failing_since ${expected} in the webhook and the list`,
        );
      await streakIs(null);
      assert.equal((await deliver()).status, 'failed');
      assert.ok((await webhookRow(t, id)).failing_since);
      await streakIs((await webhookRow(t, id)).failing_since);
      receiver.script({ status: 200 });
      assert.equal((await deliver()).status, 'succeeded');
      await streakIs(null);
      let row = await webhookRow(t, id);
      assert.equal(row.failing_since, null);
      assert.ok(row.last_success_at);

      assert.equal((await deliver()).status, 'failed');
      const since = (await webhookRow(t, id)).failing_since!;
      offset = 4 * day;
      await deliver();
      row = await webhookRow(t, id);
      assert.equal(Boolean(row.enabled), true, 'four days of failures are not enough');
      assert.equal(row.failing_since, since);

      offset = 5 * day + 60_000;
      await deliver();
      const webhook = (await t.request('GET', `/v1/webhooks/${id}`)).body.data;
      assert.equal(webhook.enabled, false);
      await streakIs(since);
      assert.equal(
        webhook.disabled_reason,
        `Every delivery attempt has failed since ${since}; the webhook was disabled at ${(await webhookRow(t, id)).updated_at}.`,
      );
    });

    test('competing workers send each delivery once', async () => {
      const t = await h.app(engine, { worker: false });
      const receivers = await Promise.all([h.receiver(), h.receiver()]);
      for (const receiver of receivers) await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const workers = await Promise.all(
        [1, 2, 3].map(() => t.startWorker({ concurrency: 4, concurrencyPerEndpoint: 2 })),
      );
      const emitted = await Promise.all(
        Array.from({ length: 30 }, (_, n) => t.events.emit(t.projectId, 'email.sent', { n })),
      );
      for (const receiver of receivers) await receiver.waitFor(30, 10_000);
      for (const event of emitted) await waitForEvent(t, event.id, settled);
      // Every worker has looked again, found nothing and holds nothing: no attempt is still on its way.
      await Promise.all(workers.map((worker) => worker.whenIdle()));
      for (const receiver of receivers) {
        const ids = receiver.requests.map((request) => request.headers['webhook-id']);
        assert.equal(ids.length, 30);
        assert.equal(new Set(ids).size, 30, 'no event sent twice to one webhook');
      }
      assert.equal((await attemptsIn(t.database.handle)).length, 60);
    });

    test("a dead worker's claim comes back when its lease runs out", async () => {
      const clock = testClock();
      const t = await h.app(engine, { worker: false, clock });
      const receiver = await h.receiver();
      await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});
      const leaseEnds = clock.now().getTime() + 60_000;
      await t.database.handle.db
        .updateTable('deliveries')
        .set({ locked_by: 'dead-worker', locked_until: new Date(leaseEnds).toISOString() })
        .execute();
      const worker = await t.startWorker();
      await worker.whenIdle();
      assert.equal(receiver.requests.length, 0, 'not before the lease ran out');
      clock.advance(leaseEnds - clock.now().getTime() + 1);
      worker.wake();
      await receiver.waitFor(1);
      const [delivery] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(delivery.status, 'succeeded');
    });

    test('a worker that lost its lease cannot overwrite the new holder; its attempt is still logged', async () => {
      const t = await h.app(engine, { worker: false });
      const receiver = await h.receiver();
      await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});
      const repo = createDeliveryQueue(t.database.handle.db, engine, createWebhookRepo(t.database.handle.db));
      const now = new Date();
      const claim = (workerId: string, at: Date) =>
        repo.claim({ workerId, now: at, until: new Date(at.getTime() + 1000) }, { limit: 10 });
      const [claimed] = await claim('worker-a', now);
      assert.ok(claimed);
      assert.deepEqual(await claim('worker-b', now), [], 'held while the lease runs');
      const [stolen] = await claim('worker-b', new Date(now.getTime() + 2000));
      assert.equal(stolen?.id, claimed.id, 'taken over once the lease ran out');

      const outcome = await repo.recordOutcome({
        delivery: {
          id: claimed.id,
          projectId: t.projectId,
          eventId: event.id,
          webhookId: claimed.webhookId,
          holdsAttempt: false,
        },
        workerId: 'worker-a',
        now: new Date().toISOString(),
        attempt: {
          attemptedAt: now.toISOString(),
          statusCode: 500,
          durationMs: 5,
          error: 'late',
          responseExcerpt: null,
        },
        status: 'failed',
        lastError: 'late',
        health: { ok: false, disableAfterMs: 1 },
      });
      assert.deepEqual(outcome, { held: false });
      const row = await t.database.handle.db
        .selectFrom('deliveries')
        .selectAll()
        .where('id', '=', claimed.id)
        .executeTakeFirstOrThrow();
      assert.equal(row.status, 'pending');
      assert.equal(row.locked_by, 'worker-b');
      assert.equal(row.attempts, 0);
      assert.equal((await attemptsOf(t, claimed.id)).length, 1);
      assert.equal(Boolean((await webhookRow(t, claimed.webhookId)).enabled), true);
    });

    test('the row keeps the latest attempt; a retry moves the earlier one to the log, also past a lost lease', async () => {
      const t = await h.app(engine, { worker: false });
      const receiver = await h.receiver();
      await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});
      const repo = createDeliveryQueue(t.database.handle.db, engine, createWebhookRepo(t.database.handle.db));
      const start = Date.now();
      const at = (seconds: number) => new Date(start + seconds * 1000);
      const claim = async (workerId: string, seconds: number) =>
        repo.claim({ workerId, now: at(seconds), until: at(seconds + 1) }, { limit: 10 });
      const record = (workerId: string, claimed: ClaimedDelivery, seconds: number, statusCode: number) =>
        repo.recordOutcome({
          delivery: { ...claimed, projectId: t.projectId, eventId: event.id },
          workerId,
          now: at(seconds).toISOString(),
          attempt: {
            attemptedAt: at(seconds).toISOString(),
            statusCode,
            durationMs: seconds,
            error: statusCode === 200 ? null : `the receiver answered ${statusCode}`,
            responseExcerpt: `by ${workerId}`,
          },
          ...(statusCode === 200
            ? { status: 'succeeded' as const, lastError: null, health: { ok: true as const } }
            : {
                status: 'pending' as const,
                nextAttemptAt: at(seconds + 1).toISOString(),
                lastError: `the receiver answered ${statusCode}`,
                health: { ok: false as const, disableAfterMs: 60_000 },
              }),
        });

      const [first] = await claim('worker-a', 0);
      assert.equal(first?.holdsAttempt, false);
      assert.deepEqual(await record('worker-a', first, 0, 500), { held: true });
      assert.equal(
        (await t.database.handle.db.selectFrom('delivery_attempts').selectAll().execute()).length,
        0,
      );
      const [second] = await claim('worker-a', 2);
      assert.equal(second?.holdsAttempt, true);
      // worker-a's lease runs out and worker-b takes the delivery over; worker-a's late outcome is only logged.
      const [third] = await claim('worker-b', 4);
      assert.equal(third?.holdsAttempt, true);
      assert.deepEqual(await record('worker-a', second!, 3, 503), { held: false });
      assert.deepEqual(await record('worker-b', third!, 5, 200), { held: true });

      const attempts = await attemptsOf(t, first.id);
      assert.deepEqual(
        attempts.map((attempt) => [attempt.status_code, attempt.duration_ms, attempt.response_excerpt]),
        [
          [500, 0, 'by worker-a'],
          [503, 3, 'by worker-a'],
          [200, 5, 'by worker-b'],
        ],
      );
      const logged = await t.database.handle.db.selectFrom('delivery_attempts').select('id').execute();
      assert.equal(logged.length, 2, 'the latest is kept in the row');
      const [shown] = (await waitForEvent(t, event.id, settled)).deliveries;
      assert.equal(shown.attempts, 3);
      assert.deepEqual(
        shown.attempt_log.map((attempt: { status_code: number }) => attempt.status_code),
        [500, 503, 200],
      );
    });

    test(
      engine === 'postgres'
        ? 'a worker in another process wakes on NOTIFY, not its poll'
        : 'a worker in another process finds new deliveries by polling',
      async () => {
        const t = await h.app(engine, { worker: false });
        const receiver = await h.receiver();
        await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
        // No in-process notifier: only NOTIFY (PostgreSQL) or the poll can wake this worker.
        const worker = await t.startWorker({
          notifier: null,
          pollIntervalMs: engine === 'postgres' ? 60_000 : 300,
        });
        // It has looked, found nothing, and sleeps until its poll (LISTEN was open before its first look).
        await worker.whenIdle();
        await t.events.emit(t.projectId, 'email.sent', {});
        // On PostgreSQL the poll is a minute away, past this hang guard: only NOTIFY can have woken it.
        await receiver.waitFor(1, 20_000);
      },
    );

    test('stop() waits for attempts in flight and records them', async () => {
      const t = await h.app(engine, { worker: false });
      const receiver = await h.receiver({ fallback: { status: 200, delayMs: 300 } });
      await createWebhook(t, { url: receiver.url, events: ['email.sent'] });
      // A grace far past the receiver's 300 ms: the test's 1 s was a wall-clock bound in disguise, and a
      // loaded machine (CI) let the attempt run past it, so stop() aborted it and the delivery stayed pending.
      const worker = await t.startWorker({ stopGraceMs: 60_000 });
      const event = await t.events.emit(t.projectId, 'email.sent', {});
      await receiver.waitFor(1);
      await worker.stop();
      const detail = await t.request('GET', `/v1/events/${event.id}`);
      assert.equal(detail.body.deliveries[0].status, 'succeeded');
    });

    test('stop() leaves no timer behind to keep the process alive', async () => {
      const t = await h.app(engine, { worker: false });
      const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
      const before = timers();
      const worker = await t.startWorker({ stopGraceMs: 60_000, pollIntervalMs: 60_000 });
      await worker.stop();
      assert.ok(timers() <= before, `${timers()} timers after stop, ${before} before the worker started`);
    });

    test('deleting a webhook deletes its deliveries', async () => {
      const t = await h.app(engine, { worker: false });
      const id = await createWebhook(t, { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] });
      const event = await t.events.emit(t.projectId, 'email.sent', {});
      assert.equal(event.delivery_ids.length, 1);
      assert.equal((await t.request('DELETE', `/v1/webhooks/${id}`)).status, 200);
      assert.deepEqual((await t.request('GET', `/v1/events/${event.id}`)).body.deliveries, []);
    });
  });
}
