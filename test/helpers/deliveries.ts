import assert from 'node:assert/strict';
import type { DatabaseHandle } from '../../src/db/connection.ts';
import type { Clock } from '../../src/lib/clock.ts';
import { type AttemptRow, createDeliveryRepo } from '../../src/modules/deliveries/deliveries.repo.ts';
import { ENGINES, startTestApp, type TestApp, type TestAppOptions } from './app.ts';
import { type Receiver, startReceiver } from './receiver.ts';
import { until } from './until.ts';

// Shared by the webhook delivery suites: an app with a fast worker, real receivers, and waiting on events.

/** The fields of a delivery as the API shows it, sorted. */
export const DELIVERY_KEYS = [
  'attempt_log',
  'attempts',
  'completed_at',
  'created_at',
  'event_id',
  'event_type',
  'id',
  'last_attempt_at',
  'last_error',
  'last_status_code',
  'next_attempt_at',
  'object',
  'status',
  'webhook_id',
];

/** The stored webhook row, for what the API does not show. */
export async function webhookRow(t: TestApp, id: string) {
  return t.database.handle.db
    .selectFrom('webhooks')
    .selectAll()
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
}

/** A clock the test moves instead of waiting: pass it to the app (and so its workers) as `clock`. */
export interface TestClock extends Clock {
  /** Moves the clock forward by `ms`. */
  advance(ms: number): void;
}

/**
 * Real time plus an offset the test advances; `frozen`: stands still at its start, so nothing comes due
 * (a retry, a lease running out) until the test moves it.
 */
export function testClock(options: { frozen?: boolean } = {}): TestClock {
  const start = Date.now();
  let offset = 0;
  return {
    now: () => new Date((options.frozen ? start : Date.now()) + offset),
    advance(ms) {
      offset += ms;
    },
  };
}

export async function createWebhook(
  t: TestApp,
  body: Record<string, unknown>,
  key?: string,
): Promise<string> {
  const response = await t.request('POST', '/v1/webhooks', { body, ...(key ? { key } : {}) });
  assert.equal(response.status, 201, JSON.stringify(response.body));
  return response.body.data.id;
}

/** Polls the event until `done` holds for its deliveries; `timeoutMs` only guards against a hang. */
export async function waitForEvent(
  t: TestApp,
  eventId: string,
  done: (deliveries: any[]) => boolean,
  timeoutMs = 5000,
): Promise<any> {
  let last: any;
  return until(
    async () => {
      const response = await t.request('GET', `/v1/events/${eventId}`);
      assert.equal(response.status, 200);
      last = response.body;
      return done(last.deliveries) && last;
    },
    timeoutMs,
    () => `event ${eventId} to settle: ${JSON.stringify(last.deliveries)}`,
  );
}

export const settled = (deliveries: any[]) =>
  deliveries.length > 0 && deliveries.every((delivery) => delivery.status !== 'pending');

/** Starts an app (and receivers) for one test and closes everything after it. */
export function harness() {
  const opened: Array<{ close(): Promise<void> }> = [];
  return {
    async app(engine: (typeof ENGINES)[number], options: TestAppOptions = {}) {
      const t = await startTestApp(engine, { allowPrivateUrls: true, worker: true, ...options });
      opened.push(t);
      return t;
    },
    async receiver(...args: Parameters<typeof startReceiver>): Promise<Receiver> {
      const receiver = await startReceiver(...args);
      opened.push(receiver);
      return receiver;
    },
    async close() {
      for (const item of opened.reverse()) await item.close();
      opened.length = 0;
    },
  };
}

/**
 * Delivery attempts as the delivery log has them (the rows in delivery_attempts and the latest one each
 * delivery's row keeps), oldest first per delivery: all of them, one delivery's or one webhook's.
 */
export async function attemptsIn(
  database: DatabaseHandle,
  filter: { deliveryId?: string; webhookId?: string } = {},
): Promise<AttemptRow[]> {
  let query = database.db.selectFrom('deliveries').selectAll().orderBy('id');
  if (filter.deliveryId !== undefined) query = query.where('id', '=', filter.deliveryId);
  if (filter.webhookId !== undefined) query = query.where('webhook_id', '=', filter.webhookId);
  const deliveries = await query.execute();
  const repo = createDeliveryRepo(database.db);
  const attempts: AttemptRow[] = [];
  for (const projectId of new Set(deliveries.map((delivery) => delivery.project_id))) {
    const mine = deliveries.filter((delivery) => delivery.project_id === projectId);
    const byDelivery = await repo.listAttempts(projectId, mine);
    for (const delivery of mine) attempts.push(...(byDelivery.get(delivery.id) ?? []));
  }
  return attempts;
}
