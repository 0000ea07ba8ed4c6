import assert from 'node:assert/strict';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { simpleParser } from 'mailparser';
import nodemailer from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { processMemory } from './helpers/bombs.ts';
import { dkimpyAvailable, dkimpyVerify } from './helpers/dkimpy.ts';
import { startLatencyProbe } from './helpers/latency-probe.ts';
import { sha256 } from './helpers/mail-corpus.ts';
import {
  createProcessDatabase,
  inboundSmtpPort,
  submissionSmtpPort,
  requestJson,
  type ServerProcess,
  startServerProcess,
} from './helpers/process.ts';
import { assertWireLines, mailauthVerdict } from './helpers/received-mail.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// Issue 34: a 40 MiB message never stalls the API. A server process (API and workers on one event loop, as
// `npm start` runs) takes a message of just under SUBMISSION_MAX_BYTES over SMTP submission, stores it, builds,
// DKIM-signs and sends (relay) or keeps (capture) it — or a send through the API with 40 MiB of files (a 53 MiB
// JSON body), or a 40 MiB message received by the inbound listener — while a probe in a process of its own asks
// its API every 5 ms. Before the fix one such message held that API for seconds (p99 4.3 s over SMTP, 1.8 s
// through the API). Held: no turn of the server's event loop computes for long (TURN_CPU_BOUND_MS); the
// probe's figures are reported. What arrives is checked as a receiver would: both DKIM verifiers pass, and the
// attachment's bytes are the ones sent.

const KEY = 'pw_large_messages_key_0123456789';
const DOMAIN = 'acme.example';
const SELECTOR = 'big';
/** Bytes of the attachment: its base64 and the rest of the message come to just under 40 MiB. */
const ATTACHMENT_BYTES = 29 * 1024 * 1024;
/**
 * The longest turn of the server's event loop while a message flows, in the CPU time of the loop's own thread
 * (test/helpers/turn-cpu.ts): whole-message work there took 1.3 s a turn for a 39 MB submission; what is left
 * is piece-sized work and garbage collection (tens of ms). CPU time, not the wall clock: a machine shared with
 * the rest of the suite makes the loop wait for a core, which is no work of the server's. The probe's
 * latencies, which do count the waiting, are reported beside it; their figures go to bench/README.md.
 */
const TURN_CPU_BOUND_MS = 250;

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const privatePem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const publicBase64 = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
const dkimRecord = `v=DKIM1; k=rsa; p=${publicBase64}`;
const keyName = `${SELECTOR}._domainkey.${DOMAIN}`;
const resolver = async (name: string, type: string) => {
  if (type === 'TXT' && name === keyName) return [[dkimRecord]];
  throw Object.assign(new Error(`no ${type} for ${name}`), { code: 'ENOTFOUND' });
};

const attachment = randomBytes(ATTACHMENT_BYTES);
/** What a sender writes: many lines (LF), Unicode, html, and a large file. */
const text = Array.from(
  { length: 2000 },
  (_, line) => `Line ${line}: the quarterly figures — ${'é'.repeat(line % 7)} attached.`,
).join('\n');
const html = `<html><body>${Array.from({ length: 500 }, (_, row) => `<p>Row ${row}: Grüße ✓</p>`).join('\n')}</body></html>`;

/**
 * The message as a mail client writes it (each its own Message-ID: a repeated one is the same email), built
 * before anything is measured: the test process's own work of encoding 40 MiB would otherwise compete with the
 * server (and the probe) for the machine's two cores.
 */
const message = (): Promise<Buffer> =>
  new MailComposer({
    from: `Acme Reports <hello@${DOMAIN}>`,
    to: 'ada@example.org',
    subject: 'Quarterly figures — Q3 ✓',
    text,
    html,
    attachments: [{ filename: 'figures.bin', content: attachment }],
  })
    .compile()
    .build();

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};

/**
 * A server process as deployed (schemas compiled before it listens, the default the other tests' servers
 * skip) that reports its long turns (test/helpers/turn-cpu.ts).
 */
const TURN_CPU_ENV = {
  NODE_OPTIONS: `--import ${new URL('./helpers/turn-cpu.ts', import.meta.url).href}`,
  HTTP_COMPILE_SCHEMAS_AT_START: 'true',
};

/**
 * Runs `flow` (one large message, start to end: `prepared` before the probe starts) while a probe asks the API
 * every 5 ms; the longest turn of `server`'s event loop in its thread's CPU time meanwhile, and what the
 * probe measured.
 */
