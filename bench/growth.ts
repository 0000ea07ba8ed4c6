// Flat as data grows: p50 and p99 of the dashboard's reads and of a send with 1,000 emails in the project,
// then with 1,000,000 (and their recipients, events, deliveries and attempts) and 100 other projects beside
// it, against one server process; and the database's bytes per email. The aim: p99 at the large
// size within 2× of the small.
//
//   npm run bench:growth                               # SQLite, 1,000 then 1,000,000 emails
//   npm run bench:growth -- --postgres                 # PostgreSQL (DATABASE_URL, or the local test database)
//   npm run bench:growth -- --emails 200000 --small 1000 --projects 100 --project-emails 1000
//
// The data is made in bulk by the database (bench/seed.ts), in one transaction per size. The server runs in
// a child process (bench/growth-server.ts) and autocannon in this one, each pinned to a CPU of its own when
// taskset and two CPUs allow, at modest concurrency so latency, not the machine's throughput, is measured.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import type { GrowthChildMessage, GrowthParentMessage } from './growth-server.ts';
import { canPin } from './shared.ts';

const RATIO_AIM = 2;
const SERVER_CPU = '0';
const CLIENT_CPU = '1';

const { values: args } = parseArgs({
  options: {
    postgres: { type: 'boolean', default: false },
    emails: { type: 'string', default: '1000000' },
    small: { type: 'string', default: '1000' },
    projects: { type: 'string', default: '100' },
    'project-emails': { type: 'string', default: '1000' },
    connections: { type: 'string', default: '8' },
    duration: { type: 'string', default: '4' },
    warmup: { type: 'string', default: '1' },
    'no-pin': { type: 'boolean', default: false },
  },
});
const EMAILS = Number(args.emails);
const SMALL = Number(args.small);
const here = path.dirname(fileURLToPath(import.meta.url));
const databaseUrl = args.postgres
  ? (process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test')
  : undefined;

const pin = canPin(Boolean(args['no-pin']));
if (pin) execFileSync('taskset', ['-a', '-p', '-c', CLIENT_CPU, String(process.pid)], { stdio: 'ignore' });

const serverArgs = [
  path.join(here, 'growth-server.ts'),
  ...[EMAILS, SMALL, args.projects, args['project-emails']].map(String),
];
const env = { ...process.env };
if (databaseUrl) env.DATABASE_URL = databaseUrl;
else delete env.DATABASE_URL;
const options = { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] as ('ignore' | 'inherit' | 'ipc')[], env };
const child: ChildProcess = pin
  ? spawn('taskset', ['-c', SERVER_CPU, process.execPath, ...serverArgs], options)
  : spawn(process.execPath, serverArgs, options);

function next<T extends GrowthChildMessage['type']>(
  type: T,
): Promise<Extract<GrowthChildMessage, { type: T }>> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: GrowthChildMessage) => {
      if (message.type !== type) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(message as Extract<GrowthChildMessage, { type: T }>);
    };
    const onExit = (code: number | null) => reject(new Error(`growth server exited (${code})`));
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}
const tell = (message: GrowthParentMessage) => child.send(message);

const engine = databaseUrl ? 'PostgreSQL' : 'SQLite';
process.stdout.write(`Seeding ${SMALL} emails (${engine})…\n`);
const ready = await next('ready');
process.stdout.write(`  ${ready.emails} emails in ${ready.seconds.toFixed(1)} s\n`);
const base = `http://127.0.0.1:${ready.port}`;
const auth = { authorization: `Bearer ${ready.key}` };

interface ListPage {
  data: Array<{ id: string; status?: string }>;
  has_more: boolean;
}

/** GET `url` and check it answers 200 with a page of seeded rows: what is measured must be real reads. */
async function page(url: string): Promise<ListPage> {
  const response = await fetch(`${base}${url}`, { headers: auth });
  const body = (await response.json()) as ListPage;
  if (response.status !== 200 || !Array.isArray(body.data) || body.data.length === 0) {
    throw new Error(`${url} answered ${response.status}: ${JSON.stringify(body).slice(0, 300)}`);
  }
  return body;
}

interface Route {
  name: string;
  method: 'GET' | 'POST';
  /** Made just before it is measured: cursors come from the data at that size. */
  url: () => Promise<string>;
  expect: number;
  body?: string;
}

/** The first page of `url`, checked (see page()). */
const checked = (url: string) => async () => (await page(url), url);

/** The cursor of the second page: the last id of the first, which must say there is more. */
async function secondPage(url: string): Promise<string> {
  const first = await page(url);
  if (!first.has_more) throw new Error(`${url}: no second page`);
  return `${url}${url.includes('?') ? '&' : '?'}after=${first.data.at(-1)!.id}`;
}

const deliveries = `/v1/webhooks/${ready.webhookId}/deliveries`;

/** The emails of one status, 10 a page; checked to hold only that status. */
const byStatus = (status: string) => async () => {
  const url = `/v1/emails?status=${status}&limit=10`;
  if ((await page(url)).data.some((email) => email.status !== status))
    throw new Error(`${url}: other statuses`);
  return url;
};

