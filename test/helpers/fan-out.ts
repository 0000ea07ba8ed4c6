import assert from 'node:assert/strict';
import type { Clock } from '../../src/lib/clock.ts';
import {
  type BroadcastWorkerSettings,
  createBroadcastWorker,
} from '../../src/modules/broadcasts/broadcasts.worker.ts';
import { createFanOut, type FanOut, type FanOutDeps } from '../../src/modules/broadcasts/fan-out.ts';
import type { QueueWorker } from '../../src/queue/runtime.ts';
import type { TestApp } from './app.ts';
import { created } from './answers.ts';

/**
 * A broadcast fan-out on the test app's parts, as src/services.ts builds the process's, with `overrides` (a
 * clock, a batch size, a repository that fails or hangs where a test says).
 */
export const fanOutOf = (api: TestApp, overrides: Partial<FanOutDeps> = {}): FanOut =>
  createFanOut({ ...api.services.fanOutDeps, ...overrides });

/** Starts a broadcast worker on the test app (its own fan-out unless given one), polling every 50 ms. */
export async function startFanOutWorker(
  api: TestApp,
  options: { clock: Clock; fanOut?: FanOut; settings?: BroadcastWorkerSettings },
): Promise<QueueWorker> {
  const worker = createBroadcastWorker({
    database: api.database.handle,
    clock: options.clock,
    fanOut: options.fanOut ?? api.services.fanOut,
    notifier: api.services.notifiers.broadcast,
    settings: { pollIntervalMs: 50, ...options.settings },
  });
  await worker.start();
  return worker;
}

/**
 * Sends a broadcast now from `from` to a new list segment of contacts at `addresses` (German text, each copy
 * with its unsubscribe link, so the app needs a PUBLIC_URL).
 */
export async function sendBroadcastToNewSegment(
  api: TestApp,
  options: { from: string; addresses: readonly string[] },
): Promise<void> {
  const segment = await created(api, '/v1/segments', { name: 'Leser' });
  for (const email of options.addresses) {
    const contact = await created(api, '/v1/contacts', { email });
    const added = await api.request('POST', `/v1/contacts/${contact.id}/segments/${segment.id}`);
    assert.equal(added.status, 200, JSON.stringify(added.body));
  }
  await created(api, '/v1/broadcasts', {
    name: 'März',
    from: options.from,
    subject: 'Neuigkeiten für {{ contact.email }}',
    html: '<p>Hallo!</p>\n<p>Was es Neues gibt: ✓</p>\n<a href="{{ unsubscribe_url }}">Abmelden</a>',
    text: 'Hallo!\nWas es Neues gibt: ✓\nAbmelden: {{ unsubscribe_url }}',
    segment_id: segment.id,
    send: true,
  });
}
