import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import type { Clock } from '../src/lib/clock.ts';
import { createSourceChooser } from '../src/modules/destinations/source-ips.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { created } from './helpers/answers.ts';
import { ALL_ENGINES, engineSkip, startTestApp, TEST_SENDING_SETTINGS, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { receivedEvents } from './helpers/engagement.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
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

const OPERATOR_TOKEN = 'operator-token-0123456789';
const PER_MINUTE = 4;

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
      app = await startTestApp(engine, {
        allowPrivateUrls: true,
        clock,
        config: { metricsToken: OPERATOR_TOKEN },
        worker: true,
      });
      receiver = await startReceiver();
      await created(app, '/v1/webhooks', {
        url: receiver.url,
        events: ['destination.suspended', 'destination.resumed'],
      });
      const sourceIps = loadConfig(
        { DIRECT_SOURCE_IPS: `${slowed} helo=a.mail.example.com; ${free} helo=b.mail.example.com` },
        { stdoutIsTTY: false },
      ).sourceIps;
      worker = await startSendingWorker(app, {
        transport: testDirectTransport(dns.address),
        clock,
        settings: { ...TEST_SENDING_SETTINGS, concurrency: 8, schedule: [0, 1000, 1000], timeoutMs: 15_000 },
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
      await until(
        () => {
          worker.wake();
          return receivedEvents(receiver).some((entry) => entry.type === 'destination.resumed');
        },
        20_000,
        'the end of the suspension',
      );
      const resumed = receivedEvents(receiver).find((entry) => entry.type === 'destination.resumed');
      assert.equal(resumed.data.source, slowed);
    });
  });
}
