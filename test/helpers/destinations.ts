// The destinations' end-to-end tests' app (test/destinations.test.ts, test/destination-sources.test.ts): the
// operator's token, the delivery worker and a webhook receiver of the destinations' events.
import type { Clock } from '../../src/lib/clock.ts';
import type { Engine } from '../../src/db/connection.ts';
import { created } from './answers.ts';
import { startTestApp, TEST_SENDING_SETTINGS, type TestApp } from './app.ts';
import { type Receiver, startReceiver } from './receiver.ts';

/** The operator's token of the destinations' tests (GET /v1/destinations, /metrics). */
export const OPERATOR_TOKEN = 'operator-token-0123456789';

/** The sending worker's settings of the destinations' tests: four connections per destination, eight overall. */
export const DESTINATIONS_WORKER_SETTINGS = {
  ...TEST_SENDING_SETTINGS,
  concurrency: 8,
  schedule: [0, 1000, 1000],
  timeoutMs: 15_000,
};

/**
 * A test app on `clock` with the operator's token and its delivery worker, and the operator's events through
 * a webhook of the project whose mail waits for a destination, to `receiver`.
 */
export async function startDestinationsApp(
  engine: Engine,
  clock: Clock,
): Promise<{ app: TestApp; receiver: Receiver }> {
  const app = await startTestApp(engine, {
    allowPrivateUrls: true,
    clock,
    config: { metricsToken: OPERATOR_TOKEN, mailTransport: 'direct' },
    worker: true,
  });
  const receiver = await startReceiver();
  await created(app, '/v1/webhooks', {
    url: receiver.url,
    events: ['destination.suspended', 'destination.resumed'],
  });
  return { app, receiver };
}
