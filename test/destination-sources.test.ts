import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import type { Clock } from '../src/lib/clock.ts';
import { createSourceChooser } from '../src/modules/destinations/source-ips.ts';
import { createSourcedShaping } from '../src/modules/destinations/source-shaping.ts';
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
import { ownLoopbackAddresses } from './helpers/smtp.ts';
import {
  numberedAddresses,
  publishOwnMx,
  sendEach,
  startThrottlingServer,
  type ThrottlingServer,
} from './helpers/throttling-smtp.ts';
import { startSendingWorker, testDirectTransport } from './helpers/sending.ts';
import { until } from './helpers/until.ts';

// Issue 38, destinations per sending source (DIRECT_SOURCE_IPS), end to end in direct mode: two source
// addresses of the test's own on loopback (bound with nodemailer's localAddress), two mail servers found
// through a real DNS server. The throttling one rate-limits only mail from the first address (four a minute,
// then 421 4.7.28, Gmail's text, to that address alone), as a provider judges each connecting IP. The
// deferral slows and suspends only the (destination, first address) pair: the destination's mail keeps
// leaving from the second address, with no time passing; the first keeps its back-off on the test's clock.

const PER_MINUTE = 4;

test('the address an attempt leaves from: one that may start now, preferred ones first, else in turn', () => {
  const now = Date.parse('2026-03-02T10:00:00.000Z');
  const shaping = createSourcedShaping({ sources: ['192.0.2.10', '192.0.2.11'] });
  const lane = shaping.learn('shop.example', ['mx.shop.example'], now).destination;
  assert.equal(lane, 'mx.shop.example');
  const none = () => 0;
  // Neither is paced: in turn.
  assert.deepEqual(
    [1, 2, 3].map(() => shaping.start(lane, now, none, 4)),
    ['192.0.2.10', '192.0.2.11', '192.0.2.10'],
  );
  assert.equal(shaping.start(lane, now, none, 4, ['192.0.2.11']), '192.0.2.11', 'a preferred one first');
  // A deferral to the first suspends its pair only: the second takes every start.
  const throttled = shaping
    .of('192.0.2.10')
    .observe('shop.example', '421 4.7.28 rate limited', false, now, 0);
  assert.equal(throttled?.source, '192.0.2.10');
  assert.equal(throttled.suspendedUntil, now + 60_000);
  assert.equal(shaping.of('192.0.2.11').suspendedUntil('shop.example', now), undefined);
  assert.deepEqual(
    [1, 2].map(() => shaping.start(lane, now, none, 4, ['192.0.2.10'])),
    ['192.0.2.11', '192.0.2.11'],
  );
  // Its recipients wait for the first address free (the second: now), not for the suspension's end.
  assert.equal(shaping.resumesAt('shop.example', throttled, now), now);
  // The lane may start now; with the second at its connections, when one of them ends (not at the first's end).
  assert.equal(shaping.startAt(lane, now, none, 4), now);
  const busy = (source: string) => (source === '192.0.2.11' ? 4 : 0);
  assert.equal(shaping.startAt(lane, now, busy, 4), Infinity);
  assert.equal(shaping.start(lane, now, busy, 4), undefined);
  // Paced by one source only: not a paced lane for the claims.
  assert.deepEqual(shaping.startable(now, 1000), []);
  // Without source addresses: one source, `default`.
  const one = createSourcedShaping();
  one.learn('shop.example', ['mx.shop.example'], now);
  assert.deepEqual(one.sources, ['default']);
  assert.equal(one.start(lane, now, none, 4), 'default');
});

