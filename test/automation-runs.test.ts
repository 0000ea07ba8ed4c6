import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { simpleParser } from 'mailparser';
import { createRunQueue } from '../src/modules/automations/runs.queue.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { testClock } from './helpers/deliveries.ts';
import { created } from './helpers/answers.ts';
import {
  arrived as arrivedAt,
  dyingRunner,
  publishedTemplate,
  startRunWorker,
  subjectsTo as subjectsToIn,
  welcomeSeries,
} from './helpers/automations.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';

// Automation runs on the injected clock: `user.signed_up` → welcome → two days → a condition on the contact's
// plan → one of two emails. The right emails arrive at a real SMTP server, in order, once each, also when the
// worker that held a run died mid-step; unsubscribed and suppressed contacts are never mailed; a stopped
// automation sends nothing more; each run's steps say when, what and why.

const DAY = 86_400_000;

for (const engine of ALL_ENGINES) {
  describe(`automation runs (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let smtp: TestSmtpServer;
    let sending: SendingWorker;
    let runs: QueueWorker;
    let automationId: string;
    const clock = testClock();

    const startRuns = async () => {
      runs = await startRunWorker(api, clock);
    };
    const published = (name: string, subject: string, html: string, text: string) =>
      publishedTemplate(api, { name, subject, html, text });

    before(async () => {
      api = await startTestApp(engine, { clock });
      smtp = await startSmtpServer();
      sending = await startSendingWorker(api, { relayPort: smtp.port, clock });
      await startRuns();
      await created(api, '/v1/contact-properties', { key: 'plan', type: 'string', fallback_value: 'free' });
      const welcome = await published(
        'Welcome',
        'Welcome, {{ contact.first_name | default: "friend" }}!',
        '<h1>Bienvenue, {{ contact.first_name }} 👋</h1>\n<p>Line one.</p>\n<p>Ligne deux — ça marche.</p>',
        'Bienvenue, {{ contact.first_name }} 👋\nLine one.\nLigne deux — ça marche.\n',
      );
      const pro = await published(
        'Pro tips',
        'Pro tips for {{ team }}',
        '<p>Your {{ contact.properties.plan }} plan: three tips.</p>\n<ol><li>Één</li><li>Two</li><li>Three</li></ol>',
        'Your {{ contact.properties.plan }} plan: three tips.\n1. Één\n2. Two\n3. Three\n',
      );
      const upgrade = await published(
        'Upgrade',
        'Upgrade to Pro',
        '<p>Still on {{ contact.properties.plan }}? Upgrade — 20 % off.</p>',
        'Still on {{ contact.properties.plan }}? Upgrade — 20 % off.\n',
      );
      const automation = await created(
        api,
        '/v1/automations',
        welcomeSeries({
          welcome: { template: { id: welcome }, from: 'Acme <hello@acme.test>' },
          proTips: {
            template: { id: pro, variables: { team: { var: 'event.team' } } },
            from: 'Acme <hello@acme.test>',
          },
          upgrade: { template: { id: upgrade }, from: 'hello@acme.test' },
        }),
      );
      automationId = automation.id;
    });
    after(async () => {
      await runs.stop();
      await sending.stop();
      await smtp.close();
      await api.close();
    });

    const subjectsTo = (address: string) => subjectsToIn(smtp, address);
    const arrived = (count: number) => arrivedAt(smtp, count);
    /** The run of a contact, once it is in `status` (the worker moves it: waits on each notification). */
    async function runOf(contactId: string, status: string, step?: string) {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const list = await api.request('GET', `/v1/automations/${automationId}/runs`);
        const run = list.body.data.find((each: any) => each.contact_id === contactId);
        if (run && run.status === status && (step === undefined || run.current_step === step)) {
          return (await api.request('GET', `/v1/automations/${automationId}/runs/${run.id}`)).body;
        }
        if (Date.now() > deadline) throw new Error(`run of ${contactId}: ${JSON.stringify(run)}`);
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    const signUp = async (email: string, payload: Record<string, unknown> = {}) => {
      const response = await api.request('POST', '/v1/custom-events/send', {
        body: { event: 'user.signed_up', email, payload },
      });
      assert.equal(response.status, 201, JSON.stringify(response.body));
      return response.body;
    };

    test('welcome, two days, then the email the plan chooses: in order, once each', async () => {
      const ada = await created(api, '/v1/contacts', {
        email: 'ada@runs.test',
        first_name: 'Ada',
        properties: { plan: 'pro' },
      });
      const bob = await created(api, '/v1/contacts', { email: 'bob@runs.test', first_name: 'Bob' });
      const carol = await created(api, '/v1/contacts', {
        email: 'carol@runs.test',
        first_name: 'Carol',
        unsubscribed: true,
      });
      await created(api, '/v1/contacts', { email: 'dan@runs.test', first_name: 'Dan' });
      assert.equal(
        (await api.request('POST', '/v1/suppressions', { body: { addresses: ['dan@runs.test'] } })).status,
        201,
      );

      const sent = await signUp('ada@runs.test', { team: 'Analytical Engines' });
      assert.equal(sent.runs_started, 1);
      await signUp('bob@runs.test');
      await signUp('carol@runs.test');
      const dan = await signUp('dan@runs.test');
      // A second sign-up while the series runs starts no second run.
      assert.equal((await signUp('ada@runs.test')).runs_started, 0);

      await arrived(2);
      const waiting = await runOf(ada.id, 'running', 'is_pro');
      const signedUpAt = Date.parse(waiting.steps[0].created_at);
      assert.ok(Date.parse(waiting.due_at) - signedUpAt >= 2 * DAY);
      assert.deepEqual(await subjectsTo('ada@runs.test'), ['Welcome, Ada!']);
      assert.deepEqual(await subjectsTo('bob@runs.test'), ['Welcome, Bob!']);
      const welcome = await simpleParser(
        smtp.messages.find((each) => each.to.includes('ada@runs.test'))!.raw,
      );
      assert.equal(welcome.text, 'Bienvenue, Ada 👋\nLine one.\nLigne deux — ça marche.\n');
      assert.match(String(welcome.html), /<h1>Bienvenue, Ada 👋<\/h1>/);

      // Unsubscribed: cancelled before its first step after the trigger (recorded with the run, as the event
      // started it). Suppressed: its emails skipped, never sent.
      const cancelled = await runOf(carol.id, 'cancelled');
      assert.equal(cancelled.reason, 'contact_unsubscribed');
      assert.deepEqual(
        cancelled.steps.map((step: any) => [step.key, step.status, step.output.event]),
        [['start', 'completed', 'user.signed_up']],
      );
      const skipped = await runOf(dan.contact_id, 'running', 'is_pro');
      assert.deepEqual(skipped.steps[1].output, { reason: 'suppressed', to: 'dan@runs.test' });
      assert.equal(skipped.steps[1].status, 'skipped');

      // A day later nothing has moved; two days after the sign-up the plan decides.
      clock.advance(DAY);
      api.services.notifiers.automationRuns.notify();
      assert.equal((await runOf(ada.id, 'running', 'is_pro')).steps.length, 3);
      clock.advance(DAY + 1000);
      api.services.notifiers.automationRuns.notify();
      await arrived(4);
      const done = await runOf(ada.id, 'completed');
      const bobDone = await runOf(bob.id, 'completed');
      await runOf(dan.contact_id, 'completed');
      assert.deepEqual(await subjectsTo('ada@runs.test'), [
        'Welcome, Ada!',
        'Pro tips for Analytical Engines',
      ]);
      assert.deepEqual(await subjectsTo('bob@runs.test'), ['Welcome, Bob!', 'Upgrade to Pro']);
      assert.deepEqual(await subjectsTo('dan@runs.test'), []);
      assert.deepEqual(await subjectsTo('carol@runs.test'), []);
      const tips = await simpleParser(
        smtp.messages.filter((each) => each.to.includes('ada@runs.test'))[1]!.raw,
      );
      assert.equal(tips.text, 'Your pro plan: three tips.\n1. Één\n2. Two\n3. Three\n');

      // The timeline: each step, what it did and why the branch was taken.
      assert.deepEqual(
        done.steps.map((step: any) => [step.key, step.status]),
        [
          ['start', 'completed'],
          ['welcome', 'completed'],
          ['wait', 'completed'],
          ['is_pro', 'completed'],
          ['pro_tips', 'completed'],
        ],
      );
      assert.deepEqual(done.steps[3].output, {
        result: true,
        branch: 'condition_met',
        values: { 'contact.properties.plan': 'pro' },
      });
      assert.deepEqual(bobDone.steps[3].output, {
        result: false,
        branch: 'condition_not_met',
        values: { 'contact.properties.plan': 'free' },
      });
      assert.match(done.steps[1].output.email_id, /^msg_/);
      const email = await api.request('GET', `/v1/emails/${done.steps[1].output.email_id}`);
      assert.equal(email.body.subject, 'Welcome, Ada!');
      assert.equal(done.status, 'completed');
      assert.ok(done.completed_at);
      const automation = await api.request('GET', `/v1/automations/${automationId}`);
      assert.deepEqual(automation.body.runs, {
        running: 0,
        waiting: 0,
        completed: 3,
        cancelled: 1,
        failed: 0,
      });
    });

    test('a worker that dies mid-step: the run resumes at the step, no email twice, none missed', async () => {
      await runs.stop();
      const before = smtp.messages.length;
      const eve = await created(api, '/v1/contacts', { email: 'eve@runs.test', first_name: 'Eve' });
      await signUp('eve@runs.test', { team: 'Crashers' });
      const queue = createRunQueue(api.database.handle.db, api.database.handle.engine);
      const now = clock.now();
      const claimed = await queue.claimDue(
        { workerId: 'doomed', now, until: new Date(now.getTime() + 60_000) },
        10,
      );
      assert.equal(claimed.length, 1);

      // A worker whose first email dies inside its transaction, and that then dies after the welcome committed.
      const doomed = dyingRunner(api, clock, {
        inEmail: (written) => written === 0,
        beforeStep: (key) => key === 'wait',
      });
      await assert.rejects(doomed.run(claimed[0]!, 'doomed'), /the process died/);
      let run = await runOf(eve.id, 'running', 'welcome');
      assert.deepEqual(
        run.steps.map((step: any) => step.key),
        ['start'],
      );
      await assert.rejects(doomed.run(claimed[0]!, 'doomed'), /the process died again/);
      run = await runOf(eve.id, 'running', 'wait');
      await arrived(before + 1);

      // Another worker takes the run once the dead one's lease has run out.
      clock.advance(120_000);
      await startRuns();
      run = await runOf(eve.id, 'running', 'is_pro');
      clock.advance(2 * DAY);
      api.services.notifiers.automationRuns.notify();
      await arrived(before + 2);
      run = await runOf(eve.id, 'completed');
      assert.deepEqual(await subjectsTo('eve@runs.test'), ['Welcome, Eve!', 'Upgrade to Pro']);
      assert.deepEqual(
        run.steps.map((step: any) => step.key),
        ['start', 'welcome', 'wait', 'is_pro', 'upgrade'],
      );
    });

    test('a stopped automation sends nothing more: its waiting runs are cancelled', async () => {
      const before = smtp.messages.length;
      const fay = await created(api, '/v1/contacts', { email: 'fay@runs.test', first_name: 'Fay' });
      await signUp('fay@runs.test');
      await arrived(before + 1);
      await runOf(fay.id, 'running', 'is_pro');
      const stopped = await api.request('POST', `/v1/automations/${automationId}/stop`);
      assert.equal(stopped.status, 200);
      const run = await runOf(fay.id, 'cancelled');
      assert.equal(run.reason, 'automation_stopped');
      assert.equal(run.due_at, null);
      clock.advance(3 * DAY);
      api.services.notifiers.automationRuns.notify();
      // Nothing is due any more: the queue says so, and no event starts a run of a disabled automation.
      const queue = createRunQueue(api.database.handle.db, api.database.handle.engine);
      assert.equal(await queue.nextDueAt(clock.now()), undefined);
      assert.equal((await signUp('fay@runs.test')).runs_started, 0);
      assert.deepEqual(await subjectsTo('fay@runs.test'), ['Welcome, Fay!']);
    });
  });
}
