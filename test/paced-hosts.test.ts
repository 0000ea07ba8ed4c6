import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ClaimRequest } from '../src/queue/contract.ts';
import { createDestinationSync } from '../src/modules/destinations/destinations.sync.ts';
import { createSourcedShaping } from '../src/modules/destinations/source-shaping.ts';
import { createSendingQueueSource } from '../src/modules/sending/sending.queue-source.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// Direct delivery's lanes read their rows by `paced_host` (migration 0047): written when the email is accepted
// with MAIL_TRANSPORT=direct, and nowhere else (relay and capture have no lanes, so they write no entry of its
// index). What the sending queue claims either way, through its adapter as the runtime calls it: rows accepted
// in another mode (or before the upgrade) are given theirs at a direct worker's start, and a row without one is
// still claimed, by the look's part over the queue.

/** The sending queue's adapter on `app`'s database, with each recipient domain a lane (direct delivery). */
const directQueue = (app: TestApp, destinations?: ReturnType<typeof createDestinationSync>) =>
  createSendingQueueSource({
    db: app.database.handle.db,
    engine: app.engine,
    events: app.services.events,
    repositories: app.services.repositories,
    now: () => new Date().toISOString(),
    perDomain: true,
    recipientPerJob: false,
    pollIntervalMs: 1000,
    destinations,
  });

async function send(app: TestApp, to: string): Promise<void> {
  const body = { from: 'news@example.com', to: [to], subject: `For ${to}`, text: 'Line one\nLine two\n' };
  const response = await app.request('POST', '/v1/emails', { body });
  assert.equal(response.status, 202, JSON.stringify(response.body));
}

/** A look as the runtime asks it, and the addresses it claimed, sorted. */
async function claimed(queue: ReturnType<typeof directQueue>, request: ClaimRequest): Promise<string[]> {
  const now = new Date();
  const lease = { workerId: 'worker-a', now, until: new Date(now.getTime() + 60_000) };
  const jobs = await queue.claim(lease, request);
  return jobs.flatMap((job) => job.recipients.map((row) => row.address)).sort();
}

for (const engine of ALL_ENGINES) {
  describe(`the paced lanes' rows (${engine})`, { skip: engineSkip(engine) }, () => {
    test('accepted in capture mode: given their host at the first look, or claimed over the queue', async () => {
      const app = await startTestApp(engine);
      try {
        for (const to of ['a0@lane.test', 'a1@lane.test', 'a2@lane.test', 'b0@other.test', 'b1@other.test'])
          await send(app, to);
        const queue = directQueue(app);
        // Only the lane's own part: two of its rows, read by the index once the first look marked them.
        assert.deepEqual(
          await claimed(queue, { limit: 0, excludeLanes: [], laneLimits: [{ lane: 'lane.test', limit: 2 }] }),
          ['a0@lane.test', 'a1@lane.test'],
        );
        // Accepted after the worker started (capture mode again): not in the lane's index. The lane's part
        // takes its one marked row; the part over the queue the rest, this one too (to be given back by the
        // runtime if the lane cannot hold it), instead of leaving it behind.
        await send(app, 'late@lane.test');
        assert.deepEqual(
          await claimed(queue, {
            limit: 10,
            excludeLanes: [],
            laneLimits: [{ lane: 'lane.test', limit: 1 }],
          }),
          ['a2@lane.test', 'b0@other.test', 'b1@other.test', 'late@lane.test'],
        );
      } finally {
        await app.close();
      }
    });

    test('accepted in direct mode: a lane reads the rows accepted after the first look by the index', async () => {
      const app = await startTestApp(engine, { config: { mailTransport: 'direct' } });
      try {
        await send(app, 'b0@other.test');
        const queue = directQueue(app);
        assert.deepEqual(
          await claimed(queue, { limit: 0, excludeLanes: [], laneLimits: [{ lane: 'lane.test', limit: 5 }] }),
          [],
        );
        for (const to of ['a0@lane.test', 'a1@lane.test', 'a2@lane.test']) await send(app, to);
        // The lane's part alone, limited to two: the other destination's row, ahead of them, is not taken.
        assert.deepEqual(
          await claimed(queue, { limit: 0, excludeLanes: [], laneLimits: [{ lane: 'lane.test', limit: 2 }] }),
          ['a0@lane.test', 'a1@lane.test'],
        );
        // And a look over the queue leaves the lane's rows to its part: one of them, and the other's row.
        assert.deepEqual(
          await claimed(queue, {
            limit: 10,
            excludeLanes: [],
            laneLimits: [{ lane: 'lane.test', limit: 1 }],
          }),
          ['a2@lane.test', 'b0@other.test'],
        );
      } finally {
        await app.close();
      }
    });

    test("a domain's own lane, once the domain is its destination's, claims none of it while that lane is left out", async () => {
      const app = await startTestApp(engine, { config: { mailTransport: 'direct' } });
      try {
        for (const to of ['a0@lane.test', 'a1@lane.test', 'b0@other.test']) await send(app, to);
        const shaping = createSourcedShaping();
        const queue = directQueue(
          app,
          createDestinationSync({ repo: app.services.repositories.destinations, shaping }),
        );
        // The worker holds lane.test's first jobs in the domain's own lane; its first delivery then learns
        // the domain's destination, whose lane is full and so left out of the next look, while the old lane,
        // with room, still asks for its part.
        const { destination } = shaping.learn('lane.test', ['mx.lane.test'], Date.now());
        assert.notEqual(destination, 'lane.test');
        assert.deepEqual(
          await claimed(queue, {
            limit: 10,
            excludeLanes: [destination],
            laneLimits: [{ lane: 'lane.test', limit: 2 }],
          }),
          ['b0@other.test'],
        );
      } finally {
        await app.close();
      }
    });
  });
}
