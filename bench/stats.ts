// What GET /v1/stats costs on a large history: the daily counts of many projects over a year, with tags,
// and the same numbers computed the way an aggregate table avoids (a GROUP BY over the events table).
//
//   npm run bench:stats                         # SQLite
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:stats
import { parseArgs } from 'node:util';
import { newId } from '../src/lib/ids.ts';
import { METRICS } from '../src/modules/stats/stats.repo.ts';
import { startBenchApp } from './app.ts';

const { values: args } = parseArgs({
  options: {
    projects: { type: 'string', default: '10' },
    days: { type: 'string', default: '365' },
    tags: { type: 'string', default: '5' },
    events: { type: 'string', default: '200000' },
    queries: { type: 'string', default: '200' },
  },
});
const bench = await startBenchApp({ databaseUrl: process.env.DATABASE_URL });
const db = bench.database.db;
const day = (index: number) => new Date(Date.UTC(2026, 0, 1) + index * 86_400_000).toISOString().slice(0, 10);

// The aggregate: every project, day, tag ('' and N tags) and metric has a count.
const projectIds = [bench.projectId];
for (let index = 1; index < Number(args.projects); index++) {
  const id = newId('proj');
  await db
    .insertInto('projects')
    .values({ id, name: `p${index}`, is_default: false, created_at: day(0) })
    .execute();
  projectIds.push(id);
}
const tags = ['', ...Array.from({ length: Number(args.tags) }, (_, index) => `campaign:c${index}`)];
let rows: Array<{ project_id: string; tag: string; day: string; metric: string; count: number }> = [];
let aggregateRows = 0;
const flush = async () => {
  if (rows.length > 0) await db.insertInto('email_stats_daily').values(rows).execute();
  aggregateRows += rows.length;
  rows = [];
};
for (const projectId of projectIds) {
  for (let index = 0; index < Number(args.days); index++) {
    for (const tag of tags) {
      for (const metric of METRICS) {
        rows.push({ project_id: projectId, tag, day: day(index), metric, count: 1 + ((index * 7) % 100) });
        if (rows.length === 1000) await flush();
      }
    }
  }
}
await flush();

// Events for the comparison: what the aggregate replaces.
const types = ['email.sent', 'email.delivered', 'email.opened', 'email.clicked', 'email.bounced'];
let events: Array<{
  id: string;
  project_id: string;
  type: string;
  data: string;
  created_at: string;
  email_id: null;
}> = [];
for (let index = 0; index < Number(args.events); index++) {
  events.push({
    id: newId('evt'),
    project_id: bench.projectId,
    type: types[index % types.length]!,
    data: '{"tags":{"campaign":"c1"}}',
    created_at: `${day(index % Number(args.days))}T12:00:00.000Z`,
    email_id: null,
  });
  if (events.length === 1000) {
    await db.insertInto('events').values(events).execute();
    events = [];
  }
}

const headers = { authorization: `Bearer ${bench.key}` };
async function time(label: string, run: () => Promise<void>) {
  await run();
  const samples: number[] = [];
  for (let index = 0; index < Number(args.queries); index++) {
    const started = performance.now();
    await run();
    samples.push(performance.now() - started);
  }
  samples.sort((a, b) => a - b);
  const at = (q: number) => samples[Math.min(samples.length - 1, Math.floor(samples.length * q))]!.toFixed(2);
  console.log(`${label.padEnd(58)} p50 ${at(0.5)} ms   p99 ${at(0.99)} ms`);
}
const stats = (query: string) => async () => {
  const response = await bench.app.inject({ method: 'GET', url: `/v1/stats${query}`, headers });
  if (response.statusCode !== 200) throw new Error(`${response.statusCode} ${response.body}`);
};
console.log(
  `${process.env.DATABASE_URL ? 'PostgreSQL' : 'SQLite'}: ${aggregateRows} daily count rows (${projectIds.length} projects × ${args.days} days × ${tags.length} tags × ${METRICS.length} metrics), ${args.events} events`,
);
await time('GET /v1/stats (30 days, all tags)', stats(''));
await time('GET /v1/stats (365 days, all tags)', stats(`?since=${day(0)}&until=${day(364)}`));
await time(
  'GET /v1/stats (365 days, tag=campaign:c1)',
  stats(`?since=${day(0)}&until=${day(364)}&tag=campaign:c1`),
);
await time('the same from the events table: GROUP BY day, type (365 days)', async () => {
  await db
    .selectFrom('events')
    .select((eb) => [
      eb.fn('substr', ['created_at', eb.val(1), eb.val(10)]).as('day'),
      'type',
      eb.fn.countAll().as('n'),
    ])
    .where('project_id', '=', bench.projectId)
    .where('created_at', '>=', day(0))
    .groupBy(['day', 'type'])
    .execute();
});
await bench.close();
await bench.remove();
