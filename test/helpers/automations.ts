// What the automation suites share: the runs worker started beside a test app on its clock, a published
// template, and what a test SMTP server received, by subject.
import assert from 'node:assert/strict';
import { simpleParser } from 'mailparser';
import type { Clock } from '../../src/lib/clock.ts';
import { createRunWorker } from '../../src/modules/automations/runs.worker.ts';
import type { QueueWorker } from '../../src/queue/runtime.ts';
import { created } from './answers.ts';
import type { TestApp } from './app.ts';
import type { TestSmtpServer } from './smtp.ts';

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
