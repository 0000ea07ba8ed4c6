import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Clock } from '../src/lib/clock.ts';
import { parseWarmupSchedule } from '../src/lib/warmup-schedule.ts';
import type { SourcedShaping } from '../src/modules/destinations/source-shaping.ts';
import type { SendJob } from '../src/modules/sending/sending.queue.ts';
import { createWarmupStep } from '../src/modules/sending/sending.warmup.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, TEST_SENDING_SETTINGS, type TestApp } from './helpers/app.ts';
import { created } from './helpers/answers.ts';
import type { TestDnsServer } from './helpers/dns.ts';
import type { TestSmtpServer } from './helpers/smtp.ts';
import { startSendingWorker, testDirectTransport } from './helpers/sending.ts';
import { until } from './helpers/until.ts';
import { assertWaitingForWarmup, startWarmupWorld, type WarmupWorld } from './helpers/warmup.ts';
import { sendBroadcastToNewSegment, startFanOutWorker } from './helpers/fan-out.ts';

// Issue 38, warm-up in direct mode, end to end: a warming sending domain may send its schedule's day's
// allowance to a large provider (here Google: its MX host name, on a loopback address of the test's own,
// found through a real DNS server); the rest waits, `throttled` with reason `warmup`, and leaves the next day,
// on the test's clock. A destination that is not a large provider is not held.

const SCHEDULE = [3, 5];
const PUBLIC_URL = 'https://mail.example.com';

