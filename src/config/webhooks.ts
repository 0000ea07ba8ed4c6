// Webhook deliveries: which URLs are allowed, timeouts, retries, concurrency, disabling and secret rotation.
import { boolean, duration, fixed, fraction, integer, schedule, section } from '../lib/settings.ts';

export const WEBHOOK_SETTINGS = section('Webhooks', {
  allowPrivateUrls: boolean('POSTWIRE_ALLOW_PRIVATE_URLS', {
    default: false,
    description: 'allow `http://` webhook URLs and loopback, private and link-local targets (development)',
  }),
  webhookTimeoutMs: integer('WEBHOOK_TIMEOUT_MS', {
    default: 15_000,
    min: 100,
    max: 600_000,
    description: 'a delivery attempt must answer 2xx within this many ms (connect and response)',
  }),
  webhookTestMarginMs: fixed(
    5000,
    'POST /v1/webhooks/{id}/test waits the attempt timeout plus this: time for a worker to claim it',
  ),
  webhookRetrySchedule: schedule('WEBHOOK_RETRY_SCHEDULE', {
    default: '0,5s,5m,30m,2h,5h,10h,10h',
    description:
      'delay before each attempt (the first is immediate); after the last, the delivery is `failed`',
  }),
  webhookRetryJitter: fraction('WEBHOOK_RETRY_JITTER', {
    default: 0.2,
    description: 'each retry delay moves by up to ± this fraction, so retries of many deliveries spread out',
  }),
  webhookConcurrency: integer('WEBHOOK_CONCURRENCY', {
    default: 64,
    min: 1,
    max: 10_000,
    description: 'delivery attempts in flight per worker process',
  }),
  webhookConcurrencyPerEndpoint: integer('WEBHOOK_CONCURRENCY_PER_ENDPOINT', {
    default: 4,
    min: 1,
    max: 1000,
    description: 'attempts in flight to one webhook per worker process',
  }),
  webhookDisableAfterMs: duration('WEBHOOK_DISABLE_AFTER', {
    default: '5d',
    description: 'a webhook whose deliveries have all failed for this long is disabled (`disabled_reason`)',
  }),
  webhookSecretRotationWindowMs: duration('WEBHOOK_SECRET_ROTATION_WINDOW', {
    default: '24h',
    description: 'after a secret changes, deliveries are signed with the new and the old secret this long',
  }),
});
