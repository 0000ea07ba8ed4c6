// The server side of bench/api.ts, in a child process of its own so the load generator never takes its CPU.
// `node bench/server.ts real` builds the real app on a fresh SQLite file (or, with DATABASE_URL, a fresh
// PostgreSQL schema); `node bench/server.ts bare` serves the same JSON from plain Fastify routes (no auth, no
// schemas) as the ceiling to compare with, and the accepted send's floor: one durable INSERT per request.
import { DatabaseSync } from 'node:sqlite';
import Fastify, { type FastifyInstance } from 'fastify';
import { startBenchApp } from './app.ts';
import { openInsertFloor } from './insert-floor.ts';
import {
  CREATE_BODY,
  type ChildMessage,
  createWindowProfiler,
  emailMessage,
  type ParentMessage,
  WEBHOOK_COUNT,
} from './shared.ts';

const send = (message: ChildMessage) => process.send!(message);

async function startReal(): Promise<{ app: FastifyInstance; cleanup: () => Promise<void> }> {
  // A daily sending limit, as a default install has one (its count is part of the accepting statement), but
  // one that a measured window, which accepts more emails than the default 10,000, never reaches.
  const bench = await startBenchApp({
    databaseUrl: process.env.DATABASE_URL,
    // BENCH_API_LOG=off (bench/api.ts --no-api-log): the API request log off, to measure what it costs.
    config: {
      sendDailyLimit: 1_000_000_000,
      ...(process.env.BENCH_API_LOG === 'off' ? { apiLogMaxRows: 0 } : {}),
      // BENCH_STAMP_LEASE=<ms> (PostgreSQL): another cache stamp lease, to measure what the stamp reads cost.
      ...(process.env.BENCH_STAMP_LEASE ? { cacheStampLeaseMs: Number(process.env.BENCH_STAMP_LEASE) } : {}),
    },
  });
  const { app, key } = bench;
  const headers = { authorization: `Bearer ${key}` };
  let created = '';
  for (let i = 0; i < WEBHOOK_COUNT; i++) {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/webhooks',
      headers,
      payload: { ...CREATE_BODY, url: `${CREATE_BODY.url}/${i}` },
    });
    if (response.statusCode !== 201) throw new Error(`setup: create answered ${response.statusCode}`);
    created = response.body;
  }
  const list = await app.inject({ method: 'GET', url: '/v1/webhooks', headers });
  if (list.statusCode !== 200) throw new Error(`setup: list answered ${list.statusCode}`);
  const accepted = await app.inject({ method: 'POST', url: '/v1/emails', headers, payload: emailMessage(0) });
  if (accepted.statusCode !== 202) throw new Error(`setup: send answered ${accepted.statusCode}`);
  send({
    type: 'ready',
    port: port(app),
    key,
    list: list.body,
    created,
    accepted: accepted.body,
    database: bench.sqliteFile,
    projectId: bench.projectId,
  });
  return {
    app,
    // The SQLite file stays for the bare server's query (bench/api.ts deletes it); a PostgreSQL schema goes now.
    cleanup: async () => {
      await bench.close();
      if (!bench.sqliteFile) await bench.remove();
    },
  };
}

async function startBare(
  payloads: Extract<ParentMessage, { type: 'payloads' }>,
): Promise<{ app: FastifyInstance; cleanup: () => Promise<void> }> {
  // Parsed once, serialized per request, as the real routes do.
  const list = JSON.parse(payloads.list) as object;
  const created = JSON.parse(payloads.created) as object;
  const accepted = JSON.parse(payloads.accepted) as object;
  const app = Fastify({ logger: false });
  app.get('/v1/webhooks', async () => list);
  app.post('/v1/webhooks', async (_request, reply) => reply.code(201).send(created));
  // Fastify's own JSON body parser reads the email as the real route's does; nothing is validated or stored.
  app.post('/v1/emails', async (_request, reply) => reply.code(202).send(accepted));
  // The accepted send's floor (issue 43): the same, with the email stored by one durable INSERT on the same
  // engine before the 202 (bench/insert-floor.ts).
  const floor = await openInsertFloor(process.env.DATABASE_URL);
  app.post('/floor/emails', async (request, reply) => {
    const id = await floor.insert(payloads.projectId, request.body as Record<string, unknown>);
    return reply.code(202).send({ ...accepted, id });
  });

  // The floor under any real read on SQLite: the same query on node:sqlite, prepared once, no auth, no Kysely.
  const sqlite =
    payloads.database === undefined ? undefined : new DatabaseSync(payloads.database, { readOnly: true });
  const page = sqlite?.prepare('SELECT * FROM webhooks WHERE project_id = ? ORDER BY id DESC LIMIT ?');
  if (page)
    app.get('/sql/webhooks', async () => {
      const rows = page.all(payloads.projectId, 101) as Record<string, string | number | null>[];
      return {
        object: 'list',
        data: rows.slice(0, 100).map((row) => ({
          id: row.id,
          url: row.url,
          enabled: Boolean(row.enabled),
          events: JSON.parse(String(row.events)) as string[],
          created_at: row.created_at,
          updated_at: row.updated_at,
          has_secret: row.secret_sealed !== null,
          ...('disabled_reason' in row ? { disabled_reason: row.disabled_reason } : {}),
        })),
        has_more: rows.length > 100,
      };
    });
  await app.listen({ port: 0, host: '127.0.0.1' });
  send({ type: 'ready', port: port(app) });
  return {
    app,
    cleanup: async () => {
      sqlite?.close();
      await floor.close();
    },
  };
}

function port(app: FastifyInstance): number {
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
}

const mode = process.argv[2];
let server: { app: FastifyInstance; cleanup?: () => Promise<void> } | undefined;
const profiler = createWindowProfiler();

// The parent went away (finished or gave up): nothing is left to serve.
process.on('disconnect', () => process.exit(0));

process.on('message', (message: ParentMessage) => {
  void (async () => {
    if (message.type === 'payloads' && mode === 'bare') server = await startBare(message);
    if (message.type === 'cpu') {
      const usage = process.cpuUsage();
      send({ type: 'cpu', micros: usage.user + usage.system });
    }
    if (message.type === 'profile-start') await profiler.start();
    if (message.type === 'profile-stop') {
      await profiler.stop(message.file);
      send({ type: 'profiled' });
    }
    if (message.type === 'stop') {
      await server?.app.close();
      await server?.cleanup?.();
      process.exit(0);
    }
  })().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
});

if (mode === 'real') server = await startReal();
else if (mode !== 'bare') throw new Error(`usage: node bench/server.ts real|bare (got ${mode})`);
