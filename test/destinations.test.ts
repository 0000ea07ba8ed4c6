import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Clock } from '../src/lib/clock.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, type TestApp } from './helpers/app.ts';
import {
  DESTINATIONS_WORKER_SETTINGS,
  OPERATOR_TOKEN,
  startDestinationsApp,
} from './helpers/destinations.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { receivedEvents } from './helpers/engagement.ts';
import type { Receiver } from './helpers/receiver.ts';
import {
  numberedAddresses,
  publishOwnMx,
  sendEach,
  startThrottlingServer,
  type ThrottlingServer,
} from './helpers/throttling-smtp.ts';
import { startSendingWorker, testDirectTransport } from './helpers/sending.ts';
import { until } from './helpers/until.ts';

// Issue 38, destinations and adaptive shaping in direct mode, end to end: a throttling provider (two
// connections at once, ten messages a minute, answering 421 4.7.28 past that, dropping a connection kept for
// a second message, so each message after the first burst asks for a connection) and an unthrottled one, each
// the MX of its domain on a loopback address of its own, found through a real DNS server. Time is the test's
// clock, moved by the test: the throttled destination needs minutes of it, the other none.

const THROTTLED = { connections: 2, perMinute: 10 };

for (const engine of ALL_ENGINES) {
  describe(`destinations in direct mode (${engine})`, { skip: engineSkip(engine) }, () => {
    let dns: TestDnsServer;
    let app: TestApp;
    let throttled: ThrottlingServer;
    let open: ThrottlingServer;
    let worker: SendingWorker;
    let receiver: Receiver;
    // The test's clock: still unless the test moves it.
    let nowMs = Date.parse('2026-03-02T10:00:01.000Z');
    const clock: Clock = { now: () => new Date(nowMs) };

    before(async () => {
      dns = await startDnsServer();
      const [throttledAddress, openAddress] = publishOwnMx(dns, 'throttled.test', 'open.test');
      throttled = await startThrottlingServer({
        address: throttledAddress,
        now: () => nowMs,
        dropKept: true,
        ...THROTTLED,
      });
      open = await startThrottlingServer({ address: openAddress, now: () => nowMs });
      ({ app, receiver } = await startDestinationsApp(engine, clock));
      // Four connections per destination and eight overall: twice what the throttled one takes.
      worker = await startSendingWorker(app, {
        transport: testDirectTransport(dns.address),
        clock,
        settings: DESTINATIONS_WORKER_SETTINGS,
      });
    });
    after(async () => {
      await worker?.stop();
      await app?.close();
      await throttled?.close();
      await open?.close();
      await dns?.close();
      await receiver?.close();
    });

    const send = (to: string[]) => sendEach(app, to);
    const addresses = numberedAddresses;

    test('a throttling destination is slowed to what it takes; the other is not held up at all', async () => {
      // Without the throttled destination: all of it arrives with no time passing.
      await send(addresses('open.test', 0, 20));
      await until(
        () => {
          worker.wake();
          return open.received.length === 20;
        },
        20_000,
        'the unthrottled mail, alone',
      );

      // With it, and its mail first in the queue: the unthrottled mail still all arrives with no time
      // passing, while the throttled destination has taken at most its minute's ten.
      const startedAt = nowMs;
      const throttledIds = await send(addresses('throttled.test', 0, 40));
      await send(addresses('open.test', 20, 20));
      // The clock stands still, so the worker's poll (a look over the queue each poll interval of the
      // clock) never comes due: the test stands in for it.
      await until(
        () => {
          worker.wake();
          return open.received.length === 40;
        },
        20_000,
        () =>
          `the unthrottled mail beside the throttled: ${open.received.length - 20} of 20 arrived, the ` +
          `throttled ${throttled.received.length}, refused ${throttled.refusedConnections.length} + ` +
          `${throttled.refusedMessages.length}`,
      );
      assert.equal(nowMs, startedAt, 'no time passed');
      assert.ok(throttled.received.length <= THROTTLED.perMinute, `${throttled.received.length} arrived`);

      // The metrics show the destinations by provider, the rest as `other` (two here): the throttled mail waits
      // (once the worker has given back what it held for the suspended destination: until then it is leased).
      let scrape: { status: number; body: string } = { status: 0, body: '' };
      const gauge = (name: string) =>
        Number(new RegExp(`^${name}\\{destination="other"\\} (\\d+)$`, 'm').exec(scrape.body)?.[1] ?? NaN);
      await until(
        async () => {
          worker.wake();
          scrape = await app.request('GET', '/metrics', {
            key: null,
            headers: { authorization: `Bearer ${OPERATOR_TOKEN}` },
          });
          assert.equal(scrape.status, 200);
          return gauge('postwire_destination_queue_depth') >= 40 - throttled.received.length;
        },
        20_000,
        () => scrape.body,
      );
      assert.ok(gauge('postwire_destinations_suspended') <= 2);
      assert.doesNotMatch(scrape.body, /postwire_destination_rate_per_minute\{destination="other"/);

      // The throttled mail arrives as time passes, each minute at most what it takes.
      for (let step = 0; throttled.received.length < 40; step++) {
        assert.ok(step < 200, `stuck at ${throttled.received.length} of 40`);
        await worker.whenIdle();
        nowMs += 10_000;
        worker.wake();
      }
      assert.deepEqual(
        [...new Set(throttled.received)].sort(),
        addresses('throttled.test', 0, 40).sort(),
        'every message once',
      );
      // The connection cap was found in the first burst (while the clock stood still): every connection
      // asked for since, refused or not, came with at most the cap open counting itself. The server drops a
      // kept connection at its next message (dropKept), so the rest needed connections of their own.
      const later = throttled.attempts.filter((attempt) => attempt.at > startedAt);
      assert.ok(later.length > 0, 'connections after the first burst');
      const overCap = later.filter((attempt) => attempt.atOnce > THROTTLED.connections);
      assert.deepEqual(overCap, [], 'never more than the cap after the first deferrals');
      const deferrals = throttled.refusedConnections.length + throttled.refusedMessages.length;
      assert.ok(deferrals <= 40 / 5, `${deferrals} deferrals for 40 messages`);
      assert.ok(deferrals >= 1, 'the destination deferred');

      // The operator sees both destinations: the throttled one with its deferrals and lowered rate.
      const listed = await app.request('GET', '/v1/destinations', {
        key: null,
        headers: { authorization: `Bearer ${OPERATOR_TOKEN}` },
      });
      assert.equal(listed.status, 200, JSON.stringify(listed.body));
      const byKey = new Map(listed.body.data.map((entry: any) => [entry.key, entry]));
      const slowed: any = byKey.get('mx.throttled.test');
      assert.equal(slowed.deferrals, deferrals);
      assert.match(slowed.last_deferral, /^421 4\.7\./);
      assert.deepEqual(slowed.mx_hosts, ['mx.throttled.test']);
      assert.equal(slowed.provider, null);
      assert.equal(slowed.queued + slowed.waiting, 0);
      assert.ok(slowed.rate_per_minute === null || slowed.rate_per_minute <= 2 * THROTTLED.perMinute);
      const fast: any = byKey.get('mx.open.test');
      assert.equal(fast.deferrals, 0);
      assert.equal(fast.rate_per_minute, null, 'never limited');
      assert.equal(fast.suspended_until, null);
      const noKey = await app.request('GET', '/v1/destinations', { key: null });
      assert.equal(noKey.status, 401);
      assert.equal((await app.request('GET', '/v1/destinations')).status, 401, 'an API key opens nothing');

      // Each suspension was an event, and so was its end, to the project whose mail waited; none for the other.
      await until(
        () => {
          const kinds = receivedEvents(receiver).map((event) => event.type);
          const suspended = kinds.filter((kind) => kind === 'destination.suspended').length;
          return suspended > 0 && kinds.length === 2 * suspended;
        },
        20_000,
        () => `events: ${JSON.stringify(receivedEvents(receiver).map((event) => event.type))}`,
      );
      const events = receivedEvents(receiver);
      assert.ok(
        events.every((event) => event.data.destination === 'mx.throttled.test'),
        'only the throttled destination',
      );
      const byTime = (kind: string) =>
        events
          .filter((event) => event.type === kind)
          .sort((x, y) => Date.parse(x.created_at) - Date.parse(y.created_at));
      const [suspended] = byTime('destination.suspended');
      assert.equal(suspended.data.source, 'default');
      assert.equal(suspended.data.provider, null);
      assert.match(suspended.data.last_deferral, /^421 4\.7\./);
      assert.ok(Date.parse(suspended.data.suspended_until) > startedAt);
      assert.ok(suspended.data.rate_per_minute >= 1);
      const [resumed] = byTime('destination.resumed');
      assert.equal(resumed.data.suspended_until, null);
      assert.ok(
        Date.parse(resumed.created_at) >= Date.parse(suspended.data.suspended_until),
        'after it ended',
      );

      // Throttles are not attempts: every recipient is delivered with attempts to spare.
      for (const id of throttledIds) {
        const email = (await app.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(email.status, 'delivered');
        assert.equal(email.recipients[0].attempts, 1, JSON.stringify(email.recipients[0]));
      }
    });
  });
}
