import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import { createRunQueue } from '../src/modules/automations/runs.queue.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { testClock } from './helpers/deliveries.ts';
import { assertResendError, created, dataOf } from './helpers/answers.ts';
import {
  arrived as arrivedAt,
  dyingRunner,
  publishedTemplate,
  startRunWorker,
  subjectsTo as subjectsToIn,
} from './helpers/automations.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';

// Resend's SDK, unchanged, drives automations, their runs and custom events at /resend: an automation
// (`user.signed_up` → welcome → two days → a condition on a property → one of two emails) created with it, an
// event sent for a contact, and on the injected clock the right emails arrive at a real SMTP server, in order,
// once each, also when the worker that held the runs was killed mid-run; a stopped automation sends nothing
// more.

const DAY = 86_400_000;

for (const engine of ALL_ENGINES) {
  describe(
    `the resend SDK's automations and events against /resend (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      let api: TestApp;
      let resend: Resend;
      let smtp: TestSmtpServer;
      let sending: SendingWorker;
      let runs: QueueWorker;
      const clock = testClock();
      const startRuns = async () => {
        runs = await startRunWorker(api, clock);
      };

      before(async () => {
        api = await startTestApp(engine, { clock });
        resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend` });
        smtp = await startSmtpServer();
        sending = await startSendingWorker(api, { relayPort: smtp.port, clock });
        await startRuns();
      });
      after(async () => {
        await runs.stop();
        await sending.stop();
        await smtp.close();
        await api.close();
      });

      const published = (name: string, subject: string, html: string) =>
        publishedTemplate(api, { name, subject, html });
      const subjectsTo = (address: string) => subjectsToIn(smtp, address);
      const arrived = (count: number) => arrivedAt(smtp, count);
      /** The contact's run as the SDK lists and gets it, once its current step is `step` (or it is `status`). */
      async function runOf(automationId: string, until: (run: any) => boolean) {
        const deadline = Date.now() + 30_000;
        for (;;) {
          for (const item of dataOf(await resend.automations.runs.list({ automationId })).data) {
            const run = dataOf(await resend.automations.runs.get({ automationId, runId: item.id }));
            if (until(run)) return run;
          }
          if (Date.now() > deadline) throw new Error('no such run');
          await new Promise((resolve) => setImmediate(resolve));
        }
      }

      test('custom events: create, get by id or name, list, update, remove', async () => {
        const made = dataOf(
          await resend.events.create({ name: 'order.placed', schema: { total: 'number' } }),
        );
        assert.deepEqual(Object.keys(made).sort(), ['id', 'object']);
        assert.equal(made.object, 'event');
        const got = dataOf(await resend.events.get('order.placed'));
        assert.deepEqual(got, {
          object: 'event',
          id: made.id,
          name: 'order.placed',
          schema: { total: 'number' },
          created_at: got.created_at,
          updated_at: got.created_at,
        });
        assert.deepEqual(dataOf(await resend.events.get(made.id)), got);
        assert.deepEqual(dataOf(await resend.events.update(made.id, { schema: null })), {
          object: 'event',
          id: made.id,
        });
        const listed = dataOf(await resend.events.list());
        assert.equal(listed.object, 'list');
        assert.deepEqual(
          listed.data.map((event) => [event.name, event.schema]),
          [['order.placed', null]],
        );
        assert.deepEqual(dataOf(await resend.events.remove('order.placed')), {
          object: 'event',
          id: made.id,
          deleted: true,
        });
        assertResendError(
          await resend.events.get('order.placed'),
          404,
          'not_found',
          "No custom event with id 'order.placed'.",
        );
      });

      test('the welcome series: created with the SDK, driven by events.send, across a worker killed mid-run', async () => {
        await created(api, '/v1/contact-properties', { key: 'plan', type: 'string', fallback_value: 'free' });
        const welcome = await published(
          'Welcome',
          'Welcome, {{ contact.first_name | default: "friend" }}!',
          '<p>Hello 👋 from {{ event.source | default: "us" }}</p>',
        );
        const pro = await published(
          'Pro',
          'Pro tips',
          '<p>Tips for the {{ contact.properties.plan }} plan.</p>',
        );
        const upgrade = await published('Upgrade', 'Upgrade to Pro', '<p>Still free? Upgrade.</p>');
        const made = dataOf(
          await resend.automations.create({
            name: 'Welcome series',
            status: 'enabled',
            steps: [
              { key: 'start', type: 'trigger', config: { eventName: 'user.signed_up' } },
              {
                key: 'welcome',
                type: 'send_email',
                config: { template: { id: welcome }, from: 'Acme <hello@acme.test>' },
              },
              { key: 'wait', type: 'delay', config: { duration: '2 days' } },
              {
                key: 'is_pro',
                type: 'condition',
                config: { type: 'rule', field: 'contact.plan', operator: 'eq', value: 'pro' },
              },
              { key: 'pro', type: 'send_email', config: { template: { id: pro }, from: 'hello@acme.test' } },
              {
                key: 'upgrade',
                type: 'send_email',
                config: { template: { id: upgrade }, from: 'hello@acme.test' },
              },
            ],
            connections: [
              { from: 'start', to: 'welcome' },
              { from: 'welcome', to: 'wait' },
              { from: 'wait', to: 'is_pro' },
              { from: 'is_pro', to: 'pro', type: 'condition_met' },
              { from: 'is_pro', to: 'upgrade', type: 'condition_not_met' },
            ],
          }),
        );
        assert.equal(made.object, 'automation');
        const automationId = made.id;
        const got = dataOf(await resend.automations.get(automationId));
        assert.equal(got.status, 'enabled');
        assert.deepEqual(got.steps[0], {
          key: 'start',
          type: 'trigger',
          config: { event_name: 'user.signed_up' },
        });
        assert.deepEqual(got.connections[3], { from: 'is_pro', to: 'pro', type: 'condition_met' });
        assert.deepEqual(
          dataOf(await resend.automations.list()).data.map((each) => [each.id, each.name, each.status]),
          [[automationId, 'Welcome series', 'enabled']],
        );

        await created(api, '/v1/contacts', {
          email: 'ada@sdk.test',
          first_name: 'Ada',
          properties: { plan: 'pro' },
        });
        assert.deepEqual(
          dataOf(
            await resend.events.send({
              event: 'user.signed_up',
              email: 'ada@sdk.test',
              payload: { source: 'ads' },
            }),
          ),
          { object: 'event', event: 'user.signed_up' },
        );
        // An address without a contact: Resend creates one.
        dataOf(await resend.events.send({ event: 'user.signed_up', email: 'bob@sdk.test' }));
        await arrived(2);
        assert.deepEqual(await subjectsTo('ada@sdk.test'), ['Welcome, Ada!']);
        assert.deepEqual(await subjectsTo('bob@sdk.test'), ['Welcome, friend!']);
        await runOf(automationId, (run) => run.steps.length === 3);

        // The worker is killed mid-run when the runs fall due: it takes each run's condition (committed) and
        // dies inside its email's transaction (nothing of the email commits), holding both leases. Another
        // worker takes them once the lease has run out, at the email: each arrives once.
        await runs.stop();
        clock.advance(2 * DAY + 1000);
        const queue = createRunQueue(api.database.handle.db, api.database.handle.engine);
        const now = clock.now();
        const claimed = await queue.claimDue(
          { workerId: 'dead', now, until: new Date(now.getTime() + 60_000) },
          10,
        );
        assert.equal(claimed.length, 2);
        const dead = dyingRunner(api, clock, { inEmail: () => true });
        for (const id of claimed) await assert.rejects(dead.run(id, 'dead'), /the process died/);
        const cut = await runOf(automationId, (run) => run.steps.length === 4);
        assert.equal(cut.steps.at(-1)?.key, 'is_pro');
        assert.equal(smtp.messages.length, 2);
        await startRuns();
        clock.advance(120_000);
        api.services.notifiers.automationRuns.notify();
        await arrived(4);
        assert.deepEqual(await subjectsTo('ada@sdk.test'), ['Welcome, Ada!', 'Pro tips']);
        assert.deepEqual(await subjectsTo('bob@sdk.test'), ['Welcome, friend!', 'Upgrade to Pro']);
        const run = await runOf(
          automationId,
          (each) => each.status === 'completed' && each.steps.at(-1).key === 'pro',
        );
        assert.deepEqual(Object.keys(run).sort(), [
          'completed_at',
          'created_at',
          'id',
          'object',
          'started_at',
          'status',
          'steps',
        ]);
        assert.deepEqual(
          run.steps.map((step: any) => [step.key, step.type, step.status]),
          [
            ['start', 'trigger', 'completed'],
            ['welcome', 'send_email', 'completed'],
            ['wait', 'delay', 'completed'],
            ['is_pro', 'condition', 'completed'],
            ['pro', 'send_email', 'completed'],
          ],
        );
        assert.equal(
          dataOf(await resend.automations.runs.list({ automationId, status: ['completed'] })).data.length,
          2,
        );

        // Stopped: a run waiting in its delay is cancelled, and nothing more is sent.
        dataOf(await resend.events.send({ event: 'user.signed_up', email: 'cy@sdk.test' }));
        await arrived(5);
        await runOf(automationId, (each) => each.status === 'running' && each.steps.length === 3);
        assert.deepEqual(dataOf(await resend.automations.stop(automationId)), {
          object: 'automation',
          id: automationId,
          status: 'disabled',
        });
        const cancelled = dataOf(
          await resend.automations.runs.list({ automationId, status: 'cancelled' }),
        ).data;
        assert.equal(cancelled.length, 1);
        clock.advance(3 * DAY);
        api.services.notifiers.automationRuns.notify();
        assert.equal(await queue.nextDueAt(clock.now()), undefined);
        assert.deepEqual(await subjectsTo('cy@sdk.test'), ['Welcome, friend!']);

        const copy = dataOf(await resend.automations.duplicate(automationId));
        assert.equal(copy.object, 'automation');
        assert.deepEqual(dataOf(await resend.automations.update(copy.id, { name: 'Copy' })), {
          object: 'automation',
          id: copy.id,
        });
        assert.deepEqual(dataOf(await resend.automations.remove(copy.id)), {
          object: 'automation',
          id: copy.id,
          deleted: true,
        });
        assertResendError(
          await resend.automations.create({
            name: 'Broken',
            steps: [{ key: 'start', type: 'delay', config: { duration: '1 day' } }],
            connections: [],
          }),
          422,
          'validation_error',
          'An automation has exactly one trigger step; this one has 0.',
        );
      });
    },
  );
}
