import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createRunQueue } from '../src/modules/automations/runs.queue.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, type TestApp } from './helpers/app.ts';
import { testClock } from './helpers/deliveries.ts';
import { created } from './helpers/answers.ts';
import { publishedTemplate, startAutomationSuite } from './helpers/automations.ts';
import { contactImportWorker, uploadImport } from './helpers/contact-imports.ts';
import type { TestSmtpServer } from './helpers/smtp.ts';

// Automations started by contacts rather than custom events (/v1 only): a contact created, added to a list
// segment, subscribed to a topic each starts a run per contact, once (a second addition while the run lives
// starts none), written with the change. A contact deleted or unsubscribed ends its runs at once, a run waiting
// for an event without a timeout included, and nothing more is sent. A run longer than one attempt's share of
// steps finishes without waiting for a lease to run out.

const DAY = 86_400_000;

for (const engine of ALL_ENGINES) {
  describe(`automation triggers on contacts (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let smtp: TestSmtpServer;
    let runs: QueueWorker;
    let suite: Awaited<ReturnType<typeof startAutomationSuite>>;
    let hello: string;
    let segmentId: string;
    let topicId: string;
    const clock = testClock();

    before(async () => {
      suite = await startAutomationSuite(engine, clock);
      ({ api, smtp, runs } = suite);
      hello = await publishedTemplate(api, {
        name: 'Hello',
        subject:
          'Hello {{ contact.first_name }} ({{ event.segment_id | default: event.topic_id | default: "new" }})',
        html: '<p>Hello 👋</p>',
      });
      segmentId = (await created(api, '/v1/segments', { name: 'Customers' })).id;
      topicId = (await created(api, '/v1/topics', { name: 'Product news', default_subscription: 'opt_out' }))
        .id;
    });
    after(() => suite.close());

    const subjectsTo = (address: string) => suite.subjectsTo(address);
    const arrived = (count: number) => suite.arrived(count);
    const wake = () => api.services.notifiers.automationRuns.notify();
    /** An automation of `trigger` then `then` (steps after the trigger, in a line), enabled. */
    const automation = async (name: string, trigger: Record<string, unknown>, then: any[]) => {
      const steps = [{ key: 'start', type: 'trigger', config: trigger }, ...then];
      const made = await created(api, '/v1/automations', {
        name,
        status: 'enabled',
        steps,
        connections: steps.slice(1).map((step, index) => ({
          from: steps[index]!.key,
          to: step.key,
          ...(steps[index]!.type === 'wait_for_event' ? { type: 'event_received' } : {}),
        })),
      });
      return made.id as string;
    };
    const send = (key: string) => ({
      key,
      type: 'send_email',
      config: { template: { id: hello }, from: 'Acme <hello@acme.test>' },
    });
    /** The automation's runs, once `until` holds of them (the worker moves them). */
    async function runsOf(automationId: string, until: (runs: any[]) => boolean) {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const list = (await api.request('GET', `/v1/automations/${automationId}/runs`)).body.data;
        if (until(list)) return list;
        if (Date.now() > deadline) throw new Error(`runs: ${JSON.stringify(list)}`);
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    const runOf = async (automationId: string, runId: string) =>
      (await api.request('GET', `/v1/automations/${automationId}/runs/${runId}`)).body;

    test('created, added to a segment, subscribed to a topic: a run each, once, with the change', async () => {
      const onCreated = await automation('On created', { on: 'contact.created' }, [send('hi')]);
      const onSegment = await automation(
        'On segment',
        { on: 'contact.added_to_segment', segment_id: segmentId },
        [send('welcome')],
      );
      const onTopic = await automation('On topic', { on: 'contact.topic_subscribed', topic_id: topicId }, [
        send('news'),
      ]);
      const got = await api.request('GET', `/v1/automations/${onSegment}`);
      assert.deepEqual(got.body.steps[0], {
        key: 'start',
        type: 'trigger',
        config: { on: 'contact.added_to_segment', segment_id: segmentId },
      });

      const ada = await created(api, '/v1/contacts', { email: 'ada@triggers.test', first_name: 'Ada' });
      await arrived(1);
      const [first] = await runsOf(onCreated, (list) => list[0]?.status === 'completed');
      assert.deepEqual((await runOf(onCreated, first.id)).steps[0].output, { on: 'contact.created' });
      assert.deepEqual(first.trigger_payload, {});

      const add = () => api.request('POST', `/v1/contacts/${ada.id}/segments/${segmentId}`);
      assert.equal((await add()).body.added, true);
      assert.equal((await add()).body.added, false);
      await arrived(2);
      const [joined] = await runsOf(onSegment, (list) => list[0]?.status === 'completed');
      assert.deepEqual(joined.trigger_payload, { segment_id: segmentId });

      const choose = (subscription: string) =>
        api.request('PATCH', `/v1/contacts/${ada.id}/topics`, {
          body: { topics: [{ id: topicId, subscription }] },
        });
      assert.equal((await choose('opt_in')).status, 200);
      // Already subscribed: no change, no run.
      assert.equal((await choose('opt_in')).status, 200);
      await arrived(3);
      await runsOf(onTopic, (list) => list.length === 1 && list[0].status === 'completed');
      assert.deepEqual(await subjectsTo('ada@triggers.test'), [
        'Hello Ada (new)',
        `Hello Ada (${segmentId})`,
        `Hello Ada (${topicId})`,
      ]);
      // Opted out and in again: a change, so a run again (the first one has ended).
      await choose('opt_out');
      await choose('opt_in');
      await arrived(4);
      await runsOf(onTopic, (list) => list.length === 2);
      for (const id of [onCreated, onSegment, onTopic]) {
        assert.equal((await api.request('POST', `/v1/automations/${id}/stop`)).status, 200);
      }

      // A filter segment has no additions to trigger on; Resend's SDK knows event triggers only.
      const filter = await created(api, '/v1/segments', {
        name: 'Pros',
        filter: { match: 'all', conditions: [{ type: 'topic', topic_id: topicId, subscribed: true }] },
      });
      const refused = await api.request('POST', '/v1/automations', {
        body: {
          name: 'Never',
          steps: [
            {
              key: 'start',
              type: 'trigger',
              config: { on: 'contact.added_to_segment', segment_id: filter.id },
            },
          ],
          connections: [],
        },
      });
      assert.equal(refused.status, 422);
      assert.equal(
        refused.body.error.message,
        `Step 'start': the segment '${filter.id}' is a filter, not a list.`,
      );
      assert.equal(refused.body.error.param, 'steps[0].config.segment_id');
      const unknown = await api.request('POST', '/v1/automations', {
        body: {
          name: 'Never',
          steps: [{ key: 'start', type: 'trigger', config: { on: 'contact.born' } }],
          connections: [],
        },
      });
      assert.equal(unknown.status, 422);
      assert.equal(
        unknown.body.error.message,
        "Step 'start' (trigger): config.on must be one of 'contact.created', 'contact.added_to_segment', 'contact.topic_subscribed'.",
      );
      // Resend's SDK writes event triggers only (it drops `on`); sent as is to /resend, `on` is refused there.
      const resendOn = await api.request('POST', '/resend/automations', {
        body: {
          name: 'Never',
          steps: [{ key: 'start', type: 'trigger', config: { on: 'contact.created' } }],
          connections: [],
        },
      });
      assert.equal(resendOn.status, 422);
      assert.equal(
        resendOn.body.message,
        'A trigger here is a custom event (eventName); triggers on contacts are taken at /v1/automations.',
      );
    });

    test('deleted or unsubscribed: its runs end at once, a wait without a timeout included; nothing more is sent', async () => {
      const id = await automation('Waits', { event_name: 'trial.started' }, [
        send('hi'),
        { key: 'hold', type: 'wait_for_event', config: { event_name: 'trial.converted' } },
        send('thanks'),
      ]);
      const before = smtp.messages.length;
      const people = ['bea', 'cy', 'dee'];
      for (const name of people) {
        await created(api, '/v1/contacts', { email: `${name}@triggers.test`, first_name: name });
        const sent = await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'trial.started', email: `${name}@triggers.test` },
        });
        assert.equal(sent.status, 201);
      }
      await arrived(before + 3);
      const waiting = await runsOf(
        id,
        (list) => list.length === 3 && list.every((run: any) => run.status === 'waiting'),
      );
      assert.ok(waiting.every((run: any) => run.due_at === null));
      const byEmail = async (email: string) => (await api.request('GET', `/v1/contacts/${email}`)).body.id;
      const bea = await byEmail('bea@triggers.test');
      const cy = await byEmail('cy@triggers.test');

      assert.equal((await api.request('DELETE', `/v1/contacts/${bea}`)).status, 200);
      const unsubscribed = await api.request('PATCH', `/v1/contacts/${cy}`, { body: { unsubscribed: true } });
      assert.equal(unsubscribed.status, 200);
      const ended = await runsOf(
        id,
        (list) => list.filter((run: any) => run.status === 'cancelled').length === 2,
      );
      const reasons = Object.fromEntries(ended.map((run: any) => [run.contact_id, [run.status, run.reason]]));
      assert.deepEqual(reasons[bea], ['cancelled', 'contact_deleted']);
      assert.deepEqual(reasons[cy], ['cancelled', 'contact_unsubscribed']);

      // Their event comes (it would resume them): nothing more is sent to them; dee goes on.
      for (const name of people.slice(1)) {
        await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'trial.converted', email: `${name}@triggers.test` },
        });
      }
      await arrived(before + 4);
      await runsOf(id, (list) => list.some((run: any) => run.status === 'completed'));
      clock.advance(3 * DAY);
      wake();
      const queue = createRunQueue(api.database.handle.db, api.database.handle.engine);
      assert.equal(await queue.nextDueAt(clock.now()), undefined);
      await runs.whenIdle();
      assert.deepEqual(await subjectsTo('bea@triggers.test'), ['Hello bea (new)']);
      assert.deepEqual(await subjectsTo('cy@triggers.test'), ['Hello cy (new)']);
      assert.deepEqual(await subjectsTo('dee@triggers.test'), ['Hello dee (new)', 'Hello dee (new)']);
      assert.equal((await api.request('POST', `/v1/automations/${id}/stop`)).status, 200);
    });

    test('a run longer than an attempt’s share of steps finishes without the clock moving', async () => {
      // 70 conditions in a line: an attempt takes 50 and its outcome gives the run back due at once, to be
      // claimed again at once, not when a lease (2 min on this clock, which does not move) runs out.
      const conditions = Array.from({ length: 70 }, (_, index) => ({
        key: `c${index}`,
        type: 'condition',
        config: { type: 'rule', field: 'contact.email', operator: 'exists' },
      }));
      const steps = [{ key: 'start', type: 'trigger', config: { event_name: 'long.chain' } }, ...conditions];
      const made = await created(api, '/v1/automations', {
        name: 'Long chain',
        status: 'enabled',
        steps,
        connections: steps.slice(1).map((step, index) => ({
          from: steps[index]!.key,
          to: step.key,
          ...(index === 0 ? {} : { type: 'condition_met' }),
        })),
      });
      await created(api, '/v1/contacts', { email: 'long@triggers.test' });
      const sent = await api.request('POST', '/v1/custom-events/send', {
        body: { event: 'long.chain', email: 'long@triggers.test' },
      });
      assert.equal(sent.status, 201);
      const [done] = await runsOf(made.id, (list) => list[0]?.status === 'completed');
      assert.equal((await runOf(made.id, done.id)).steps.length, 71);
    });
    test('a run follows the graph it started with; an update is for the runs started after it', async () => {
      const later = await publishedTemplate(api, {
        name: 'Later',
        subject: 'The new email',
        html: '<p>New</p>',
      });
      const graph = (template: string) => ({
        steps: [
          { key: 'start', type: 'trigger', config: { event_name: 'plan.chosen' } },
          { key: 'wait', type: 'delay', config: { duration: '1 day' } },
          {
            key: 'mail',
            type: 'send_email',
            config: { template: { id: template }, from: 'hello@acme.test' },
          },
        ],
        connections: [
          { from: 'start', to: 'wait' },
          { from: 'wait', to: 'mail' },
        ],
      });
      const made = await created(api, '/v1/automations', {
        name: 'Versions',
        status: 'enabled',
        ...graph(hello),
      });
      const before = smtp.messages.length;
      const choose = async (email: string) => {
        await created(api, '/v1/contacts', { email, first_name: email.split('@')[0] });
        const sent = await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'plan.chosen', email },
        });
        assert.equal(sent.status, 201);
      };
      await choose('old@triggers.test');
      await runsOf(made.id, (list) => list[0]?.current_step === 'mail');
      const updated = await api.request('PATCH', `/v1/automations/${made.id}`, { body: graph(later) });
      assert.equal(updated.status, 200);
      await choose('new@triggers.test');
      await runsOf(
        made.id,
        (list) => list.length === 2 && list.every((run: any) => run.current_step === 'mail'),
      );
      clock.advance(DAY + 1000);
      wake();
      await arrived(before + 2);
      assert.deepEqual(await subjectsTo('old@triggers.test'), ['Hello old (new)']);
      assert.deepEqual(await subjectsTo('new@triggers.test'), ['The new email']);
      assert.equal((await api.request('POST', `/v1/automations/${made.id}/stop`)).status, 200);
    });
    test('an import: its new contacts, its additions and subscriptions start runs; its unsubscribes end them', async () => {
      const imports = contactImportWorker(api);
      await imports.start();
      try {
        const listId = (await created(api, '/v1/segments', { name: 'Imported' })).id;
        const newsId = (await created(api, '/v1/topics', { name: 'Digest', default_subscription: 'opt_out' }))
          .id;
        const hold = [{ key: 'hold', type: 'wait_for_event', config: { event_name: 'never.sent' } }];
        const onList = await automation(
          'On list',
          { on: 'contact.added_to_segment', segment_id: listId },
          hold,
        );
        const onNews = await automation(
          'On news',
          { on: 'contact.topic_subscribed', topic_id: newsId },
          hold,
        );
        const onCreated = await automation('Imported created', { on: 'contact.created' }, hold);
        // Already in the list and subscribed: the import changes neither, so starts nothing for it.
        const zed = await created(api, '/v1/contacts', { email: 'zed@imports.test' });
        await api.request('POST', `/v1/contacts/${zed.id}/segments/${listId}`);
        await api.request('PATCH', `/v1/contacts/${zed.id}/topics`, {
          body: { topics: [{ id: newsId, subscription: 'opt_in' }] },
        });
        const yan = await created(api, '/v1/contacts', { email: 'yan@imports.test' });
        const upload = async (csv: string) => {
          const accepted = await uploadImport(api, csv, {
            column_map: { email: 'email', unsubscribed: 'out' },
            segments: [listId],
            topics: [{ id: newsId, subscription: 'opt_in' }],
          });
          assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
          await imports.whenIdle();
        };
        await upload(
          'email,out\nzed@imports.test,\nyan@imports.test,\nxia@imports.test,\nwu@imports.test,\n',
        );
        const contactsOf = async (id: string, count: number) =>
          (
            await runsOf(
              id,
              (list) => list.length === count && list.every((run: any) => run.status === 'waiting'),
            )
          )
            .map((run: any) => run.contact_id)
            .sort();
        const xia = (await api.request('GET', '/v1/contacts/xia@imports.test')).body.id;
        const wu = (await api.request('GET', '/v1/contacts/wu@imports.test')).body.id;
        assert.deepEqual(await contactsOf(onList, 4), [zed.id, yan.id, xia, wu].sort());
        assert.deepEqual(await contactsOf(onNews, 4), [zed.id, yan.id, xia, wu].sort());
        // Created by the API (zed, yan: the earlier tests' automations are stopped) and by the import (xia, wu).
        assert.deepEqual(await contactsOf(onCreated, 4), [zed.id, yan.id, xia, wu].sort());

        await upload('email,out\nxia@imports.test,yes\n');
        const ended = await runsOf(onList, (list) => list.some((run: any) => run.status === 'cancelled'));
        assert.deepEqual(
          ended
            .filter((run: any) => run.status === 'cancelled')
            .map((run: any) => [run.contact_id, run.reason]),
          [[xia, 'contact_unsubscribed']],
        );
        for (const id of [onList, onNews, onCreated]) {
          assert.equal((await api.request('POST', `/v1/automations/${id}/stop`)).status, 200);
        }
      } finally {
        await imports.stop();
      }
    });
  });
}
