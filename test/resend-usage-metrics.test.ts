import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { assertResendError, dataOf } from './helpers/answers.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { until } from './helpers/until.ts';

// The resend SDK's `usage.get` and `emails.metrics` (issue 39, items 2 and 3): what the project used today
// and this month, from the counts Postwire keeps (the daily limit's, the daily stats, received emails) and its
// audience's rows; its daily counts in Resend's metrics, per day, week or month.

const from = 'Shop <shop@example.com>';
const ALL_METRICS = [
  'sent',
  'delivered',
  'delivery_delayed',
  'bounced',
  'bounced_permanent',
  'bounced_transient',
  'bounced_undetermined',
  'failed',
  'complained',
  'suppressed',
  'unsubscribed',
  'opened',
  'clicked',
  'unique_opened',
  'unique_clicked',
  'delivery_rate',
  'open_rate',
  'click_rate',
  'bounce_rate',
  'complaint_rate',
  'unsubscribe_rate',
];
const DAY = 86_400_000;
const dayOf = (time: number) => new Date(time).toISOString().slice(0, 10);

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
  describe(
    `the resend SDK's usage and metrics against /resend (${engine})`,
    { skip: engineSkip(engine) },
    () => {
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

      test('usage.get and emails.metrics: the daily limit, sent and received today and this month, the audience, the rate limit; counts per period', async () => {
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
        dataOf(
          await resend.emails.send({ from, to: 'cy@example.org', subject: 'Receipt', text: 'Thanks\n' }),
        );
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

        // The same sends in Resend's metrics: the last 7 UTC days by default, in total.
        const today = dayOf(Date.now());
        const stats = (await api.request('GET', '/v1/stats')).body.total;
        const totals = dataOf(await resend.emails.metrics());
        assert.deepEqual(Object.keys(totals), [
          'object',
          'start_date',
          'end_date',
          'metrics',
          'dimensions',
          'granularity',
          'totals',
        ]);
        assert.equal(totals.object, 'metrics');
        assert.equal(totals.start_date, `${dayOf(Date.now() - 6 * DAY)}T00:00:00.000Z`);
        assert.equal(totals.end_date, `${today}T23:59:59.999Z`);
        assert.deepEqual(totals.metrics, ALL_METRICS);
        assert.deepEqual(totals.dimensions, []);
        assert.equal(totals.granularity, 'daily');
        assert.deepEqual(Object.keys(totals.totals), ALL_METRICS);
        assert.equal(totals.totals.sent, 3);
        assert.equal(totals.totals.delivered, stats.delivered);
        assert.equal(totals.totals.delivery_rate, stats.delivered / 3);
        assert.equal(totals.totals.bounced, 0);
        assert.equal(totals.totals.bounce_rate, 0);
        assert.equal(totals.totals.open_rate, 0);

        // Per period: today alone, then weeks (from Monday, the first one from the start) and months of a range.
        const daily = dataOf(
          await resend.emails.metrics({
            startDate: today,
            endDate: `${today}T23:00:00Z`,
            dimensions: ['period'],
            metrics: ['sent', 'complaint_rate'],
          }),
        );
        assert.deepEqual(daily.data, [{ period: `${today}T00:00:00.000Z`, sent: 3, complaint_rate: 0 }]);
        assert.deepEqual(daily.totals, { sent: 3, complaint_rate: 0 });
        const weekly = dataOf(
          await resend.emails.metrics({
            startDate: '2026-11-01',
            endDate: '2026-11-20',
            dimensions: ['period'],
            granularity: 'weekly',
            metrics: ['sent'],
            timezone: 'UTC',
          }),
        );
        assert.deepEqual(
          weekly.data?.map((row) => row.period),
          [
            '2026-11-01T00:00:00.000Z',
            '2026-11-02T00:00:00.000Z',
            '2026-11-09T00:00:00.000Z',
            '2026-11-16T00:00:00.000Z',
          ],
        );
        assert.equal(weekly.end_date, '2026-11-20T23:59:59.999Z');
        const monthly = dataOf(
          await resend.emails.metrics({
            startDate: '2026-10-15',
            endDate: '2026-11-20',
            dimensions: ['period'],
            granularity: 'monthly',
            metrics: ['bounced_permanent'],
          }),
        );
        assert.deepEqual(monthly.data, [
          { period: '2026-10-15T00:00:00.000Z', bounced_permanent: 0 },
          { period: '2026-11-01T00:00:00.000Z', bounced_permanent: 0 },
        ]);

        // What the daily counts cannot tell: 501, with why; what is wrong: 422.
        const perDay = "Postwire's counts are per project and UTC day (GET /v1/stats)";
        assertResendError(
          await resend.emails.metrics({ dimensions: ['period', 'domain'] }),
          501,
          'application_error',
          `${perDay}, not per domain: no dimension 'domain'.`,
        );
        assertResendError(
          await resend.emails.metrics({ emailId: ['msg_x'] }),
          501,
          'application_error',
          `${perDay}, not per email: no filter 'email_id'.`,
        );
        assertResendError(
          await resend.emails.metrics({ granularity: 'hourly', dimensions: ['period'] }),
          501,
          'application_error',
          `${perDay}: no hourly granularity.`,
        );
        assertResendError(
          await resend.emails.metrics({ timezone: 'Europe/Zurich' }),
          501,
          'application_error',
          `${perDay}: no timezone but UTC.`,
        );
        assertResendError(
          await resend.emails.metrics({ metrics: ['received', 'sent'] }),
          501,
          'application_error',
          `${perDay}, which do not count the emails accepted: no metric 'received' (sent is what the next hop accepted).`,
        );
        assertResendError(
          await resend.emails.metrics({ startDate: 'last week' }),
          422,
          'validation_error',
          'start_date must be a date (YYYY-MM-DD) or an ISO 8601 date-time.',
        );
        assertResendError(
          await resend.emails.metrics({ startDate: '2026-11-20', endDate: '2026-11-01' }),
          422,
          'validation_error',
          'start_date must not be after end_date.',
        );
        assertResendError(
          await resend.emails.metrics({ metrics: ['sends' as 'sent'] }),
          422,
          'validation_error',
          `'sends' is not one of metrics: ${[...ALL_METRICS, 'received'].join(', ')}.`,
        );

        // Another project's usage is its own; a sending key may not read it.
        const other = await api.createProject('Other');
        const stranger = new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` });
        assert.deepEqual(dataOf(await stranger.usage.get()), usageOf(zero));
        const made = await api.request('POST', '/v1/api-keys', {
          body: { name: 'sender', permission: 'sending_access' },
        });
        const sender = new Resend(made.body.token, { baseUrl: `${api.baseUrl}/resend` });
        for (const refused of [await sender.usage.get(), await sender.emails.metrics()]) {
          assertResendError(
            refused,
            403,
            'restricted_api_key',
            'This route needs a read_only key (or a full_access key); this key is sending_access.',
          );
        }
        assert.equal(dataOf(await stranger.emails.metrics()).totals.sent, 0);
      });
    },
  );
}