async function probed<T>(
  server: ServerProcess,
  prepare: () => Promise<T>,
  flow: (prepared: T) => Promise<void>,
): Promise<{ longestTurnCpuMs: number; figures: string }> {
  const prepared = await prepare();
  const probe = await startLatencyProbe(`${server.url}/v1/webhooks`, KEY);
  const logsBefore = server.logs().length;
  let latencies: number[];
  try {
    await flow(prepared);
  } finally {
    latencies = await probe.stop();
  }
  const turns = server
    .logs()
    .slice(logsBefore)
    .filter((line) => line.msg === 'turn cpu')
    .map((line) => line.turnCpuMs as number);
  const longestTurnCpuMs = Math.max(0, ...turns);
  return {
    longestTurnCpuMs,
    figures:
      `${latencies.length} GET /v1/webhooks, p50 ${percentile(latencies, 50).toFixed(1)} ms, ` +
      `p99 ${percentile(latencies, 99).toFixed(1)} ms, max ${Math.max(...latencies).toFixed(1)} ms; ` +
      `${turns.length} turns over 20 ms of CPU, the longest ${longestTurnCpuMs.toFixed(1)} ms`,
  };
}

/**
 * What a receiver reads from the message: DKIM by two verifiers, then the content by mailparser; `file` is the
 * attachment's bytes as sent.
 */
async function assertArrivedWhole(bytes: Buffer, label: string, file = attachment): Promise<void> {
  assertWireLines(bytes, label);
  const verdict = await mailauthVerdict(bytes, { resolver, sender: `hello@${DOMAIN}` });
  assert.deepEqual(
    verdict.dkim.map((signature) => [signature.domain, signature.result]),
    [[DOMAIN, 'pass']],
    `${label}: mailauth ${JSON.stringify(verdict.dkim)}`,
  );
  if (!dkimpyAvailable()) throw new Error('dkimpy (python3-dkim) is needed: .ci/run installs it');
  const [dkimpy] = await dkimpyVerify([bytes], { [keyName]: dkimRecord });
  assert.ok(dkimpy!.pass, `${label}: dkimpy ${dkimpy!.detail}`);
  const parsed = await simpleParser(bytes);
  assert.equal(parsed.subject, 'Quarterly figures — Q3 ✓');
  assert.equal(parsed.text?.trimEnd(), text);
  assert.equal(parsed.attachments.length, 1);
  assert.equal(parsed.attachments[0]!.filename, 'figures.bin');
  assert.equal(sha256(parsed.attachments[0]!.content), sha256(file), `${label}: the attachment's bytes`);
}

for (const engine of ALL_ENGINES) {
  describe(`a 40 MiB submission does not stall the API (${engine})`, { skip: engineSkip(engine) }, () => {
    let relay: TestSmtpServer;
    const children: ServerProcess[] = [];
    after(async () => {
      children.forEach((child) => child.kill());
      await relay?.close();
    });

    for (const mode of ['capture', 'relay'] as const) {
      test(`${mode}: the API answers while it is submitted, stored, built, signed and ${mode === 'capture' ? 'kept' : 'sent'}`, async (t) => {
        relay ??= await startSmtpServer({ maxBytes: 64 * 1024 * 1024 });
        const db = await createProcessDatabase(engine);
        t.after(() => db.cleanup());
        const server = await startServerProcess({
          ...TURN_CPU_ENV,
          ...db.env,
          POSTWIRE_BOOTSTRAP_KEY: KEY,
          // The probe asks 200 times a second, past the default per-key limit.
          POSTWIRE_RATE_LIMIT: '1000000',
          SUBMISSION_PORT: '0',
          SUBMISSION_ALLOW_PLAIN_LOOPBACK: 'true',
          DKIM_DOMAIN: DOMAIN,
          DKIM_SELECTOR: SELECTOR,
          DKIM_PRIVATE_KEY: privatePem,
          ...(mode === 'relay'
            ? { MAIL_TRANSPORT: 'relay', SMTP_URL: `smtp://127.0.0.1:${relay.port}` }
            : { MAIL_TRANSPORT: 'capture' }),
        });
        children.push(server);
        const transport = nodemailer.createTransport({
          host: '127.0.0.1',
          port: await submissionSmtpPort(server),
          secure: false,
          ignoreTLS: true,
          auth: { user: 'reports', pass: KEY },
        });
        t.after(() => transport.close());
        const submit = async (raw: Buffer) => {
          const info = await transport.sendMail({
            envelope: { from: `hello@${DOMAIN}`, to: ['ada@example.org'] },
            raw,
          });
          const id = /queued as (msg_[0-9a-z]+)/.exec(info.response)?.[1];
          assert.ok(id, info.response);
          return id;
        };
        const settled = (id: string) =>
          until(
            async () => {
              const email = await requestJson(`${server.url}/v1/emails/${id}`, KEY, 'GET');
              return ['sent', 'delivered'].includes(email.body.status) && email.body;
            },
            120_000,
            `email ${id} to be ${mode === 'capture' ? 'kept' : 'sent'}`,
          );

        // Warmed with a small message first: a route's first answer compiles its serializer (a few hundred ms
        // on a busy machine), which is no message's cost.
        await settled(
          await submit(
            Buffer.from(`From: hello@${DOMAIN}\r\nTo: ada@example.org\r\nSubject: warm\r\n\r\nHi\r\n`),
          ),
        );
        let lastId = '';
        const peak = { rssMb: 0 };
        const pid = server.child.pid!;
        const sampler = setInterval(() => {
          peak.rssMb = Math.max(peak.rssMb, processMemory(pid)?.rssMb ?? 0);
        }, 20);
        t.after(() => clearInterval(sampler));
        const { longestTurnCpuMs, figures } = await probed(server, message, async (raw) => {
          lastId = await submit(raw);
          await settled(lastId);
        });
        t.diagnostic(`${engine} ${mode}: ${figures}; peak RSS ${peak.rssMb.toFixed(0)} MB`);
        assert.ok(longestTurnCpuMs < TURN_CPU_BOUND_MS, `a turn of the event loop took: ${figures}`);

        if (mode === 'capture') {
          const raw = await requestJson(`${server.url}/v1/emails/${lastId}/raw`, KEY, 'GET');
          assert.equal(raw.status, 200);
          await assertArrivedWhole(Buffer.from(raw.body.raw as string, 'utf8'), `${engine} capture`);
        } else {
          const email = await requestJson(`${server.url}/v1/emails/${lastId}`, KEY, 'GET');
          const messageId = `<${String(email.body.message_id).replace(/^<|>$/g, '')}>`;
          const copy = relay.messages.find((message) => message.messageId === messageId);
          assert.ok(copy, 'the message reached the relay');
          await assertArrivedWhole(copy.bytes, `${engine} relay`);
        }
      });
    }
  });
}

