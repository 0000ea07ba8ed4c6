import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { testClock } from './helpers/deliveries.ts';
import { created } from './helpers/answers.ts';
import { publishedTemplate, startRunWorker } from './helpers/automations.ts';
import { BROWSER, onServer, parseMail } from './helpers/engagement.ts';
import { startSendingWorker } from './helpers/sending.ts';

// The steps that wait and the steps that change the contact, on the injected clock: a wait for an event ends
// with its event (when its filter passes, else it waits on) or at its timeout, each branch taken and said; a
// contact update reads the event's payload; segments are joined and left; a contact deleted mid-run cancels it.

const DAY = 86_400_000;

for (const engine of ALL_ENGINES) {
  describe(`automation steps (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let runs: QueueWorker;
    let automationId: string;
    let segmentId: string;
    const clock = testClock();

    before(async () => {
      api = await startTestApp(engine, { clock });
      runs = await startRunWorker(api, clock);
      await created(api, '/v1/contact-properties', { key: 'plan', type: 'string', fallback_value: 'free' });
      segmentId = (await created(api, '/v1/segments', { name: 'Customers' })).id;
      const automation = await created(api, '/v1/automations', {
        name: 'Trial',
        status: 'enabled',
        steps: [
          { key: 'start', type: 'trigger', config: { event_name: 'trial.started' } },
          {
            key: 'hold',
            type: 'wait_for_event',
            config: {
              event_name: 'trial.converted',
              timeout: '3 days',
              filter_rule: { type: 'rule', field: 'event.amount', operator: 'gt', value: 0 },
            },
          },
          {
            key: 'upgrade',
            type: 'contact_update',
            config: { first_name: { var: 'event.name' }, properties: { plan: { var: 'event.plan' } } },
          },
          { key: 'tag', type: 'add_to_segment', config: { segment_id: segmentId } },
          { key: 'untag', type: 'remove_from_segment', config: { segment_id: segmentId } },
          { key: 'bye', type: 'contact_delete', config: {} },
        ],
        connections: [
          { from: 'start', to: 'hold' },
          { from: 'hold', to: 'upgrade', type: 'event_received' },
          { from: 'upgrade', to: 'tag' },
          { from: 'hold', to: 'untag', type: 'timeout' },
          { from: 'untag', to: 'bye' },
        ],
      });
      automationId = automation.id;
    });
    after(async () => {
      await runs.stop();
      await api.close();
    });

    /** The run of a contact, once it is in `status` (the worker moves it). */
    async function runOf(contactId: string, status: string) {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const list = await api.request('GET', `/v1/automations/${automationId}/runs?status=${status}`);
        const run = list.body.data.find((each: any) => each.contact_id === contactId);
        if (run) return (await api.request('GET', `/v1/automations/${automationId}/runs/${run.id}`)).body;
        if (Date.now() > deadline) throw new Error(`no ${status} run of ${contactId}`);
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    const send = async (event: string, email: string, payload: Record<string, unknown> = {}) => {
      const response = await api.request('POST', '/v1/custom-events/send', {
        body: { event, email, payload },
      });
      assert.equal(response.status, 201, JSON.stringify(response.body));
      return response.body;
    };

    test('a wait ends with its event (its filter passing), the contact updated from the payload', async () => {
      const gus = await created(api, '/v1/contacts', { email: 'gus@steps.test' });
      await send('trial.started', 'gus@steps.test');
      const waiting = await runOf(gus.id, 'waiting');
      const timeoutAt = waiting.steps[1].output.timeout_at;
      assert.equal(waiting.due_at, timeoutAt);

      // Its filter does not pass: it waits on, until the same timeout.
      assert.equal((await send('trial.converted', 'gus@steps.test', { amount: 0 })).runs_resumed, 1);
      let run = await runOf(gus.id, 'waiting');
      while (run.steps.length < 3) run = await runOf(gus.id, 'waiting');
      assert.deepEqual(run.steps[2].output, {
        event_name: 'trial.converted',
        timeout_at: timeoutAt,
        ignored: { amount: 0 },
        because: 'filter_rule not met',
      });
      assert.equal(run.due_at, timeoutAt);

      await send('trial.converted', 'gus@steps.test', { amount: 49, plan: 'pro', name: 'Gustave' });
      run = await runOf(gus.id, 'completed');
      assert.deepEqual(
        run.steps.map((step: any) => [step.key, step.status]),
        [
          ['start', 'completed'],
          ['hold', 'waiting'],
          ['hold', 'waiting'],
          ['hold', 'completed'],
          ['upgrade', 'completed'],
          ['tag', 'completed'],
        ],
      );
      assert.equal(run.steps[3].output.branch, 'event_received');
      const contact = (await api.request('GET', `/v1/contacts/${gus.id}`)).body;
      assert.equal(contact.first_name, 'Gustave');
      assert.equal(contact.properties.plan, 'pro');
      const segments = await api.request('GET', `/v1/contacts/${gus.id}/segments`);
      assert.deepEqual(
        segments.body.data.map((segment: any) => segment.id),
        [segmentId],
      );
    });

    test('at its timeout the other branch; a contact deleted meanwhile cancels its run', async () => {
      const hal = await created(api, '/v1/contacts', { email: 'hal@steps.test' });
      const ivy = await created(api, '/v1/contacts', { email: 'ivy@steps.test' });
      await send('trial.started', 'hal@steps.test');
      await send('trial.started', 'ivy@steps.test');
      assert.equal((await runOf(hal.id, 'waiting')).contact_email, 'hal@steps.test');
      await runOf(ivy.id, 'waiting');
      assert.equal((await api.request('DELETE', `/v1/contacts/${ivy.id}`)).status, 200);

      clock.advance(3 * DAY + 1000);
      api.services.notifiers.automationRuns.notify();
      const run = await runOf(hal.id, 'completed');
      assert.deepEqual(
        run.steps.map((step: any) => [step.key, step.status]),
        [
          ['start', 'completed'],
          ['hold', 'waiting'],
          ['hold', 'completed'],
          ['untag', 'completed'],
          ['bye', 'completed'],
        ],
      );
      assert.deepEqual(run.steps[2].output, { timed_out: true, branch: 'timeout' });
      assert.equal((await api.request('GET', `/v1/contacts/${hal.id}`)).status, 404);
      const cancelled = await runOf(ivy.id, 'cancelled');
      assert.equal(cancelled.reason, 'contact_deleted');
      // Its contact gone, a run still shows by the contact's id, without an address.
      assert.deepEqual([cancelled.contact_id, cancelled.contact_email], [ivy.id, null]);
      const listed = await api.request('GET', `/v1/automations/${automationId}/runs?status=cancelled`);
      assert.deepEqual(
        listed.body.data.map((each: any) => [each.contact_id, each.contact_email]),
        [[ivy.id, null]],
      );
    });

    test('a condition on the engagement of the email sent before it: opened, or not', async () => {
      const PUBLIC_URL = 'https://mail.acme.test';
      const tracked = await startTestApp(engine, {
        clock,
        publicUrl: PUBLIC_URL,
        engagementDefaults: { trackOpens: true, trackClicks: false, listUnsubscribe: false },
      });
      const sending = await startSendingWorker(tracked, { clock, publicUrl: PUBLIC_URL });
      const worker = await startRunWorker(tracked, clock);
      try {
        const news = await publishedTemplate(tracked, {
          name: 'News',
          subject: 'What shipped',
          html: '<p>Three things shipped.</p>\n<p>Ünïcode too ✓</p>',
        });
        const automation = await created(tracked, '/v1/automations', {
          name: 'Engaged?',
          status: 'enabled',
          steps: [
            { key: 'start', type: 'trigger', config: { event_name: 'news.ready' } },
            { key: 'news', type: 'send_email', config: { template: { id: news }, from: 'news@acme.test' } },
            { key: 'later', type: 'delay', config: { duration: '1 day' } },
            {
              key: 'opened',
              type: 'condition',
              config: { type: 'rule', field: 'email.opened', operator: 'eq', value: true },
            },
          ],
          connections: [
            { from: 'start', to: 'news' },
            { from: 'news', to: 'later' },
            { from: 'later', to: 'opened' },
          ],
        });
        const runs = async () =>
          (await tracked.request('GET', `/v1/automations/${automation.id}/runs`)).body.data as any[];
        for (const email of ['reader@steps.test', 'skimmer@steps.test']) {
          const sent = await tracked.request('POST', '/v1/custom-events/send', {
            body: { event: 'news.ready', email, create_contact: true },
          });
          assert.equal(sent.status, 201);
        }
        // Both emails sent (the delay reached), then the reader's pixel fetched as a mail client would.
        const emailIds = new Map<string, string>();
        const deadline = Date.now() + 20_000;
        while (emailIds.size < 2) {
          if (Date.now() > deadline)
            throw new Error(`sent: ${JSON.stringify([...emailIds])} ${JSON.stringify(await runs())}`);
          for (const run of await runs()) {
            const detail = (await tracked.request('GET', `/v1/automations/${automation.id}/runs/${run.id}`))
              .body;
            const email = detail.steps[1]?.output?.email_id;
            const status = email && (await tracked.request('GET', `/v1/emails/${email}`)).body.status;
            if (status !== undefined && status !== 'queued') emailIds.set(detail.steps[1].output.to, email);
          }
          await new Promise((resolve) => setImmediate(resolve));
        }
        const raw = (await tracked.request('GET', `/v1/emails/${emailIds.get('reader@steps.test')}/raw`)).body
          .raw;
        const pixel = (await parseMail(raw)).pixel;
        assert.ok(pixel, raw);
        assert.equal(
          (await fetch(onServer(pixel, tracked.baseUrl), { headers: { 'user-agent': BROWSER } })).status,
          200,
        );

        clock.advance(DAY + 1000);
        tracked.services.notifiers.automationRuns.notify();
        const outcomes = new Map<string, unknown>();
        while (outcomes.size < 2) {
          for (const run of await runs()) {
            if (run.status !== 'completed') continue;
            const detail = (await tracked.request('GET', `/v1/automations/${automation.id}/runs/${run.id}`))
              .body;
            outcomes.set(detail.steps[1].output.to, detail.steps[3].output);
          }
          await new Promise((resolve) => setImmediate(resolve));
        }
        assert.deepEqual(outcomes.get('reader@steps.test'), {
          result: true,
          branch: 'condition_met',
          values: { 'email.opened': true },
        });
        assert.deepEqual(outcomes.get('skimmer@steps.test'), {
          result: false,
          branch: 'condition_not_met',
          values: { 'email.opened': false },
        });
      } finally {
        await worker.stop();
        await sending.stop();
        await tracked.close();
      }
    });
  });
}