// The dashboard's pages (100 rows), and its filters at 10 rows a page: a filter on a rare value (1 email in 50
// bounced, 1 in 1,000 complained of, 1 delivery in 100 failed) is where a missing index shows, as rows read
// for each row returned.
const routes: Route[] = [
  { name: 'GET /v1/emails', method: 'GET', url: checked('/v1/emails'), expect: 200 },
  { name: 'GET /v1/emails, page 2', method: 'GET', url: () => secondPage('/v1/emails'), expect: 200 },
  { name: 'GET /v1/emails?status=bounced&limit=10', method: 'GET', url: byStatus('bounced'), expect: 200 },
  {
    name: '… page 2',
    method: 'GET',
    url: async () => secondPage(await byStatus('bounced')()),
    expect: 200,
  },
  {
    name: 'GET /v1/emails?status=complained&limit=10',
    method: 'GET',
    url: byStatus('complained'),
    expect: 200,
  },
  { name: 'GET /v1/events', method: 'GET', url: checked('/v1/events'), expect: 200 },
  {
    name: 'GET /v1/events?type=email.bounced&limit=10',
    method: 'GET',
    url: checked('/v1/events?type=email.bounced&limit=10'),
    expect: 200,
  },
  {
    name: 'GET /v1/webhooks/{id}/deliveries',
    method: 'GET',
    url: checked(deliveries),
    expect: 200,
  },
  {
    name: '… ?status=failed&limit=10, page 2',
    method: 'GET',
    url: () => secondPage(`${deliveries}?status=failed&limit=10`),
    expect: 200,
  },
  // Last: what it sends stays, on top of the seeded history.
  {
    name: 'POST /v1/emails',
    method: 'POST',
    url: async () => '/v1/emails',
    expect: 202,
    body: JSON.stringify({
      from: 'Bench <bench@example.com>',
      to: 'someone@example.org',
      subject: 'Your receipt',
      html: '<p>Hello,</p><p>Thanks for your order.</p>',
      text: 'Hello, thanks for your order.',
    }),
  },
];

interface Latency {
  p50: number;
  p99: number;
  rps: number;
}

async function measure(route: Route): Promise<Latency> {
  const target = {
    url: `${base}${await route.url()}`,
    method: route.method,
    headers: { ...auth, ...(route.body ? { 'content-type': 'application/json' } : {}) },
    connections: Number(args.connections),
    ...(route.body ? { body: route.body } : {}),
  };
  await autocannon({ ...target, duration: Number(args.warmup) });
  const result = await autocannon({ ...target, duration: Number(args.duration) });
  const answered = Number(result.statusCodeStats[route.expect]?.count ?? 0);
  if (answered !== result.requests.total || result.errors > 0) {
    throw new Error(`${route.name}: ${result.requests.total - answered} answers were not ${route.expect}`);
  }
  return { p50: result.latency.p50, p99: result.latency.p99, rps: result.requests.total / result.duration };
}

async function measureAll(): Promise<Latency[]> {
  const results: Latency[] = [];
  for (const route of routes) {
    results.push(await measure(route));
    process.stdout.write(`  ${route.name}: p99 ${results.at(-1)!.p99} ms\n`);
  }
  return results;
}

// A first pass over the reads, unrecorded, so the small size is not measured on code still being compiled.
// Not the send: what it sends would stay on top of the small data set.
for (const route of routes) if (route.method === 'GET') await measure(route);
process.stdout.write(`Measuring at ${ready.emails} emails…\n`);
const small = await measureAll();

process.stdout.write(
  `Seeding up to ${EMAILS} emails in the project, and ${args.projects} other projects of ${args['project-emails']}…\n`,
);
tell({ type: 'grow' });
const grown = await next('grown');
process.stdout.write(`  ${grown.emails} emails in ${grown.seconds.toFixed(0)} s\n`);
process.stdout.write(`Measuring at ${grown.emails} emails…\n`);
const large = await measureAll();

const ms = (value: number) => `${value} ms`;
process.stdout.write(
  [
    '',
    `${engine}: ${SMALL.toLocaleString('en')} emails, then ${EMAILS.toLocaleString('en')} in the project and ${grown.emails.toLocaleString('en')} in all (${args.connections} connections, ${args.duration} s per route)`,
    '',
    `| route | p50 small | p50 large | p99 small | p99 large | ratio p99 (aim ≤ ${RATIO_AIM}) |`,
    '| --- | --- | --- | --- | --- | --- |',
    ...routes.map((route, index) => {
      const [s, l] = [small[index]!, large[index]!];
      return `| ${route.name} | ${ms(s.p50)} | ${ms(l.p50)} | ${ms(s.p99)} | ${ms(l.p99)} | ${(l.p99 / s.p99).toFixed(2)} |`;
    }),
    '',
    `Database: ${(grown.bytes / 1e6).toFixed(0)} MB for ${grown.emails.toLocaleString('en')} emails, ${Math.round(grown.bytes / grown.emails).toLocaleString('en')} bytes per email (with its recipient, 2 events, 2 deliveries, 2 attempts and every index); seeded in ${grown.seconds.toFixed(0)} s.`,
    '',
  ].join('\n'),
);

await new Promise<void>((resolve) => {
  child.once('exit', () => resolve());
  tell({ type: 'stop' });
});
