// The server side of bench/engagement.ts, in a child process of its own. `real`: the real app on a fresh
// database (SQLite, or PostgreSQL with DATABASE_URL), an email with open tracking to RECIPIENTS recipients
// and a webhook subscribed to email.opened, so every open writes its counters, its daily numbers, its
// event and a delivery row. `bare`: plain Fastify answering the same GIF with the same headers.
import { randomBytes } from 'node:crypto';
import Fastify, { type FastifyInstance } from 'fastify';
import { createSecretBox } from '../src/lib/crypto.ts';
import { PIXEL_GIF } from '../src/modules/engagement/engagement.routes.ts';
import { createEngagementTokens } from '../src/modules/engagement/tokens.ts';
import { startBenchApp } from './app.ts';

export type EngagementChildMessage =
  | { type: 'ready'; port: number; paths: string[] }
  | { type: 'cpu'; micros: number }
  | { type: 'events'; count: number };
export type EngagementParentMessage = { type: 'cpu' } | { type: 'events' } | { type: 'stop' };

const RECIPIENTS = 1000;
const send = (message: EngagementChildMessage) => process.send!(message);
const port = (app: FastifyInstance) => {
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
};

let close: () => Promise<void> = async () => undefined;
let countEvents: () => Promise<number> = async () => 0;

async function startReal(): Promise<void> {
  const secretBox = createSecretBox(randomBytes(32));
  const bench = await startBenchApp({
    databaseUrl: process.env.DATABASE_URL,
    config: { publicUrl: 'https://mail.bench.example', publicRateLimit: 0 },
    infra: { secretBox },
  });
  const headers = { authorization: `Bearer ${bench.key}` };
  const hook = await bench.app.inject({
    method: 'POST',
    url: '/v1/webhooks',
    headers,
    payload: { url: 'https://hooks.example.com/opens', events: ['email.opened'] },
  });
  if (hook.statusCode !== 201) throw new Error(`setup: webhook answered ${hook.statusCode}`);
  for (let start = 0; start < RECIPIENTS; start += 50) {
    const to = Array.from({ length: 50 }, (_, index) => `reader${start + index}@example.org`);
    const sent = await bench.app.inject({
      method: 'POST',
      url: '/v1/emails',
      headers,
      payload: {
        from: 'news@bench.example',
        to,
        subject: 'News',
        html: '<p>Hi</p>',
        tracking: { opens: true },
      },
    });
    if (sent.statusCode !== 202) throw new Error(`setup: send answered ${sent.statusCode} ${sent.body}`);
  }
  const tokens = createEngagementTokens(secretBox);
  const rows = await bench.database.db.selectFrom('email_recipients').select('id').execute();
  countEvents = async () =>
    Number(
      (
        await bench.database.db
          .selectFrom('events')
          .select((eb) => eb.fn.countAll<number | string>().as('count'))
          .where('type', '=', 'email.opened')
          .executeTakeFirstOrThrow()
      ).count,
    );
  close = async () => {
    await bench.close();
    await bench.remove();
  };
  send({
    type: 'ready',
    port: port(bench.app),
    paths: rows.map((row) => `/o/${tokens.make('open', row.id)}`),
  });
}

async function startBare(): Promise<void> {
  const app = Fastify({ logger: false });
  app.get('/o/:token', async (_request, reply) =>
    reply
      .header('cache-control', 'no-store, no-cache, must-revalidate, max-age=0, private')
      .header('pragma', 'no-cache')
      .header('expires', '0')
      .type('image/gif')
      .send(PIXEL_GIF),
  );
  await app.listen({ port: 0, host: '127.0.0.1' });
  close = () => app.close();
  send({
    type: 'ready',
    port: port(app),
    paths: Array.from({ length: RECIPIENTS }, () => `/o/${randomBytes(21).toString('hex').slice(0, 42)}`),
  });
}

process.on('message', (message: EngagementParentMessage) => {
  void (async () => {
    if (message.type === 'cpu') {
      const usage = process.cpuUsage();
      send({ type: 'cpu', micros: usage.user + usage.system });
    }
    if (message.type === 'events') send({ type: 'events', count: await countEvents() });
    if (message.type === 'stop') {
      await close();
      process.exit(0);
    }
  })().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
});

const mode = process.argv[2];
if (mode === 'real') await startReal();
else if (mode === 'bare') await startBare();
else throw new Error(`usage: node bench/engagement-server.ts real|bare (got ${mode})`);
