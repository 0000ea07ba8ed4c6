// What the automation suites share: the runs worker started beside a test app on its clock, a published
// template, and what a test SMTP server received, by subject.
import assert from 'node:assert/strict';
import { simpleParser } from 'mailparser';
import type { Clock } from '../../src/lib/clock.ts';
import { createRunner, type Runner } from '../../src/modules/automations/runner.ts';
import { createRunWorker } from '../../src/modules/automations/runs.worker.ts';
import { createStepPlanner } from '../../src/modules/automations/steps.ts';
import type { QueueWorker } from '../../src/queue/runtime.ts';
import { created } from './answers.ts';
import type { TestApp } from './app.ts';
import type { Engine } from '../../src/db/connection.ts';
import { startTestApp } from './app.ts';
import { startSendingWorker } from './sending.ts';
import { startSmtpServer, type TestSmtpServer } from './smtp.ts';
import type { SendingWorker } from '../../src/modules/sending/sending.worker.ts';

/** The automation runs worker on `api`'s database, runner and notifier, started; the caller stops it. */
export async function startRunWorker(api: TestApp, clock: Clock): Promise<QueueWorker> {
  const worker = createRunWorker({
    database: api.database.handle,
    clock,
    runner: api.services.automationRunner,
    notifier: api.services.notifiers.automationRuns,
    settings: { pollIntervalMs: 50 },
  });
  await worker.start();
  return worker;
}

/** Creates and publishes a template; answers its id. */
export async function publishedTemplate(api: TestApp, body: Record<string, unknown>): Promise<string> {
  const template = await created(api, '/v1/templates', body);
  const publish = await api.request('POST', `/v1/templates/${template.id}/publish`, { body: {} });
  assert.equal(publish.status, 200, JSON.stringify(publish.body));
  return template.id as string;
}

/** The subjects of the messages `address` received, in the order they arrived. */
export async function subjectsTo(smtp: TestSmtpServer, address: string): Promise<string[]> {
  const subjects: string[] = [];
  for (const message of smtp.messages.filter((each) => each.to.includes(address))) {
    subjects.push((await simpleParser(message.raw)).subject ?? '');
  }
  return subjects;
}

/** Waits (on the SMTP server's own signal) until it has received `count` messages in all. */
export async function arrived(smtp: TestSmtpServer, count: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (smtp.messages.length < count) {
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`the SMTP server received ${smtp.messages.length} of ${count}`);
    await smtp.waitFor(count, left).catch(() => undefined);
  }
}

/**
 * A runner on `api`'s parts, as the process's, whose process "dies" where `dies` says: inside an email step's
 * transaction once the email is written (`inEmail`, given how many were written before: nothing of it commits),
 * or before it takes the step `beforeStep` names. What a worker killed mid-run leaves behind.
 */
export function dyingRunner(
  api: TestApp,
  clock: Clock,
  dies: { inEmail?: (written: number) => boolean; beforeStep?: (key: string) => boolean },
): Runner {
  const services = api.services;
  let written = 0;
  const planner = createStepPlanner({
    contacts: services.contacts,
    segments: services.segments,
    topics: services.repositories.topics,
    suppressions: services.repositories.suppressions,
    engagement: services.repositories.tracking,
    emails: {
      prepareSend: services.emails.prepareSend,
      writeSend: async (transaction, plan) => {
        await services.emails.writeSend(transaction, plan);
        if (dies.inEmail?.(written++)) throw new Error('the process died');
      },
    },
  });
  return createRunner({
    db: api.database.handle.db,
    runs: services.repositories.automationRuns,
    automations: services.repositories.automations,
    contacts: services.repositories.contacts,
    properties: services.repositories.contactProperties,
    planner: {
      plan: async (context, step) => {
        if (dies.beforeStep?.(step.key)) throw new Error('the process died again');
        return planner.plan(context, step);
      },
    },
    clock,
  });
}

/** A test app on `clock` with an SMTP receiver, its sending worker and its runs worker started. */
export async function startAutomationSuite(engine: Engine, clock: Clock) {
  const api = await startTestApp(engine, { clock });
  const smtp = await startSmtpServer();
  const sending: SendingWorker = await startSendingWorker(api, { relayPort: smtp.port, clock });
  const runs = await startRunWorker(api, clock);
  return {
    api,
    smtp,
    runs,
    subjectsTo: (address: string) => subjectsTo(smtp, address),
    arrived: (count: number) => arrived(smtp, count),
    async close() {
      await runs.stop();
      await sending.stop();
      await smtp.close();
      await api.close();
    },
  };
}

/** What a `send_email` step of an automation's body says: its template (id, variables) and From. */
type SendEmailConfig = Record<string, unknown>;

/**
 * The welcome series of issue 40, as `POST /v1/automations` takes it, enabled: `user.signed_up` → `welcome`
 * → two days → `is_pro` (the contact's `plan` property is `pro`) → `pro_tips`, or else `upgrade`. Each email
 * step sends as `emails` says.
 */
export const welcomeSeries = (emails: {
  welcome: SendEmailConfig;
  proTips: SendEmailConfig;
  upgrade: SendEmailConfig;
}) => ({
  name: 'Welcome series',
  status: 'enabled',
  steps: [
    { key: 'start', type: 'trigger', config: { event_name: 'user.signed_up' } },
    { key: 'welcome', type: 'send_email', config: emails.welcome },
    { key: 'wait', type: 'delay', config: { duration: '2 days' } },
    {
      key: 'is_pro',
      type: 'condition',
      config: { type: 'rule', field: 'contact.properties.plan', operator: 'eq', value: 'pro' },
    },
    { key: 'pro_tips', type: 'send_email', config: emails.proTips },
    { key: 'upgrade', type: 'send_email', config: emails.upgrade },
  ],
  connections: [
    { from: 'start', to: 'welcome' },
    { from: 'welcome', to: 'wait' },
    { from: 'wait', to: 'is_pro' },
    { from: 'is_pro', to: 'pro_tips', type: 'condition_met' },
    { from: 'is_pro', to: 'upgrade', type: 'condition_not_met' },
  ],
});
