// N contacts (100,000 by default) entering one automation at once: imported into a segment whose additions
// trigger it (`on: contact.added_to_segment`), in the real app with the contact-import and automation-runs
// workers in this process, on a fresh SQLite file or on PostgreSQL with --database-url. Reported:
//
// - enqueue: the import job's time with the runs written in its batches' transactions (one run per contact),
//   and the same import into a segment nothing triggers on (the runs' share is the difference);
// - runs/s to the first step: the runs worker started once the import is done, until every run has taken its
//   trigger and reached its wait (`waiting`, for an event that never comes: nothing is sent);
// - peak RSS of this process (the app and both workers; the CSV, N short lines, is held here too).
//
//   node bench/automations.ts                          # 100,000 contacts, SQLite
//   node bench/automations.ts --contacts 20000 --database-url postgres://postgres@127.0.0.1:5432/test

import { parseArgs } from 'node:util';
import { createRunWorker } from '../src/modules/automations/runs.worker.ts';
import { createContactImportWorker } from '../src/modules/contacts/contact-imports.worker.ts';
import { startBenchApp } from './app.ts';

const { values } = parseArgs({
  options: { contacts: { type: 'string', default: '100000' }, 'database-url': { type: 'string' } },
});
const CONTACTS = Number(values.contacts);
const MB = 1024 * 1024;
const peakMb = () => Math.round((process.resourceUsage().maxRSS * 1024) / MB);
const rssMb = () => Math.round(process.memoryUsage().rss / MB);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const bench = await startBenchApp({ databaseUrl: values['database-url'], schemaPrefix: 'bench_automations' });
const { services, database } = bench;
const headers = { authorization: `Bearer ${bench.key}` };
async function call(method: string, route: string, body?: unknown): Promise<any> {
  const response = await fetch(`${bench.baseUrl}${route}`, {
    method,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const answer = await response.json();
  if (response.status >= 300)
    throw new Error(`${method} ${route}: ${response.status} ${JSON.stringify(answer)}`);
  return answer;
}

const imports = createContactImportWorker({
  database,
  clock: services.clock,
  job: services.importJob,
  notifier: services.notifiers.contactImports,
});
await imports.start();

/** Imports `from`…`from + CONTACTS` into the segment; answers the job's time in seconds. */
async function importInto(segmentId: string, from: number): Promise<number> {
  const lines = ['Email,First'];
  for (let row = from; row < from + CONTACTS; row += 1) lines.push(`person${row}@example.org,P${row}`);
  const form = new FormData();
  form.append('file', new Blob([lines.join('\r\n')], { type: 'text/csv' }), 'contacts.csv');
  form.append('column_map', JSON.stringify({ email: 'Email', first_name: 'First' }));
  form.append('segments', JSON.stringify([segmentId]));
  const started = performance.now();
  const response = await fetch(`${bench.baseUrl}/v1/contacts/imports`, {
    method: 'POST',
    headers,
    body: form,
  });
  const accepted = (await response.json()) as { id: string };
  if (response.status !== 202) throw new Error(`the import was refused: ${JSON.stringify(accepted)}`);
  for (;;) {
    await sleep(200);
    const job = await call('GET', `/v1/contacts/imports/${accepted.id}`);
    if (job.status === 'failed') throw new Error(`the import failed: ${JSON.stringify(job)}`);
    if (job.status === 'completed') return (performance.now() - started) / 1000;
  }
}

try {
  const template = await call('POST', '/v1/templates', { name: 'Welcome', subject: 'Hi', html: '<p>Hi</p>' });
  await call('POST', `/v1/templates/${template.id}/publish`, {});
  const plain = await call('POST', '/v1/segments', { name: 'Nothing triggers on it' });
  const entering = await call('POST', '/v1/segments', { name: 'Entering' });
  const automation = await call('POST', '/v1/automations', {
    name: 'Welcome series',
    status: 'enabled',
    steps: [
      { key: 'start', type: 'trigger', config: { on: 'contact.added_to_segment', segment_id: entering.id } },
      { key: 'hold', type: 'wait_for_event', config: { event_name: 'bench.never' } },
      { key: 'mail', type: 'send_email', config: { template: { id: template.id }, from: 'hi@example.com' } },
    ],
    connections: [
      { from: 'start', to: 'hold' },
      { from: 'hold', to: 'mail', type: 'event_received' },
    ],
  });

  const baseline = await importInto(plain.id, 0);
  const withRuns = await importInto(entering.id, CONTACTS);
  const afterImports = { rss: rssMb(), peak: peakMb() };
  const queued = await call('GET', `/v1/automations/${automation.id}`);
  if (queued.runs.running !== CONTACTS) throw new Error(`runs queued: ${JSON.stringify(queued.runs)}`);

  const runs = createRunWorker({
    database,
    clock: services.clock,
    runner: services.automationRunner,
    notifier: services.notifiers.automationRuns,
  });
  const started = performance.now();
  await runs.start();
  let counts: Record<string, number>;
  for (;;) {
    // Once a second: the count reads every run, in this process, beside the worker it measures.
    await sleep(1000);
    counts = (await call('GET', `/v1/automations/${automation.id}`)).runs;
    if (counts.waiting === CONTACTS) break;
  }
  const took = (performance.now() - started) / 1000;
  await runs.stop();
  console.log(
    `${values['database-url'] ? 'postgres' : 'sqlite'}: ${CONTACTS.toLocaleString('en')} contacts entering one automation\n` +
      `  enqueue: import into the trigger's segment ${withRuns.toFixed(1)} s ` +
      `(${Math.round(CONTACTS / withRuns).toLocaleString('en')} contacts/s, runs included); into a segment ` +
      `nothing triggers on ${baseline.toFixed(1)} s: the runs add ${(withRuns - baseline).toFixed(1)} s\n` +
      `  first step: ${took.toFixed(1)} s for all to reach their wait (${Math.round(CONTACTS / took).toLocaleString('en')} runs/s) ${JSON.stringify(counts)}\n` +
      `  RSS after the imports ${afterImports.rss} MB (peak ${afterImports.peak} MB); peak at the end ${peakMb()} MB`,
  );
} finally {
  await imports.stop();
  await bench.close();
  await bench.remove();
}
