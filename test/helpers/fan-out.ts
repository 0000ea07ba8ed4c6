import type { Clock } from '../../src/lib/clock.ts';
import {
  type BroadcastWorkerSettings,
  createBroadcastWorker,
} from '../../src/modules/broadcasts/broadcasts.worker.ts';
import { createFanOut, type FanOut, type FanOutDeps } from '../../src/modules/broadcasts/fan-out.ts';
import type { QueueWorker } from '../../src/queue/runtime.ts';
import type { TestApp } from './app.ts';

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
