// Flat as data grows: p50 and p99 of the dashboard's reads and of a send with 1,000 emails in the project,
// and with 1,000,000 (with their recipients, events, deliveries and attempts) and 100 other projects beside
// it; and the database's bytes per email. The issue's aim: p99 at the large size within 2× of the small.
//
//   npm run bench:growth                               # SQLite
//   npm run bench:growth -- --postgres                 # PostgreSQL (DATABASE_URL, or the local test database)
//   npm run bench:growth -- --emails 200000 --small 1000 --projects 100 --project-emails 1000 --rounds 3
//
// Each size has a server of its own, set up the same way (bench/growth-server.ts, the real app in a child
// process, its data made in bulk by the database: bench/seed.ts), pinned to one CPU and autocannon in this
// process to the other when taskset and two CPUs allow. Each route is measured on the small server, then at
// once on the large one, so a change in the machine's other work touches both sides of a ratio alike; with
// --rounds, the medians. Modest concurrency: latency, not the machine's throughput, is what is measured.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import type { GrowthChildMessage, GrowthParentMessage } from './growth-server.ts';
import { canPin, median } from './shared.ts';

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
    rounds: { type: 'string', default: '1' },
    'no-pin': { type: 'boolean', default: false },
  },
});
const here = path.dirname(fileURLToPath(import.meta.url));
const databaseUrl = args.postgres
  ? (process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test')
  : undefined;
const engine = databaseUrl ? 'PostgreSQL' : 'SQLite';

const pin = canPin(Boolean(args['no-pin']));
if (pin) execFileSync('taskset', ['-a', '-p', '-c', CLIENT_CPU, String(process.pid)], { stdio: 'ignore' });

interface Server {
  ready: GrowthChildMessage;
  base: string;
  auth: Record<string, string>;
  stop(): Promise<void>;
}

/** A growth server with `emails` in its project and `projects` others of `perProject`, once seeded. */
async function startServer(emails: number, projects: number, perProject: number): Promise<Server> {
  const serverArgs = [path.join(here, 'growth-server.ts'), ...[emails, projects, perProject].map(String)];
  const env = { ...process.env };
  if (databaseUrl) env.DATABASE_URL = databaseUrl;
  else delete env.DATABASE_URL;
  const options = { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] as ('ignore' | 'inherit' | 'ipc')[], env };
  const child: ChildProcess = pin
    ? spawn('taskset', ['-c', SERVER_CPU, process.execPath, ...serverArgs], options)
    : spawn(process.execPath, serverArgs, options);
  const ready = await new Promise<GrowthChildMessage>((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`growth server exited (${code})`)));
  });
  return {
    ready,
    base: `http://127.0.0.1:${ready.port}`,
    auth: { authorization: `Bearer ${ready.key}` },
    stop: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.send({ type: 'stop' } satisfies GrowthParentMessage);
      }),
  };
}

interface ListPage {
  data: Array<{ id: string; status?: string }>;
  has_more: boolean;
}

/** GET `url` and check it answers 200 with a page of seeded rows: what is measured must be real reads. */
async function page(server: Server, url: string): Promise<ListPage> {
  const response = await fetch(`${server.base}${url}`, { headers: server.auth });
  const body = (await response.json()) as ListPage;
  if (response.status !== 200 || !Array.isArray(body.data) || body.data.length === 0) {
    throw new Error(`${url} answered ${response.status}: ${JSON.stringify(body).slice(0, 300)}`);
  }
  return body;
}

interface Route {
  name: string;
  method: 'GET' | 'POST';
  /** The path on this server, made just before it is measured: cursors come from its data. */
  url: (server: Server) => Promise<string>;
  expect: number;
  body?: string;
}

/** `url`, its first page checked (see page()). */
const checked = (url: (server: Server) => string) => async (server: Server) => {
  await page(server, url(server));
  return url(server);
};

/** The second page of `url`: after the last id of the first, which must say there is more. */
const secondPage = (url: (server: Server) => Promise<string>) => async (server: Server) => {
  const path = await url(server);
  const first = await page(server, path);
  if (!first.has_more) throw new Error(`${path}: no second page`);
  return `${path}${path.includes('?') ? '&' : '?'}after=${first.data.at(-1)!.id}`;
};

/** The emails of one status, 10 a page; checked to hold only that status. */
const byStatus = (status: string) => async (server: Server) => {
  const url = `/v1/emails?status=${status}&limit=10`;
  if ((await page(server, url)).data.some((email) => email.status !== status)) {
    throw new Error(`${url}: other statuses`);
  }
  return url;
};
const deliveries = (server: Server) => `/v1/webhooks/${server.ready.webhookId}/deliveries`;