test('WARMUP_SCHEDULE: growth or a list, and what is not a schedule', () => {
  assert.deepEqual(parseWarmupSchedule('50x1.5/5'), [50, 75, 113, 169, 253]);
  assert.deepEqual(parseWarmupSchedule('10, 20,40'), [10, 20, 40]);
  assert.equal(parseWarmupSchedule('50x1.5/16').length, 16);
  assert.match(String(parseWarmupSchedule('10,0')), /day 2's allowance/);
  assert.match(String(parseWarmupSchedule('50x2/400')), /1 to 365 days/);
  assert.match(String(parseWarmupSchedule('lots')), /day 1's allowance/);
});

test("admissions go in the order the attempts asked, however their destinations' lookups end", async () => {
  // Two attempts to a domain whose destination is not known yet, in queue order (a transactional email, then
  // a broadcast copy): each looks up its MX hosts first, and the copy's lookup ends first.
  const lookups: Array<(hosts: string[]) => void> = [];
  const admitted: string[] = [];
  const shaping = {
    laneOf: (host: string) => host,
    providerOf: () => undefined,
    learn: () => ({ destination: 'google', isNew: false }),
  } as unknown as SourcedShaping;
  const step = createWarmupStep({
    gate: {
      applies: async () => true,
      async admit(email) {
        admitted.push(email.from);
        return undefined;
      },
    },
    destinations: {
      shaping,
      sync: async () => {},
      flush: async () => {},
      learned: async () => {},
    },
    transport: { mxHostsOf: () => new Promise((resolve) => lookups.push(resolve)) },
    clock: { now: () => new Date('2026-03-05T00:00:01.000Z') },
  });
  const job = (from: string) =>
    ({
      lane: 'cold.example',
      rows: [from],
      host: 'cold.example',
      email: { id: from, projectId: 'p', from, dkimDomain: null },
      recipients: [],
    }) as unknown as SendJob;
  const urgent = step.decide(job('urgent@news.example.org'));
  const copy = step.decide(job('copy@news.example.org'));
  while (lookups.length < 2) await new Promise((resolve) => setImmediate(resolve));
  lookups[1]!(['gmail-smtp-in.l.google.com']);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(admitted, [], 'the copy waits for the transactional email ahead of it');
  lookups[0]!(['gmail-smtp-in.l.google.com']);
  await Promise.all([urgent, copy]);
  assert.deepEqual(admitted, ['urgent@news.example.org', 'copy@news.example.org']);
});

for (const engine of ALL_ENGINES) {
  describe(`warm-up in direct mode (${engine})`, { skip: engineSkip(engine) }, () => {
    let world: WarmupWorld | undefined;
    let dns: TestDnsServer;
    let app: TestApp;
    let google: TestSmtpServer;
    let other: TestSmtpServer;
    let worker: SendingWorker;
    let fanOut: QueueWorker | undefined;
    let nowMs = Date.parse('2026-03-02T10:00:01.000Z');
    const clock: Clock = { now: () => new Date(nowMs) };

    before(async () => {
      world = await startWarmupWorld(engine, clock, PUBLIC_URL);
      ({ dns, app, google, other } = world);
    });
    after(async () => {
      await fanOut?.stop();
      await worker?.stop();
      await world?.close();
    });

    const message = (to: string, n: number) => ({
      from: 'Ada Lovelace <ada@example.com>',
      to,
      subject: `Bestellbestätigung Nr. ${n} — größer als gestern`,
      text: `Grüße, ${to}!\n\nIhre Bestellung Nr. ${n} ist unterwegs.\nZeile drei: ✓ 日本語\n`,
      html: `<p>Grüße, <b>${to}</b>!</p>\n<p>Ihre Bestellung Nr. ${n} ist unterwegs.</p>\n<p>✓ 日本語</p>`,
    });

    async function send(to: string[]): Promise<string[]> {
      const response = await app.request('POST', '/v1/emails/batch', {
        body: to.map((address, n) => message(address, n)),
      });
      assert.equal(response.status, 202, JSON.stringify(response.body));
      return response.body.data.map((entry: { id: string }) => entry.id);
    }

    const arrived = (server: TestSmtpServer) => server.messages.flatMap((received) => received.to).sort();

    test("the day's allowance holds, the next day's releases what waited, and other destinations are not held", async () => {
      const created = await app.request('POST', '/v1/domains', { body: { name: 'example.com' } });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const path = `/v1/domains/${created.body.id}/warmup`;

      const off = await app.request('GET', path);
      assert.equal(off.status, 200, JSON.stringify(off.body));
      assert.equal(off.body.enabled, false);
      assert.deepEqual(off.body.schedule, parseWarmupSchedule('50x1.5/16'), 'the built-in schedule');
      assert.equal(off.body.default_schedule, true);

      const bad = await app.request('PUT', path, { body: { enabled: true, schedule: [3, 0] } });
      assert.equal(bad.status, 422, JSON.stringify(bad.body));
      assert.equal(
        (await app.request('PUT', '/v1/domains/dom_nope/warmup', { body: { enabled: true } })).status,
        404,
      );

      const on = await app.request('PUT', path, { body: { enabled: true, schedule: SCHEDULE } });
      assert.equal(on.status, 200, JSON.stringify(on.body));
      assert.deepEqual(
        { day: on.body.day, allowance: on.body.allowance_per_destination, started: on.body.started_at },
        { day: 1, allowance: 3, started: '2026-03-02T10:00:01.000Z' },
      );
      assert.equal(on.body.ends_at, '2026-03-04T00:00:00.000Z');
      // Started once the warm-up is on (a worker reads the warm-ups at most once a second of the clock).
      worker = await startSendingWorker(app, {
        transport: testDirectTransport(dns.address),
        clock,
        settings: { ...TEST_SENDING_SETTINGS, concurrency: 4, timeoutMs: 15_000 },
        // A broadcast's copies carry their own unsubscribe link.
        publicUrl: PUBLIC_URL,
      });

      const warm = Array.from({ length: 7 }, (_, i) => `reader${i}@warm.test`);
      const warmIds = await send(warm);
      await send(['someone@other.test', 'another@other.test']);
      await until(
        () => {
          worker.wake();
          return google.messages.length === 3 && other.messages.length === 2;
        },
        20_000,
        () => `google ${google.messages.length} of 3, other ${other.messages.length} of 2`,
      );
      await worker.whenIdle();
      assert.deepEqual(arrived(other), ['another@other.test', 'someone@other.test'], 'not a large provider');
      // What arrived is the mail as sent.
      const first = google.messages[0]!.raw;
      assert.match(first, /Subject: =\?UTF-8\?/);
      assert.match(first, /text\/html/);

      // The other four wait for tomorrow, throttled by the warm-up, no attempt used.
      const { views, waiting } = await assertWaitingForWarmup(app, warmIds, 4, '2026-03-03T00:00:00.000Z');
      for (const recipient of waiting) {
        assert.equal(recipient.next_attempt_at, '2026-03-03T00:00:00.000Z');
        assert.match(
          recipient.last_response,
          /^throttled: warm-up day 1 of example\.com: its 3 messages to google/,
        );
      }
      for (const view of views.filter((entry) => entry.status === 'delivered'))
        assert.equal(view.recipients[0].throttled, null);
      const today = await app.request('GET', path);
      assert.deepEqual(today.body.used_today, [{ destination: 'google', used: 3 }]);

      // Later the same day: nothing more goes.
      nowMs = Date.parse('2026-03-02T23:59:00.000Z');
      worker.wake();
      await worker.whenIdle();
      assert.equal(google.messages.length, 3);

      // The next day: its allowance of five releases the four that waited.
      nowMs = Date.parse('2026-03-03T00:00:01.000Z');
      await until(
        () => {
          worker.wake();
          return google.messages.length === 7;
        },
        20_000,
        () => `day 2: ${google.messages.length} of 7`,
      );
      // A message is at the server before its outcome is written: the statuses once the worker has written them.
      await worker.whenIdle();
      assert.deepEqual(arrived(google), [...warm].sort(), 'every message once');
      for (const id of warmIds) {
        const view = (await app.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(view.status, 'delivered');
        assert.equal(view.recipients[0].attempts, 1);
        assert.equal(view.recipients[0].throttled, null);
      }
      const dayTwo = await app.request('GET', path);
      assert.equal(dayTwo.body.day, 2);
      assert.deepEqual(dayTwo.body.used_today, [{ destination: 'google', used: 4 }]);

      // Past the schedule the domain is warm: nothing is held.
      nowMs = Date.parse('2026-03-04T00:00:01.000Z');
      const warmAgain = Array.from({ length: 8 }, (_, i) => `later${i}@warm.test`);
      await send(warmAgain);
      await until(
        () => {
          worker.wake();
          return google.messages.length === 15;
        },
        20_000,
        () => `warm: ${google.messages.length} of 15`,
      );
      const done = await app.request('GET', path);
      assert.deepEqual(
        { day: done.body.day, allowance: done.body.allowance_per_destination },
        { day: null, allowance: null },
      );
    });

    test('broadcast copies wait behind transactional mail for the allowance', async () => {
      // Day 1 of a second domain (the clock is where the test above left it: 2026-03-04).
      const domain = await created(app, '/v1/domains', { name: 'news.example.org' });
      const on = await app.request('PUT', `/v1/domains/${domain.id}/warmup`, {
        body: { enabled: true, schedule: [1, 3] },
      });
      assert.equal(on.status, 200, JSON.stringify(on.body));
      nowMs += 1000; // the workers read warm-ups at most once a second
      fanOut = await startFanOutWorker(app, { clock });
      const readers = Array.from({ length: 4 }, (_, i) => `fan${i}@warm.test`);
      const before = google.messages.length;
      await sendBroadcastToNewSegment(app, {
        from: 'Die Redaktion <news@news.example.org>',
        addresses: readers,
      });
      // One copy goes (day 1: one message to Google); the other three wait.
      await until(
        () => {
          worker.wake();
          return google.messages.length === before + 1;
        },
        20_000,
        () => `day 1: ${google.messages.length - before} of 1`,
      );
      const waitingCopies = async () =>
        (await app.request('GET', '/v1/emails?limit=100')).body.data.filter(
          (email: any) => email.broadcast_id !== null && email.status === 'delayed',
        ).length;
      await until(async () => (await waitingCopies()) === 3, 20_000, 'three copies held');

      // Two transactional emails of the same domain come after them, and wait too.
      const response = await app.request('POST', '/v1/emails/batch', {
        body: ['urgent0@warm.test', 'urgent1@warm.test'].map((to) => ({
          from: 'Die Redaktion <news@news.example.org>',
          to,
          subject: 'Ihr Passwort — zurücksetzen',
          text: 'Hallo,\nhier ist Ihr Link.\n✓',
        })),
      });
      assert.equal(response.status, 202);
      const urgent: string[] = response.body.data.map((entry: { id: string }) => entry.id);
      worker.wake();
      await worker.whenIdle();
      for (const id of urgent) {
        const view = (await app.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(view.recipients[0].throttled?.reason, 'warmup', JSON.stringify(view.recipients[0]));
      }

      // Day 2 allows three: both transactional emails leave first, then one copy; two copies wait on.
      nowMs = Date.parse('2026-03-05T00:00:01.000Z');
      await until(
        () => {
          worker.wake();
          return google.messages.length === before + 4;
        },
        20_000,
        () => `day 2: ${google.messages.length - before} of 4`,
      );
      await worker.whenIdle();
      // Which mail the allowance went to, not the order it arrived in: the three admitted (in queue order,
      // one at a time) go out over as many connections at once, and any of them may finish first.
      const dayTwo = google.messages.slice(before + 1).flatMap((message) => message.to);
      assert.deepEqual(
        dayTwo.filter((to) => to.startsWith('urgent')).sort(),
        ['urgent0@warm.test', 'urgent1@warm.test'],
        `day 2 went to ${dayTwo.join(', ')}`,
      );
      assert.equal(
        dayTwo.filter((to) => to.startsWith('fan')).length,
        1,
        `day 2 went to ${dayTwo.join(', ')}`,
      );
      for (const id of urgent)
        assert.equal((await app.request('GET', `/v1/emails/${id}`)).body.status, 'delivered');
      assert.equal(await waitingCopies(), 2);

      // Past the schedule: the rest.
      nowMs = Date.parse('2026-03-06T00:00:01.000Z');
      await until(
        () => {
          worker.wake();
          return google.messages.length === before + 6;
        },
        20_000,
        () => `day 3: ${google.messages.length - before} of 6`,
      );
      const copies = google.messages.slice(before).flatMap((message) => message.to);
      assert.deepEqual(copies.filter((to) => to.startsWith('fan')).sort(), readers, 'every copy once');
    });
  });
}
