import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Clock } from '../src/lib/clock.ts';
import { createBroadcastQueue } from '../src/modules/broadcasts/broadcasts.queue.ts';
import type { FanOut } from '../src/modules/broadcasts/fan-out.ts';
import { BULK_BAND } from '../src/modules/emails/fair-queue.repo.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { created } from './helpers/answers.ts';
import { fanOutOf, startFanOutWorker } from './helpers/fan-out.ts';

// The fan-out on the queue runtime, on the injected clock: a broadcast larger than one slice goes out slice
// after slice without any slice waiting for a lease to run out (the clock stands still, so a lease never
// does), and a fan-out abandoned half-way (a process frozen, its lease run out) is finished by another worker
// from the cursor: every contact gets one copy, and the frozen one's late batch keeps nothing.

for (const engine of ALL_ENGINES) {
  describe(`broadcast fan-out (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    /** A clock that moves only when told to. */
    let at = Date.parse('2026-11-29T08:00:00.000Z');
    const clock: Clock & { advance(ms: number): void } = {
      now: () => new Date(at),
      advance(ms) {
        at += ms;
      },
    };

    before(async () => {
      api = await startTestApp(engine, { clock, publicUrl: 'https://mail.acme.test' });
    });
    after(async () => {
      await api.close();
    });

    /** A broadcast, being sent, to a segment of `count` new contacts; their addresses. */
    async function sending(label: string, count: number) {
      const segment = await created(api, '/v1/segments', { name: label });
      const addresses: string[] = [];
      for (let index = 0; index < count; index += 1) {
        const contact = await created(api, '/v1/contacts', {
          email: `${label}${index}@fan-out.test`,
          first_name: `Zoë ${index}`,
        });
        addresses.push(contact.email);
        const added = await api.request('POST', `/v1/contacts/${contact.id}/segments/${segment.id}`);
        assert.equal(added.status, 200, JSON.stringify(added.body));
      }
      const broadcast = await created(api, '/v1/broadcasts', {
        from: 'Acme News <news@acme.test>',
        subject: 'Hello {{ contact.first_name }}',
        html: '<p>Grüße, {{ contact.first_name }}!</p>\n<p><a href="{{ unsubscribe_url }}">Leave</a></p>',
        text: 'Grüße, {{ contact.first_name }}!\nLeave: {{ unsubscribe_url }}',
        segment_id: segment.id,
        send: true,
      });
      return { id: broadcast.id as string, addresses };
    }

    /** Each copy's address, as the broadcast's recipients list shows them. */
    async function recipientsOf(id: string): Promise<string[]> {
      const page = await api.request('GET', `/v1/broadcasts/${id}/recipients?limit=100`);
      assert.equal(page.status, 200, JSON.stringify(page.body));
      return page.body.data.map((row: { email: string }) => row.email).sort();
    }

    test('a broadcast larger than one slice completes without waiting for a lease', async () => {
      const { id, addresses } = await sending('slices', 7);
      // Two contacts a batch, each read taking a second on the clock, and slices of half a second: four
      // attempts, each giving the broadcast back with more to go, the time of a look past at each one's end.
      const fanOut = fanOutOf(api, {
        batchSize: 2,
        segments: {
          ...api.services.repositories.segments,
          membersAfter: async (...args) => {
            clock.advance(1000);
            return api.services.repositories.segments.membersAfter(...args);
          },
        },
      });
      const slices: string[] = [];
      const counted: FanOut = {
        run: async (...args) => {
          const step = await fanOut.run(...args);
          slices.push(step);
          return step;
        },
      };
      const worker = await startFanOutWorker(api, { clock, fanOut: counted, settings: { sliceMs: 500 } });
      try {
        // Idle: nothing due that this worker can claim. The clock moved four seconds in all, far less than a
        // lease (a slice's 2 s plus 30 s, twice): a broadcast left under a lease would be idle and unsent.
        await worker.whenIdle();
      } finally {
        await worker.stop();
      }
      assert.deepEqual(slices, ['more', 'more', 'more', 'done']);
      const got = await api.request('GET', `/v1/broadcasts/${id}`);
      assert.equal(got.body.status, 'sent');
      assert.equal(got.body.counts.copies, 7);
      assert.deepEqual(await recipientsOf(id), [...addresses].sort());
    });

    test('copies are queued in the bulk band in contact order, batch after batch, behind transactional mail', async () => {
      const { id, addresses } = await sending('bands', 7);
      const queue = createBroadcastQueue(api.database.handle.db, api.database.handle.engine);
      const now = clock.now();
      assert.deepEqual(
        await queue.claimDue({ workerId: 'bands', now, until: new Date(now.getTime() + 60_000) }, 10),
        [id],
      );
      // Three batches (the next made while one is written), each numbering its copies after the last.
      assert.equal(await fanOutOf(api, { batchSize: 3 }).run(id, 'bands', 60_000), 'done');
      const reset = await api.request('POST', '/v1/emails', {
        body: { from: 'Acme <hello@acme.test>', to: 'reset@app.test', subject: 'Reset', text: 'code' },
      });
      assert.equal(reset.status, 202, JSON.stringify(reset.body));
      const rows = await api.database.handle.db
        .selectFrom('email_recipients')
        .innerJoin('emails', 'emails.id', 'email_recipients.email_id')
        .select(['email_recipients.address', 'email_recipients.ready_seq', 'emails.broadcast_id'])
        .where((eb) => eb.or([eb('emails.broadcast_id', '=', id), eb('emails.id', '=', reset.body.id)]))
        .execute();
      const copies = rows
        .filter((row) => row.broadcast_id === id)
        .map((row) => ({ address: row.address, position: Number(row.ready_seq) }))
        .sort((a, b) => a.position - b.position);
      assert.deepEqual(
        copies.map((copy) => copy.address),
        addresses,
      );
      assert.ok(copies[0]!.position > BULK_BAND, String(copies[0]!.position));
      copies.forEach((copy, index) =>
        assert.equal(copy.position, copies[0]!.position + index, `${copy.address}: consecutive`),
      );
      // The password reset accepted after them is claimed first: its place is below the bulk band.
      const transactional = rows.find((row) => row.broadcast_id === null);
      assert.ok(Number(transactional?.ready_seq) < BULK_BAND, String(transactional?.ready_seq));
    });

    test('a fan-out abandoned half-way is finished from its cursor by another worker, once', async () => {
      const { id, addresses } = await sending('frozen', 7);
      // The frozen process: it claimed the broadcast, wrote one batch of 3, and hangs reading the next.
      const queue = createBroadcastQueue(api.database.handle.db, api.database.handle.engine);
      const now = clock.now();
      const leaseMs = 60_000;
      assert.deepEqual(
        await queue.claimDue({ workerId: 'frozen', now, until: new Date(now.getTime() + leaseMs) }, 10),
        [id],
      );
      let reads = 0;
      let thaw: () => void = () => undefined;
      const thawed = new Promise<void>((resolve) => (thaw = resolve));
      let hung: () => void = () => undefined;
      const hanging = new Promise<void>((resolve) => (hung = resolve));
      // The first batch's commit, told by the send notifier its write wakes (the next batch is read while
      // one is written, so the hang can come before it).
      let committed: () => void = () => undefined;
      const firstCommitted = new Promise<void>((resolve) => (committed = resolve));
      const notifier = api.services.fanOutDeps.sendNotifier;
      const frozen = fanOutOf(api, {
        batchSize: 3,
        sendNotifier: {
          ...notifier,
          notify: (...args: Parameters<typeof notifier.notify>) => {
            committed();
            return notifier.notify(...args);
          },
        },
        segments: {
          ...api.services.repositories.segments,
          membersAfter: async (...args) => {
            const members = await api.services.repositories.segments.membersAfter(...args);
            reads += 1;
            if (reads === 2) {
              hung();
              await thawed;
            }
            return members;
          },
        },
      });
      const frozenRun = frozen.run(id, 'frozen', 60_000);
      await Promise.all([hanging, firstCommitted]);
      assert.equal((await api.request('GET', `/v1/broadcasts/${id}`)).body.counts.copies, 3);

      // Its lease runs out; a worker takes the broadcast and finishes it from the cursor.
      clock.advance(leaseMs + 1);
      const worker = await startFanOutWorker(api, { clock });
      try {
        await worker.whenIdle();
      } finally {
        await worker.stop();
      }
      assert.equal((await api.request('GET', `/v1/broadcasts/${id}`)).body.status, 'sent');

      // The frozen process wakes and writes its batch: refused, nothing of it kept.
      thaw();
      await assert.rejects(frozenRun, /no longer held by this worker/);
      const got = await api.request('GET', `/v1/broadcasts/${id}`);
      assert.equal(got.body.counts.copies, 7);
      assert.deepEqual(await recipientsOf(id), [...addresses].sort());
    });
  });
}