for (const engine of ALL_ENGINES) {
  describe(
    `a 40 MiB received message does not stall the API (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      test('the API answers while it is received, stored, read and authenticated; the file reads back whole', async (t) => {
        const db = await createProcessDatabase(engine);
        t.after(() => db.cleanup());
        const server = await startServerProcess({
          ...TURN_CPU_ENV,
          ...db.env,
          POSTWIRE_BOOTSTRAP_KEY: KEY,
          POSTWIRE_RATE_LIMIT: '1000000',
          // Capture mode: acme.test verifies without DNS (TEST_DOMAINS_WITHOUT_DNS), as the receiving guide does.
          MAIL_TRANSPORT: 'capture',
          INBOUND_MX_HOST: 'mx.acme.test',
          INBOUND_SMTP_PORT: '0',
          INBOUND_MAX_BYTES: String(40 * 1024 * 1024),
          // On a busy shared machine reading the 40 MiB message again for its attachment can run past the
          // default budget's wall limit (a 503 to try again: received-parser.test.ts holds that); this test
          // measures the API's latency while the message flows, not the budget.
          REPORT_PARSE_TIMEOUT: '20s',
        });
        t.after(() => server.kill());
        const inboundPort = await inboundSmtpPort(server);
        const api = (method: string, url: string, body?: unknown) =>
          requestJson(`${server.url}/v1${url}`, KEY, method, body);
        assert.equal((await api('POST', '/domains', { name: 'acme.test', receiving: true })).status, 201);
        assert.equal((await api('POST', '/domains/acme.test/verify')).body.receiving_verified, true);
        const route = await api('POST', '/inbound-routes', { match: 'reports@acme.test', action: 'store' });
        assert.equal(route.status, 201, JSON.stringify(route.body));
        const transport = nodemailer.createTransport({
          host: '127.0.0.1',
          port: inboundPort,
          ignoreTLS: true,
        });
        t.after(() => transport.close());

        // Warmed with a small message first (see above).
        await transport.sendMail({
          envelope: { from: 'ada@example.org', to: ['reports@acme.test'] },
          raw: 'From: ada@example.org\r\nTo: reports@acme.test\r\nSubject: warm\r\n\r\nHi\r\n',
        });
        await until(
          async () =>
            (await api('GET', '/received-emails?recipient=reports@acme.test')).body.data.length >= 1,
          20_000,
          'the small message to be received',
        );
        const { longestTurnCpuMs, figures } = await probed(server, message, async (raw) => {
          const info = await transport.sendMail({
            envelope: { from: 'ada@example.org', to: ['reports@acme.test'] },
            raw,
          });
          assert.match(info.response, /queued as inb_/);
          // Listed once stored; its subject once read (on a busy machine the read comes later).
          await until(
            async () => {
              const { data } = (await api('GET', '/received-emails?recipient=reports@acme.test')).body;
              return data.length >= 2 && data[0].subject !== null;
            },
            120_000,
            'the message to be received and read',
          );
        });
        t.diagnostic(`${engine} received: ${figures}`);
        assert.ok(longestTurnCpuMs < TURN_CPU_BOUND_MS, `a turn of the event loop took: ${figures}`);

        // Newest first: the last large one.
        const [received] = (await api('GET', '/received-emails?recipient=reports@acme.test')).body.data;
        assert.equal(received.subject, 'Quarterly figures — Q3 ✓');
        const file = await fetch(`${server.url}/v1/received-emails/${received.id}/attachments/0`, {
          headers: { authorization: `Bearer ${KEY}` },
        });
        assert.equal(file.status, 200);
        assert.equal(
          sha256(Buffer.from(await file.arrayBuffer())),
          sha256(attachment),
          "the attachment's bytes",
        );
        // The message as received, streamed back whole.
        const raw = await fetch(`${server.url}/v1/received-emails/${received.id}/raw`, {
          headers: { authorization: `Bearer ${KEY}` },
        });
        assert.equal(raw.status, 200);
        const bytes = Buffer.from(await raw.arrayBuffer());
        assert.equal(Number(raw.headers.get('content-length')), bytes.length);
        const parsed = await simpleParser(bytes);
        assert.equal(
          sha256(parsed.attachments[0]!.content),
          sha256(attachment),
          "the raw message's attachment",
        );
      });
    },
  );
}

/** An API send's file: just under the 40 MiB of files an email may carry. */
const API_ATTACHMENT_BYTES = 40 * 1024 * 1024 - 64 * 1024;
const apiAttachment = randomBytes(API_ATTACHMENT_BYTES);

for (const engine of ALL_ENGINES) {
  describe(
    `a send with 40 MiB of files does not stall the API (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      test('the API answers while the body is read, the file decoded, stored, built, signed and kept', async (t) => {
        const db = await createProcessDatabase(engine);
        t.after(() => db.cleanup());
        const server = await startServerProcess({
          ...TURN_CPU_ENV,
          ...db.env,
          POSTWIRE_BOOTSTRAP_KEY: KEY,
          POSTWIRE_RATE_LIMIT: '1000000',
          MAIL_TRANSPORT: 'capture',
          DKIM_DOMAIN: DOMAIN,
          DKIM_SELECTOR: SELECTOR,
          DKIM_PRIVATE_KEY: privatePem,
        });
        t.after(() => server.kill());
        const send = async (body: string) => {
          const response = await fetch(`${server.url}/v1/emails`, {
            method: 'POST',
            headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
            body,
          });
          const answer = (await response.json()) as { id: string };
          assert.equal(response.status, 202, JSON.stringify(answer));
          return answer.id;
        };
        const kept = (id: string) =>
          until(
            async () =>
              ['sent', 'delivered'].includes(
                (await requestJson(`${server.url}/v1/emails/${id}`, KEY, 'GET')).body.status,
              ),
            120_000,
            `email ${id} to be kept`,
          );
        const body = (content: Buffer) =>
          JSON.stringify({
            from: `Acme Reports <hello@${DOMAIN}>`,
            to: ['ada@example.org'],
            subject: 'Quarterly figures — Q3 ✓',
            text,
            html,
            attachments: [{ filename: 'figures.bin', content: content.toString('base64') }],
          });

        // Warmed with a small send first (see above), and one just past the size parsed on a thread.
        await kept(await send(body(Buffer.from('warm'))));
        await kept(await send(body(randomBytes(512 * 1024))));
        let lastId = '';
        const { longestTurnCpuMs, figures } = await probed(
          server,
          async () => body(apiAttachment),
          async (json) => {
            lastId = await send(json);
            await kept(lastId);
          },
        );
        t.diagnostic(`${engine} api: ${figures}`);
        assert.ok(longestTurnCpuMs < TURN_CPU_BOUND_MS, `a turn of the event loop took: ${figures}`);

        const raw = await requestJson(`${server.url}/v1/emails/${lastId}/raw`, KEY, 'GET');
        assert.equal(raw.status, 200);
        assert.deepEqual(Object.keys(raw.body), ['object', 'id', 'content_type', 'raw']);
        await assertArrivedWhole(Buffer.from(raw.body.raw as string, 'utf8'), `${engine} api`, apiAttachment);
      });
    },
  );
}
