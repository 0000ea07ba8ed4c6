import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { describe, test } from 'node:test';
import type { Engine } from '../src/db/connection.ts';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { createProcessDatabase, startOnFreePort, startServerProcess } from './helpers/process.ts';
import { until } from './helpers/until.ts';

// Ready means ready: an orchestrator starts `serve` on a fresh database with POSTWIRE_BOOTSTRAP_KEY, polls
// /readyz, and sends traffic the moment it answers 200. The first request must then be served with that key.
// The race this guards against (the API taking its port before the key was stored) showed in some starts
// only, so the test starts the process many times.

const BOOTSTRAP_KEY = 'pw_ready_means_ready_0123456789';
const ENCRYPTION_KEY = 'ab'.repeat(32);
const STARTS = 10;
// Starts run side by side, as many as the machine has cores: the same work, in less time.
const AT_ONCE = Math.min(STARTS, availableParallelism());
/**
 * One start on a database nothing has touched: polls /readyz every few milliseconds (from the process's first
 * log line, long before it listens; the window the race left was a few milliseconds wide), then answers the
 * status of the first API request.
 */
async function firstRequestAfterReady(engine: Engine): Promise<number> {
  const database = await createProcessDatabase(engine, { unmigrated: true });
  try {
    // The port is chosen here, to be polled before the process says where it listens.
    let port = 0;
    const server = await startOnFreePort((free) => {
      port = free;
      return startServerProcess(
        {
          ...database.env,
          PORT: String(port),
          POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY,
          POSTWIRE_BOOTSTRAP_KEY: BOOTSTRAP_KEY,
        },
        undefined,
        () => true,
      );
    });
    try {
      const url = `http://127.0.0.1:${port}`;
      await until(
        () =>
          fetch(`${url}/readyz`)
            .then(async (response) => response.status === 200 && (await response.json()).status === 'ready')
            // Refused or dropped: the process has not taken its port yet.
            .catch(() => false),
        60_000,
        () => `/readyz to answer 200\n${server.stdout()}${server.stderr()}`,
        5,
      );
      const first = await fetch(`${url}/v1/webhooks`, {
        headers: { authorization: `Bearer ${BOOTSTRAP_KEY}` },
      });
      await first.body?.cancel();
      return first.status;
    } finally {
      await server.stop();
    }
  } finally {
    await database.cleanup();
  }
}

for (const engine of ALL_ENGINES) {
  describe(`a fresh start on ${engine}`, { skip: engineSkip(engine) }, () => {
    test(`the first request after /readyz answers 200 is served with POSTWIRE_BOOTSTRAP_KEY, in each of ${STARTS} starts`, async () => {
      const statuses: number[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: AT_ONCE }, async () => {
          for (let start = next++; start < STARTS; start = next++) {
            statuses[start] = await firstRequestAfterReady(engine);
          }
        }),
      );
      assert.deepEqual(statuses, Array<number>(STARTS).fill(200));
    });
  });
}