for (const engine of ALL_ENGINES) {
  describe(`destinations per source address (${engine})`, { skip: engineSkip(engine) }, () => {
    let dns: TestDnsServer;
    let app: TestApp;
    let throttled: ThrottlingServer;
    let open: ThrottlingServer;
    let worker: SendingWorker;
    let receiver: Receiver;
    let slowed = '';
    let free = '';
    let nowMs = Date.parse('2026-03-02T10:00:01.000Z');
    const clock: Clock = { now: () => new Date(nowMs) };

    before(async () => {
      dns = await startDnsServer();
      const [throttledAddress, openAddress] = publishOwnMx(dns, 'throttled.test', 'open.test');
      [slowed = '', free = ''] = ownLoopbackAddresses(2, [throttledAddress, openAddress]);
      throttled = await startThrottlingServer({
        address: throttledAddress,
        now: () => nowMs,
        perMinute: PER_MINUTE,
        onlyFrom: slowed,
      });
      open = await startThrottlingServer({ address: openAddress, now: () => nowMs });
      ({ app, receiver } = await startDestinationsApp(engine, clock));
      const sourceIps = loadConfig(
        { DIRECT_SOURCE_IPS: `${slowed} helo=a.mail.example.com; ${free} helo=b.mail.example.com` },
        { stdoutIsTTY: false },
      ).sourceIps;
      worker = await startSendingWorker(app, {
        transport: testDirectTransport(dns.address),
        clock,
        settings: DESTINATIONS_WORKER_SETTINGS,
        sources: createSourceChooser({
          sources: sourceIps,
          repo: app.services.repositories.warmups,
          defaultSchedule: [50],
        }),
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

    const operator = { key: null, headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } };
    /** How many of `server`'s messages (from the `since`-th) came from each address. */
    const fromEach = (server: ThrottlingServer, since = 0) => {
      const counts: Record<string, number> = {};
      for (const from of server.receivedFrom.slice(since)) counts[from] = (counts[from] ?? 0) + 1;
      return counts;
    };
    async function arrived(server: ThrottlingServer, count: number, what: string) {
      await until(
        () => {
          worker.wake();
          return server.received.length >= count;
        },
        20_000,
        () =>
          `${what}: ${server.received.length} of ${count} (${JSON.stringify(fromEach(server))}, refused ` +
          `${server.refusedMessages.length})`,
      );
      await worker.whenIdle();
    }
    async function destinationsOf(key: string) {
      const listed = await app.request('GET', '/v1/destinations', operator);
      assert.equal(listed.status, 200, JSON.stringify(listed.body));
      return new Map<string, any>(
        listed.body.data.filter((entry: any) => entry.key === key).map((entry: any) => [entry.source, entry]),
      );
    }

    test('a deferral to one source address suspends only its pair; the other keeps sending', async () => {
      const startedAt = nowMs;
      const ids = await sendEach(app, numberedAddresses('throttled.test', 0, 30));
      await sendEach(app, numberedAddresses('open.test', 0, 10));
      // The clock stands still: all of it arrives, what the first address could not take from the second.
      await arrived(throttled, 30, 'the throttled destination');
      await arrived(open, 10, 'the other destination');
      assert.equal(nowMs, startedAt, 'no time passed');
      assert.deepEqual(
        [...new Set(throttled.received)].sort(),
        numberedAddresses('throttled.test', 0, 30).sort(),
        'every message once',
      );
      const first = fromEach(throttled);
      assert.ok((first[slowed] ?? 0) <= PER_MINUTE, JSON.stringify(first));
      assert.equal(first[slowed]! + first[free]!, 30, JSON.stringify(first));
      assert.ok(throttled.refusedFrom.length >= 1, 'the first address was deferred');
      assert.ok(throttled.refusedFrom.every((refusal) => refusal.from === slowed));
      // Deferred, not failed: each was delivered on its one counted attempt.
      for (const id of ids) {
        const email = (await app.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(email.status, 'delivered');
        assert.equal(email.recipients[0].attempts, 1, JSON.stringify(email.recipients[0]));
      }

      // The operator sees the destination once per address: only the first's pair suspended and slowed. (The
      // states are written at most once a second of the clock: the deferral's, at the worker's next look.)
      nowMs += 1000;
      let pairs = new Map<string, any>();
      await until(
        async () => {
          worker.wake();
          pairs = await destinationsOf('mx.throttled.test');
          return pairs.get(slowed)?.deferrals > 0;
        },
        20_000,
        () => JSON.stringify([...pairs.values()]),
      );
      assert.deepEqual([...pairs.keys()].sort(), [slowed, free].sort());
      const suspended = pairs.get(slowed);
      assert.equal(suspended.deferrals, throttled.refusedFrom.length);
      assert.match(suspended.last_deferral, /^421 4\.7\.28 /);
      assert.ok(Date.parse(suspended.suspended_until) > nowMs, JSON.stringify(suspended));
      assert.ok(suspended.rate_per_minute >= 1 && suspended.rate_per_minute <= PER_MINUTE);
      const other = pairs.get(free);
      assert.equal(other.deferrals, 0);
      assert.equal(other.suspended_until, null);
      assert.equal(other.rate_per_minute, null, 'never limited');
      for (const pair of (await destinationsOf('mx.open.test')).values()) assert.equal(pair.deferrals, 0);
      // The metrics say which address has destinations suspended.
      const scrape = await app.request('GET', '/metrics', operator);
      assert.equal(scrape.status, 200);
      const suspendedFor = (source: string) =>
        new RegExp(`^postwire_source_destinations_suspended\\{source="${source}"\\} (\\d+)$`, 'm').exec(
          scrape.body,
        )?.[1];
      assert.equal(suspendedFor(slowed), '1', scrape.body);
      assert.equal(suspendedFor(free), '0', scrape.body);
      const suspendedUntil = Date.parse(suspended.suspended_until);

      // While the first address is suspended for it, the destination's mail leaves from the second alone.
      const attemptsBefore = throttled.attempts.length;
      const receivedBefore = throttled.received.length;
      await sendEach(app, numberedAddresses('throttled.test', 30, 10));
      await arrived(throttled, receivedBefore + 10, 'during the back-off');
      assert.deepEqual(fromEach(throttled, receivedBefore), { [free]: 10 });
      assert.deepEqual(
        throttled.attempts.slice(attemptsBefore).filter((attempt) => attempt.from === slowed),
        [],
        'no connection from the suspended address',
      );

      // The suspension was an event naming the address; none for the other.
      await until(
        () => receivedEvents(receiver).some((event) => event.type === 'destination.suspended'),
        20_000,
        'the suspension event',
      );
      const events = receivedEvents(receiver);
      assert.ok(
        events.every((event) => event.data.source === slowed),
        JSON.stringify(events),
      );
      const [event] = events.filter((entry) => entry.type === 'destination.suspended');
      assert.equal(event.data.destination, 'mx.throttled.test');
      assert.match(event.data.last_deferral, /^421 4\.7\.28 /);

      // Past its back-off (and in the server's next minute), the first address sends again, at its lowered pace.
      nowMs = suspendedUntil + 1000;
      const laterReceived = throttled.received.length;
      await sendEach(app, numberedAddresses('throttled.test', 40, 10));
      await arrived(throttled, laterReceived + 10, 'after the back-off');
      const later = fromEach(throttled, laterReceived);
      assert.ok((later[slowed] ?? 0) >= 1, JSON.stringify(later));
      assert.equal(later[slowed]! + later[free]!, 10, JSON.stringify(later));
      // (`destination.resumed` goes to the projects with mail waiting for the destination then: none here, the
      // other address took it all.) The operator sees the pair no longer suspended.
      const after = await destinationsOf('mx.throttled.test');
      assert.equal(after.get(slowed).suspended_until, null, JSON.stringify(after.get(slowed)));
      assert.equal(after.get(slowed).suspensions, 1);
    });
  });
}