// The dashboard's pages (100 rows), and its filters at 10 rows a page: a filter on a rare value (1 email in 50
// bounced, 1 in 1,000 complained of, 1 delivery in 100 failed) is where a missing index shows, as rows read
// for each row returned.
const routes: Route[] = [
  { name: 'GET /v1/emails', method: 'GET', url: checked(() => '/v1/emails'), expect: 200 },
  {
    name: 'GET /v1/emails, page 2',
    method: 'GET',
    url: secondPage(async () => '/v1/emails'),
    expect: 200,
  },
  { name: 'GET /v1/emails?status=bounced&limit=10', method: 'GET', url: byStatus('bounced'), expect: 200 },
  { name: '… page 2', method: 'GET', url: secondPage(byStatus('bounced')), expect: 200 },
  {
    name: 'GET /v1/emails?status=complained&limit=10',
    method: 'GET',
    url: byStatus('complained'),
    expect: 200,
  },
  { name: 'GET /v1/events', method: 'GET', url: checked(() => '/v1/events'), expect: 200 },
  {
    name: 'GET /v1/events?type=email.bounced&limit=10',
    method: 'GET',
    url: checked(() => '/v1/events?type=email.bounced&limit=10'),
    expect: 200,
  },
  { name: 'GET /v1/webhooks/{id}/deliveries', method: 'GET', url: checked(deliveries), expect: 200 },
  {
    name: '… ?status=failed&limit=10, page 2',
    method: 'GET',
    url: secondPage(async (server) => `${deliveries(server)}?status=failed&limit=10`),
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
}

async function measure(server: Server, route: Route, duration = Number(args.duration)): Promise<Latency> {
  const target = {
    url: `${server.base}${await route.url(server)}`,
    method: route.method,
    headers: { ...server.auth, ...(route.body ? { 'content-type': 'application/json' } : {}) },
    connections: Number(args.connections),
    ...(route.body ? { body: route.body } : {}),
  };
  await autocannon({ ...target, duration: Number(args.warmup) });
  const result = await autocannon({ ...target, duration });
  const answered = Number(result.statusCodeStats[route.expect]?.count ?? 0);
  if (answered !== result.requests.total || result.errors > 0) {
    throw new Error(`${route.name}: ${result.requests.total - answered} answers were not ${route.expect}`);
  }
  return { p50: result.latency.p50, p99: result.latency.p99 };
}

process.stdout.write(
  `Seeding ${args.small} emails, and ${args.emails} emails with ${args.projects} other projects of ${args['project-emails']} (${engine})…\n`,
);
const [small, large] = await Promise.all([
  startServer(Number(args.small), 0, 0),
  startServer(Number(args.emails), Number(args.projects), Number(args['project-emails'])),
]);
for (const [name, server] of [
  ['small', small],
  ['large', large],
] as const) {
  process.stdout.write(
    `  ${name}: ${server.ready.emails} emails, seeded in ${server.ready.seedSeconds.toFixed(0)} s\n`,
  );
}

// A first pass over the reads, unrecorded, so neither side is measured on code still being compiled.
// Not the send: what it sends would stay on top of the seeded data.
for (const route of routes) {
  if (route.method === 'GET') for (const server of [small, large]) await measure(server, route, 1);
}

const rows: string[] = [];
for (const route of routes) {
  const measured: Record<'small' | 'large', Latency[]> = { small: [], large: [] };
  for (let round = 0; round < Number(args.rounds); round++) {
    measured.small.push(await measure(small, route));
    measured.large.push(await measure(large, route));
  }
  const [s, l] = (['small', 'large'] as const).map((side) => ({
    p50: median(measured[side].map((latency) => latency.p50)),
    p99: median(measured[side].map((latency) => latency.p99)),
  })) as [Latency, Latency];
  const row = `| ${route.name} | ${s.p50} ms | ${l.p50} ms | ${s.p99} ms | ${l.p99} ms | ${(l.p99 / s.p99).toFixed(2)} |`;
  process.stdout.write(`  ${row}\n`);
  rows.push(row);
}

const { bytes, emails } = large.ready;
process.stdout.write(
  [
    '',
    `${engine}: ${small.ready.emails.toLocaleString('en')} emails against ${Number(args.emails).toLocaleString('en')} in the project and ${emails.toLocaleString('en')} in all (${args.connections} connections, ${args.duration} s per route${Number(args.rounds) > 1 ? `, medians of ${args.rounds} rounds` : ''})`,
    '',
    `| route | p50 small | p50 large | p99 small | p99 large | ratio p99 (aim ≤ ${RATIO_AIM}) |`,
    '| --- | --- | --- | --- | --- | --- |',
    ...rows,
    '',
    `Database: ${(bytes / 1e6).toFixed(0)} MB for ${emails.toLocaleString('en')} emails, ${Math.round(bytes / emails).toLocaleString('en')} bytes per email (with its recipient, 2 events, 2 deliveries, 2 attempts and every index); seeded in ${large.ready.seedSeconds.toFixed(0)} s.`,
    '',
  ].join('\n'),
);

await Promise.all([small.stop(), large.stop()]);
