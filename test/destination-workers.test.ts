import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { DEFAULTS } from '../src/config.ts';
import type { Clock } from '../src/lib/clock.ts';
import { createHeartbeatRepo, silentWhenDead } from '../src/queue/heartbeats.repo.ts';
import { QUEUE_CHANNELS } from '../src/queue/notifier.ts';
import {
  createDestinationSync,
  type DestinationSync,
} from '../src/modules/destinations/destinations.sync.ts';
import { createSourcedShaping } from '../src/modules/destinations/source-shaping.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import {
  DESTINATIONS_WORKER_SETTINGS,
  OPERATOR_TOKEN,
  startDestinationsApp,
} from './helpers/destinations.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
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

// Issue 38: the sending workers alive (their heartbeats in queue_workers) share each destination's limits, so
// that two workers together keep to the connections and the pace of one, not twice them. First the share as
// the heartbeats come and go on the test's clock; then two fresh sending workers on one database against a
// mail server that refuses connections past its cap, its domain mapped to its destination by an earlier run.

const LANE = 'mx.shared.test';
const LIMITS = [{ pattern: LANE, limits: { connections: 4, perMinute: 60 } }];
const SILENT = silentWhenDead(DEFAULTS.workerDeadAfterMs);

for (const engine of ALL_ENGINES) {
  describe(`the live workers' share of a destination (${engine})`, { skip: engineSkip(engine) }, () => {
    let app: TestApp;
    let nowMs = Date.parse('2026-03-02T10:00:00.000Z');
    const clock: Clock = { now: () => new Date(nowMs) };

    before(async () => {
      app = await startTestApp(engine, { clock });
    });
    after(async () => {
      await app?.close();
    });

    test('each worker takes its share; a worker whose heartbeat stops leaves it to the others', async () => {
      const heartbeats = createHeartbeatRepo(app.database.handle.db);
      const beat = (id: string) => heartbeats.beat(id, QUEUE_CHANNELS.sending, new Date(nowMs));
      const [a, b] = ['worker-a', 'worker-b'].map((id) => ({
        id,
        destinations: createDestinationSync({
          repo: app.services.repositories.destinations,
          shaping: createSourcedShaping({ overrides: LIMITS }),
          overrides: LIMITS,
        }),
        alive: (now: number) => heartbeats.alive(id, QUEUE_CHANNELS.sending, new Date(now - SILENT)),
      }));
      const sync = (worker: typeof a) => worker!.destinations.sync(nowMs, worker!.alive);
      /**
       * What a worker may do with the destination: the connections it opens at once (one more opens with one
       * fewer open, none with them all), and how many it starts within a minute.
       */
      const share = (worker: typeof a) => {
        const { shaping } = worker!.destinations;
        const pair = shaping.of('default');
        let connections = 0;
        while (pair.startAt(LANE, nowMs, connections) === nowMs) connections += 1;
        assert.equal(pair.connectionLimitsOf('shared.test')?.connections, connections, 'kept open');
        return { connections, startsInAMinute: new Map(shaping.startable(nowMs, 60_000)).get(LANE) };
      };
      const half = { connections: 2, startsInAMinute: 30 };
      const whole = { connections: 4, startsInAMinute: 60 };

      await beat(a!.id);
      await beat(b!.id);
      for (const worker of [a, b]) {
        worker!.destinations.shaping.learn('shared.test', ['mx.shared.test'], nowMs);
        await sync(worker);
      }
      assert.deepEqual(share(a), half);
      assert.deepEqual(share(b), half);

      // The second worker's heartbeat stops: once it is as good as dead, the first has the whole limit.
      nowMs += SILENT / 2;
      await beat(a!.id);
      await sync(a);
      assert.deepEqual(share(a), half, 'still alive: silent for less than it takes to be dead');
      nowMs += SILENT / 2 + 1;
      await beat(a!.id);
      await sync(a);
      assert.deepEqual(share(a), whole);

      // It beats again: shared again, at the first worker's next read.
      nowMs += 1000;
      await beat(b!.id);
      await sync(a);
      assert.deepEqual(share(a), half);

      // It stops (a stopped worker forgets its heartbeat): the whole limit at the first's next read, which comes
      // at most once a second (the count is read with the destinations' states).
      await heartbeats.forget([b!.id]);
      await sync(a);
      assert.deepEqual(share(a), half, 'not read again within the second');
      nowMs += 1000;
      await beat(a!.id);
      await sync(a);
      assert.deepEqual(share(a), whole);

      // More workers than connections: each still has one, and its share of the pace.
      for (const id of ['worker-c', 'worker-d', 'worker-e', 'worker-f']) await beat(id);
      nowMs += 1000;
      await sync(a);
      assert.deepEqual(share(a), { connections: 1, startsInAMinute: 12 });
    });
  });

  describe(`a destination another worker recorded (${engine})`, { skip: engineSkip(engine) }, () => {
    let app: TestApp;
    const nowMs = Date.parse('2026-03-02T10:00:00.000Z');
    before(async () => {
      app = await startTestApp(engine, { clock: { now: () => new Date(nowMs) } });
    });
    after(async () => {
      await app?.close();
    });

    test('a worker that learns it, or claims a domain mapped to it, starts from its shared state', async () => {
      const worker = () =>
        createDestinationSync({
          repo: app.services.repositories.destinations,
          shaping: createSourcedShaping(),
        });
      // One worker sends to first.test and is told to slow down: the destination is suspended for a minute.
      const first = worker();
      first.shaping.learn('first.test', ['mx.recorded.test'], nowMs);
      await first.learned('first.test', 'mx.recorded.test', nowMs);
      const throttled = first.shaping
        .of('default')
        .observe('first.test', '421 4.7.28 [192.0.2.1] rate limited', false, nowMs, 0);
      assert.equal(throttled?.suspendedUntil, nowMs + 60_000);
      // Written a second after its row was first written (at most once a second).
      const later = nowMs + 1000;
      await first.flush(later);

      // Another learns second.test's MX hosts, the same destination's: it is suspended for it too, and it
      // writes nothing over the row (before, the destination's starting state, unsuspended).
      const second = worker();
      await second.sync(later);
      second.shaping.learn('second.test', ['mx.recorded.test'], later);
      assert.equal(second.shaping.of('default').suspendedUntil('second.test', later), nowMs + 60_000);
      assert.deepEqual(second.shaping.takeWrites(later), []);

      // A third is handed first.test's mail by a claim that says its destination: the same, without a delivery.
      const third = worker();
      await third.sync(later);
      assert.equal(third.shaping.laneOf('first.test'), 'first.test', 'not known before the claim');
      third.shaping.adopt('first.test', 'mx.recorded.test', later);
      assert.equal(third.shaping.laneOf('first.test'), 'mx.recorded.test');
      assert.equal(third.shaping.of('default').suspendedUntil('first.test', later), nowMs + 60_000);
      // A destination no row was read of: the domain stays a lane of its own until its first delivery.
      third.shaping.adopt('new.test', 'mx.unrecorded.test', later);
      assert.equal(third.shaping.laneOf('new.test'), 'new.test');
    });
  });

  describe(`two sending workers and a capped destination (${engine})`, { skip: engineSkip(engine) }, () => {
    const CAP = 4;
    let dns: TestDnsServer;
    let app: TestApp;
    let receiver: Receiver;
    let server: ThrottlingServer;
    const workers: SendingWorker[] = [];
    // The test's clock: still unless the test moves it.
    let nowMs = Date.parse('2026-03-02T10:00:01.000Z');
    const clock: Clock = { now: () => new Date(nowMs) };

    before(async () => {
      dns = await startDnsServer();
      const [address] = publishOwnMx(dns, 'shared.test');
      server = await startThrottlingServer({ address, now: () => nowMs, connections: CAP });
      ({ app, receiver } = await startDestinationsApp(engine, clock));
    });
    after(async () => {
      for (const worker of workers) await worker.stop();
      await app?.close();
      await server?.close();
      await dns?.close();
      await receiver?.close();
    });

    const start = async (destinations: DestinationSync) => {
      const worker = await startSendingWorker(app, {
        transport: testDirectTransport(dns.address),
        clock,
        // Four connections per destination each (SEND_CONCURRENCY_PER_HOST): alone, each may take the cap.
        settings: DESTINATIONS_WORKER_SETTINGS,
        destinations,
      });
      workers.push(worker);
      return worker;
    };
    async function arrived(count: number, what: string) {
      await until(
        () => {
          for (const worker of workers) worker.wake();
          return server.received.length >= count;
        },
        20_000,
        () =>
          `${what}: ${server.received.length} of ${count} arrived, ${server.refusedConnections.length} ` +
          `connections refused`,
      );
    }

    test('from their first message to a domain an earlier run mapped, together they never ask for more connections than its cap', async () => {
      // The operator knows the destination's cap.
      const set = await app.request('PUT', `/v1/destinations/overrides/${LANE}`, {
        key: null,
        headers: { authorization: `Bearer ${OPERATOR_TOKEN}` },
        body: { connections: CAP },
      });
      assert.equal(set.status, 200, JSON.stringify(set.body));

      // A worker of an earlier run sent to the destination once (a worker learns a domain's MX hosts by
      // sending to it) and stopped: the database maps the domain to the destination. Two fresh workers then
      // start, neither of which has sent there: each takes the domain's destination from the claim, so its
      // first burst is already its share of the cap (without that, each would open four).
      const earlier = await start(
        createDestinationSync({
          repo: app.services.repositories.destinations,
          shaping: createSourcedShaping(),
        }),
      );
      await sendEach(app, ['once@shared.test']);
      await arrived(1, 'the earlier run');
      await earlier.stop();
      workers.splice(workers.indexOf(earlier), 1);
      for (let count = 0; count < 2; count++) {
        await start(
          createDestinationSync({
            repo: app.services.repositories.destinations,
            shaping: createSourcedShaping(),
          }),
        );
      }

      // A second later both have read each other's heartbeat with the destinations' states.
      nowMs += 1000;
      const before = server.attempts.length;
      const to = numberedAddresses('shared.test', 0, 40);
      await sendEach(app, to);
      // Mail refused a connection would wait for the destination on the clock: it moves while both are idle
      // (by less than it takes a worker to look dead).
      for (let step = 0; server.received.length < 41; step++) {
        assert.ok(step < 100, `stuck at ${server.received.length} of 41`);
        for (const worker of workers) await worker.whenIdle();
        if (server.received.length < 41) nowMs += 2000;
        for (const worker of workers) worker.wake();
      }
      for (const worker of workers) await worker.whenIdle();

      const burst = server.attempts.slice(before);
      assert.ok(burst.length >= 2, `${burst.length} connections`);
      assert.deepEqual(
        burst.filter((attempt) => attempt.atOnce > CAP),
        [],
        'never more connections asked for at once than the cap',
      );
      assert.deepEqual(server.refusedConnections, []);
      assert.equal(server.received.length, 41, 'each message once');
      assert.deepEqual(server.received.slice(1).sort(), [...to].sort(), 'every message of the burst arrived');
      assert.equal(workers.length, 2);
    });
  });
}
