import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import type { Clock } from '../src/lib/clock.ts';
import { createSourceChooser } from '../src/modules/destinations/source-ips.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { created } from './helpers/answers.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, TEST_SENDING_SETTINGS, type TestApp } from './helpers/app.ts';
import type { TestDnsServer } from './helpers/dns.ts';
import { ownLoopbackAddresses, type TestSmtpServer } from './helpers/smtp.ts';
import { startSendingWorker, testDirectTransport } from './helpers/sending.ts';
import { until } from './helpers/until.ts';
import { assertWaitingForWarmup, startWarmupWorld, type WarmupWorld } from './helpers/warmup.ts';
import { sendBroadcastToNewSegment, startFanOutWorker } from './helpers/fan-out.ts';

// Issue 38, warm-up per source IP (DIRECT_SOURCE_IPS), end to end in direct mode: mail leaves from the local
// addresses listed (loopback addresses of the test's own, bound with nodemailer's localAddress), each saying
// its own EHLO name; a warming address sends its day's allowance to a large provider (Google, found through a
// real DNS server) first and the rest leaves from the warm ones; with none warm, the rest waits `throttled`
// until the next UTC day on the test's clock. A destination that is not a large provider takes every address
// in turn. The receiver records the address each connection came from.

const PUBLIC_URL = 'https://mail.example.com';
const config = (value: string) => loadConfig({ DIRECT_SOURCE_IPS: value }, { stdoutIsTTY: false }).sourceIps;

test('DIRECT_SOURCE_IPS: addresses, EHLO names, warm-ups, and what is not a list', () => {
  assert.deepEqual(
    config('192.0.2.10 helo=MX1.example.com; 2001:db8::11 warmup=2026-11-28 schedule=10,20;'),
    [
      { address: '192.0.2.10', helo: 'mx1.example.com', warmupFrom: undefined, schedule: null },
      {
        address: '2001:db8::11',
        helo: undefined,
        warmupFrom: Date.parse('2026-11-28T00:00:00.000Z'),
        schedule: [10, 20],
      },
    ],
  );
  assert.deepEqual(config('192.0.2.12 warmup=2026-11-28')[0]!.schedule, null, "WARMUP_SCHEDULE's");
  const problem = (value: string, why: string) =>
    assert.throws(() => config(value), {
      name: 'ConfigError',
      message: `Invalid configuration:\n  - DIRECT_SOURCE_IPS: ${why}.`,
    });
  problem('mx.example.com', 'mx.example.com is not an IP address');
  problem('192.0.2.10; 192.0.2.10', '192.0.2.10 is listed twice');
  problem('192.0.2.10 schedule=10,20', '192.0.2.10 has a schedule but no `warmup=<YYYY-MM-DD>` (its day 1)');
  problem(
    '192.0.2.10 warmup=2026-11-28 schedule=10,0',
    "192.0.2.10's schedule: day 2's allowance is not a whole number from 1 to 10000000",
  );
  problem(
    '192.0.2.10 helo=-bad-',
    '192.0.2.10: `helo=-bad-` is not `helo=<host name>`, `warmup=<YYYY-MM-DD>` or `schedule=<schedule>`',
  );
  problem(
    '192.0.2.10 warmup=yesterday',
    '192.0.2.10: `warmup=yesterday` is not `helo=<host name>`, `warmup=<YYYY-MM-DD>` or `schedule=<schedule>`',
  );
});

