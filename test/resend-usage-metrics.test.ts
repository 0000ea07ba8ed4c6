import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { assertResendError, dataOf } from './helpers/answers.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { until } from './helpers/until.ts';

// The resend SDK's `usage.get` (issue 39, item 2): what the project used today and this month, from the
// counts Postwire keeps (the daily limit's, the daily stats, received emails) and its audience's rows.

const from = 'Shop <shop@example.com>';

/** Midnight UTC after `now`, and the first of the next month. */
const nextDay = (now: Date) =>
  new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)).toISOString();
const nextMonth = (now: Date) =>
  new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString();

const usageOf = (counts: {
  quota: number;
  sentToday: number;
  sentMonth: number;
  contacts: number;
  segments: number;
}) => {
  const now = new Date();
  return {
    object: 'usage',
    emails: {
      daily: {
        used: counts.quota,
        limit: 500,
        sent: counts.sentToday,
        received: 0,
        resets_at: nextDay(now),
      },
      monthly: {
        used: counts.sentMonth,
        limit: null,
        sent: counts.sentMonth,
        received: 0,
        resets_at: nextMonth(now),
      },
    },
    contacts: { used: counts.contacts, limit: null },
    segments: { used: counts.segments, limit: null },
    broadcasts: { used: 0, limit: null },
    ai_credits: { used: 0, limit: null, next_increase_at: null },
    automation_runs: { used: 0, limit: null, resets_at: nextMonth(now) },
    domains: { used: 0, limit: null },
    rate_limit: { limit: 1000, duration: '60s' },
  };
};

for (const engine of ALL_ENGINES) {
  describe(`the resend SDK's usage against /resend (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let worker: SendingWorker;
    let resend: Resend;
    before(async () => {
      api = await startTestApp(engine, {
        sendDailyLimit: 500,
        rateLimit: { limit: 1000, windowMs: 60_000 },
      });
      // The capture transport: every recipient is sent, and counted as `sent`.
      worker = await startSendingWorker(api);
      resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend` });
    });
    after(async () => {
      await worker.stop();
      await api.close();
    });

    test('usage.get: the daily limit, sent and received today and this month, the audience, the rate limit', async () => {
      const zero = { quota: 0, sentToday: 0, sentMonth: 0, contacts: 0, segments: 0 };
      assert.deepEqual(dataOf(await resend.usage.get()), usageOf(zero));

      dataOf(
        await resend.emails.send({
          from,
          to: ['ada@example.org', 'bob@example.org'],
          subject: 'Grüße aus Zürich',
          html: '<p>Hallo!</p>\n<p>Bis bald.</p>',
        }),
      );
      dataOf(await resend.emails.send({ from, to: 'cy@example.org', subject: 'Receipt', text: 'Thanks\n' }));
      dataOf(await resend.contacts.create({ email: 'ada@example.org', firstName: 'Ada' }));
      dataOf(await resend.segments.create({ name: 'Customers' }));
      // Three recipients count against the daily limit at once; `sent` once the worker has sent them.
      await until(async () => {
        const stats = await api.request('GET', '/v1/stats');
        return stats.body.total.sent === 3;
      });
      assert.deepEqual(
        dataOf(await resend.usage.get()),
        usageOf({ quota: 3, sentToday: 3, sentMonth: 3, contacts: 1, segments: 1 }),
      );

      // Another project's usage is its own; a sending key may not read it.
      const other = await api.createProject('Other');
      const stranger = new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` });
      assert.deepEqual(dataOf(await stranger.usage.get()), usageOf(zero));
      const made = await api.request('POST', '/v1/api-keys', {
        body: { name: 'sender', permission: 'sending_access' },
      });
      const sender = new Resend(made.body.token, { baseUrl: `${api.baseUrl}/resend` });
      assertResendError(
        await sender.usage.get(),
        403,
        'restricted_api_key',
        'This route needs a read_only key (or a full_access key); this key is sending_access.',
      );
    });
  });
}