for (const engine of ALL_ENGINES) {
  describe(`warm-up per source IP in direct mode (${engine})`, { skip: engineSkip(engine) }, () => {
    let world: WarmupWorld | undefined;
    let dns: TestDnsServer;
    let app: TestApp;
    let google: TestSmtpServer;
    let other: TestSmtpServer;
    let worker: SendingWorker | undefined;
    let fanOut: QueueWorker | undefined;
    let nowMs = Date.parse('2026-03-02T10:00:01.000Z');
    const clock: Clock = { now: () => new Date(nowMs) };
    let warmingA = '';
    let warmingB = '';
    let warmC = '';
    let warmingD = '';

    before(async () => {
      world = await startWarmupWorld(engine, clock, PUBLIC_URL);
      ({ dns, app, google, other } = world);
      [warmingA = '', warmingB = '', warmC = '', warmingD = ''] = ownLoopbackAddresses(4, world.addresses);
    });
    after(async () => {
      await fanOut?.stop();
      await worker?.stop();
      await world?.close();
    });

    /** A sending worker that sends from the addresses DIRECT_SOURCE_IPS lists as `value`. */
    async function startWorker(value: string) {
      await worker?.stop();
      worker = await startSendingWorker(app, {
        transport: testDirectTransport(dns.address),
        clock,
        settings: { ...TEST_SENDING_SETTINGS, concurrency: 4, timeoutMs: 15_000 },
        // A broadcast's copies carry their own unsubscribe link.
        publicUrl: PUBLIC_URL,
        sources: createSourceChooser({
          sources: config(value),
          repo: app.services.repositories.warmups,
          defaultSchedule: [50],
        }),
      });
    }

    async function send(to: string[], from = 'Ada Lovelace <ada@example.com>'): Promise<string[]> {
      const response = await app.request('POST', '/v1/emails/batch', {
        body: to.map((address, n) => ({
          from,
          to: address,
          subject: `Bestellbestätigung Nr. ${n} — größer als gestern`,
          text: `Grüße, ${address}!\n\nIhre Bestellung Nr. ${n} ist unterwegs.\n✓ 日本語\n`,
          html: `<p>Grüße, <b>${address}</b>!</p>\n<p>Ihre Bestellung Nr. ${n} ist unterwegs.</p>`,
        })),
      });
      assert.equal(response.status, 202, JSON.stringify(response.body));
      return response.body.data.map((entry: { id: string }) => entry.id);
    }

    /** How many messages `server` got from each address, and the EHLO name each gave. */
    const fromEach = (server: TestSmtpServer, since = 0) => {
      const counts: Record<string, number> = {};
      for (const message of server.messages.slice(since))
        counts[`${message.remoteAddress} ${message.helo}`] =
          (counts[`${message.remoteAddress} ${message.helo}`] ?? 0) + 1;
      return counts;
    };

    async function deliveredTo(server: TestSmtpServer, count: number, what: string) {
      await until(
        () => {
          worker!.wake();
          return server.messages.length === count;
        },
        20_000,
        () => `${what}: ${server.messages.length} of ${count}`,
      );
      await worker!.whenIdle();
    }

    test("warming addresses send their day's allowance each; the rest waits for the next day", async () => {
      await startWorker(
        `${warmingA} helo=a.mail.example.com warmup=2026-03-02 schedule=2,4; ` +
          `${warmingB} helo=b.mail.example.com warmup=2026-03-02 schedule=1,3`,
      );
      const ids = await send(Array.from({ length: 6 }, (_, i) => `reader${i}@warm.test`));
      await send(['someone@other.test', 'another@other.test', 'third@other.test', 'fourth@other.test']);
      await deliveredTo(google, 3, 'day 1');
      await deliveredTo(other, 4, 'other');
      assert.deepEqual(fromEach(google), {
        [`${warmingA} a.mail.example.com`]: 2,
        [`${warmingB} b.mail.example.com`]: 1,
      });
      // Not a large provider: every address in turn, none held.
      assert.deepEqual(fromEach(other), {
        [`${warmingA} a.mail.example.com`]: 2,
        [`${warmingB} b.mail.example.com`]: 2,
      });

      const { waiting } = await assertWaitingForWarmup(app, ids, 3, '2026-03-03T00:00:00.000Z');
      for (const recipient of waiting) {
        assert.equal(
          recipient.last_response,
          'throttled: warm-up of the source IPs: the messages to google for 2026-03-02 of ' +
            `${warmingA} (day 1: 2), ${warmingB} (day 1: 1) are used; it waits until 2026-03-03T00:00:00.000Z`,
        );
      }

      // Later that day nothing more goes; the next day A's four take the three that waited.
      nowMs = Date.parse('2026-03-02T23:59:00.000Z');
      worker!.wake();
      await worker!.whenIdle();
      assert.equal(google.messages.length, 3);
      nowMs = Date.parse('2026-03-03T00:00:01.000Z');
      await deliveredTo(google, 6, 'day 2');
      assert.deepEqual(fromEach(google, 3), { [`${warmingA} a.mail.example.com`]: 3 });
      for (const id of ids)
        assert.equal((await app.request('GET', `/v1/emails/${id}`)).body.status, 'delivered');
    });

    test('beside a warm address, a warming one takes its allowance and the warm one the rest', async () => {
      // Day 3: A's allowance is 8 (what it took on days 1 and 2 is another day's); C is warm.
      nowMs = Date.parse('2026-03-04T09:00:00.000Z');
      await startWorker(
        `${warmingA} helo=a.mail.example.com warmup=2026-03-02 schedule=2,4,8; ${warmC} helo=c.mail.example.com`,
      );
      const before = google.messages.length;
      const ids = await send(Array.from({ length: 12 }, (_, i) => `day3reader${i}@warm.test`));
      await deliveredTo(google, before + 12, 'day 3');
      assert.deepEqual(fromEach(google, before), {
        [`${warmingA} a.mail.example.com`]: 8,
        [`${warmC} c.mail.example.com`]: 4,
      });
      for (const id of ids) {
        const view = (await app.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(view.status, 'delivered');
        assert.equal(view.recipients[0].throttled, null);
      }
    });

    test("a message its domain's warm-up holds gives the address's allowance back", async () => {
      nowMs = Date.parse('2026-03-06T09:00:00.000Z');
      await startWorker(`${warmingD} helo=d.mail.example.com warmup=2026-03-06 schedule=2`);
      const domain = await created(app, '/v1/domains', { name: 'ada.example' });
      const on = await app.request('PUT', `/v1/domains/${domain.id}/warmup`, {
        body: { enabled: true, schedule: [1] },
      });
      assert.equal(on.status, 200, JSON.stringify(on.body));
      nowMs += 1000; // the workers read warm-ups at most once a second
      const before = google.messages.length;
      const held = await send(
        ['ada0@warm.test', 'ada1@warm.test', 'ada2@warm.test'],
        'Ada <ada@ada.example>',
      );
      await deliveredTo(google, before + 1, "the domain's one");
      const reasons = [];
      for (const id of held) {
        const view = (await app.request('GET', `/v1/emails/${id}`)).body;
        if (view.status === 'delayed') reasons.push(view.recipients[0].last_response);
      }
      assert.equal(reasons.length, 2);
      for (const reason of reasons)
        assert.match(reason, /^throttled: warm-up day 1 of ada\.example: its 1 messages/);
      // D's second message was taken and given back twice: it is still there for mail of a warm domain.
      await send(['warm0@warm.test']);
      await deliveredTo(google, before + 2, "D's second");
      assert.deepEqual(fromEach(google, before), { [`${warmingD} d.mail.example.com`]: 2 });
      const [over] = await send(['warm1@warm.test']);
      worker!.wake();
      await worker!.whenIdle();
      const view = (await app.request('GET', `/v1/emails/${over}`)).body;
      assert.match(
        view.recipients[0].last_response,
        /^throttled: warm-up of the source IPs: the messages to google for 2026-03-06 of \S+ \(day 1: 2\) are used/,
      );
      assert.equal(google.messages.length, before + 2);

      // The next day D is past its schedule (warm) and ada.example past its own: the three that waited leave.
      nowMs = Date.parse('2026-03-07T00:00:01.000Z');
      await deliveredTo(google, before + 5, 'day 2');
      assert.deepEqual(fromEach(google, before), { [`${warmingD} d.mail.example.com`]: 5 });
    });

    test("transactional mail held by an address's allowance leaves before broadcast copies", async () => {
      // Day 1 of D alone (again, from a later day 1): one message to Google; day 2: three.
      nowMs = Date.parse('2026-03-10T09:00:00.000Z');
      await startWorker(`${warmingD} helo=d.mail.example.com warmup=2026-03-10 schedule=1,3`);
      fanOut = await startFanOutWorker(app, { clock });
      const readers = Array.from({ length: 3 }, (_, i) => `fan${i}@warm.test`);
      const before = google.messages.length;
      await sendBroadcastToNewSegment(app, { from: 'Die Redaktion <news@example.com>', addresses: readers });
      await deliveredTo(google, before + 1, 'day 1');
      const waitingCopies = async () =>
        (await app.request('GET', '/v1/emails?limit=100')).body.data.filter(
          (email: any) => email.broadcast_id !== null && email.status === 'delayed',
        ).length;
      await until(async () => (await waitingCopies()) === 2, 20_000, 'two copies held');
      const urgent = await send(
        ['urgent0@warm.test', 'urgent1@warm.test'],
        'Die Redaktion <news@example.com>',
      );
      worker!.wake();
      await worker!.whenIdle();
      for (const id of urgent) {
        const view = (await app.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(view.recipients[0].throttled?.reason, 'warmup', JSON.stringify(view.recipients[0]));
      }

      nowMs = Date.parse('2026-03-11T00:00:01.000Z');
      await deliveredTo(google, before + 4, 'day 2');
      const dayTwo = google.messages.slice(before + 1).flatMap((message) => message.to);
      // The allowance went to both transactional emails (their SMTP transactions run at once with the copy's, so
      // the order they arrive in is not the order they were admitted in).
      assert.deepEqual(dayTwo.filter((to) => to.startsWith('urgent')).sort(), [
        'urgent0@warm.test',
        'urgent1@warm.test',
      ]);
      assert.equal(await waitingCopies(), 1);
    });

    test('a mail server only over IPv6 is not reachable from an IPv4 source: retried, saying why', async () => {
      dns.add('v6only.test', { type: 'MX', exchange: 'mx.v6only.test', priority: 10 });
      dns.add('mx.v6only.test', { type: 'AAAA', address: '::1' });
      const [id] = await send(['someone@v6only.test']);
      await until(
        async () => {
          worker!.wake();
          return (await app.request('GET', `/v1/emails/${id}`)).body.status === 'delayed';
        },
        20_000,
        'the attempt',
      );
      const [recipient] = (await app.request('GET', `/v1/emails/${id}`)).body.recipients;
      assert.equal(recipient.attempts, 1);
      assert.equal(recipient.throttled, null);
      assert.equal(
        recipient.last_response,
        'no mail server of v6only.test could be reached ' +
          `(mx.v6only.test does not resolve to an address reachable from ${warmingD})`,
      );
    });

    test('an address whose warm-up starts on a later day sends nothing before it', async () => {
      /** Each address's count of the messages `server` got for `recipients`, with its EHLO name. */
      const fromEachTo = (server: TestSmtpServer, recipients: string[]) => {
        const counts: Record<string, number> = {};
        for (const message of server.messages)
          if (message.to.some((to) => recipients.includes(to)))
            counts[`${message.remoteAddress} ${message.helo}`] =
              (counts[`${message.remoteAddress} ${message.helo}`] ?? 0) + 1;
        return counts;
      };
      const delivered = (ids: string[], what: string) =>
        until(
          async () => {
            worker!.wake();
            const views = await Promise.all(ids.map((id) => app.request('GET', `/v1/emails/${id}`)));
            return views.every((view) => view.body.status === 'delivered');
          },
          20_000,
          what,
        );

      // Beside a warm address: every message leaves from the warm one, to a large provider and to the rest.
      nowMs = Date.parse('2026-03-20T09:00:00.000Z');
      const later = `${warmingB} helo=b.mail.example.com warmup=2026-03-22 schedule=1,2`;
      await startWorker(`${later}; ${warmC} helo=c.mail.example.com`);
      const readers = ['soon0@warm.test', 'soon1@warm.test', 'soon0@other.test', 'soon1@other.test'];
      await delivered(await send(readers), 'from the warm address');
      assert.deepEqual(fromEachTo(google, readers), { [`${warmC} c.mail.example.com`]: 2 });
      assert.deepEqual(fromEachTo(other, readers), { [`${warmC} c.mail.example.com`]: 2 });

      // Alone: mail to any destination waits for its day 1, no attempt used, and leaves from it that day.
      await startWorker(later);
      const early = ['early@warm.test', 'early@other.test'];
      const ids = await send(early);
      worker!.wake();
      await worker!.whenIdle();
      const { waiting } = await assertWaitingForWarmup(app, ids, 2, '2026-03-22T00:00:00.000Z');
      for (const recipient of waiting) {
        assert.equal(
          recipient.last_response,
          `throttled: warm-up of the source IPs: none sends yet (${warmingB} on 2026-03-22); ` +
            'it waits until 2026-03-22T00:00:00.000Z',
        );
      }
      nowMs = Date.parse('2026-03-21T23:59:00.000Z');
      worker!.wake();
      await worker!.whenIdle();
      assert.deepEqual(fromEachTo(google, early), {});
      nowMs = Date.parse('2026-03-22T00:00:01.000Z');
      await delivered(ids, 'on day 1');
      assert.deepEqual(fromEachTo(google, early), { [`${warmingB} b.mail.example.com`]: 1 });
      assert.deepEqual(fromEachTo(other, early), { [`${warmingB} b.mail.example.com`]: 1 });
    });
  });
}
