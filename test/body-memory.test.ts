import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import net from 'node:net';
import { describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { until } from './helpers/until.ts';

// HTTP_BODY_MEMORY_LIMIT: request bodies held in memory at once are bounded. Large sends in parallel beyond it
// are refused with a 429 and retry-after (nothing stored), small requests still pass beside them, and a body
// alone always passes. One send is held open mid-body by a raw client, so which request is admitted first is
// decided by the test, not by timing. Sizes stay at a few MiB so the test is quick.

const MiB = 1024 * 1024;
const LIMIT = 3 * MiB;

/** A send whose JSON is about `bytes` long (one attachment of random bytes, which base64 makes 4/3 larger). */
const sendBody = (bytes: number) =>
  JSON.stringify({
    from: 'a@example.com',
    to: ['b@example.org'],
    subject: 'Large',
    text: 'See the attachment.',
    attachments: [
      { filename: 'data.bin', content: randomBytes(Math.floor((bytes * 3) / 4)).toString('base64') },
    ],
  });

interface RawResponse {
  status: number;
  headers: string;
  body: any;
}

/** Reads one HTTP/1.1 response (with a content-length) from a raw socket. */
async function readResponse(socket: net.Socket): Promise<RawResponse> {
  let answer = Buffer.alloc(0);
  for await (const chunk of socket) {
    answer = Buffer.concat([answer, chunk as Buffer]);
    const text = answer.toString('latin1');
    const end = text.indexOf('\r\n\r\n');
    if (end < 0) continue;
    const length = Number(/content-length: (\d+)/i.exec(text.slice(0, end))?.[1] ?? 0);
    if (answer.length >= end + 4 + length) {
      const head = text.slice(0, end);
      const body = answer.subarray(end + 4, end + 4 + length).toString('utf8');
      return { status: Number(head.split(' ')[1]), headers: head, body: body ? JSON.parse(body) : undefined };
    }
  }
  throw new Error(
    `the connection closed before a whole response: ${answer.toString('latin1').slice(0, 200)}`,
  );
}

/** A send over a raw connection, its body written up to `sentBytes`: the rest comes with `finish()`. */
async function openSend(
  api: TestApp,
  body: string,
  sentBytes: number,
  framing: 'content-length' | 'chunked',
) {
  const url = new URL(api.baseUrl);
  const socket = net.connect(Number(url.port), url.hostname);
  socket.on('error', () => {});
  await once(socket, 'connect');
  const bytes = Buffer.from(body);
  const chunk = (part: Buffer) =>
    framing === 'chunked'
      ? Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')])
      : part;
  socket.write(
    `POST /v1/emails HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${api.key}\r\n` +
      'content-type: application/json\r\n' +
      (framing === 'chunked'
        ? 'transfer-encoding: chunked\r\n\r\n'
        : `content-length: ${bytes.length}\r\n\r\n`),
  );
  // In pieces of 64 KiB, as a client's socket writes them; each write is taken before the next.
  const write = async (from: number, to: number) => {
    for (let at = from; at < to; at += 64 * 1024) {
      if (!socket.write(chunk(bytes.subarray(at, Math.min(to, at + 64 * 1024))))) await once(socket, 'drain');
    }
  };
  await write(0, sentBytes);
  return {
    socket,
    async finish(): Promise<RawResponse> {
      const response = readResponse(socket);
      await write(sentBytes, bytes.length);
      if (framing === 'chunked') socket.write('0\r\n\r\n');
      return response;
    },
  };
}

for (const engine of ALL_ENGINES) {
  describe(`request bodies held in memory at once (${engine})`, { skip: engineSkip(engine) }, () => {
    test('past HTTP_BODY_MEMORY_LIMIT large sends get 429 with retry-after; small ones and a lone one pass', async (t) => {
      const api = await startTestApp(engine, { httpBodyMemoryBytes: LIMIT });
      t.after(() => api.close());
      assert.equal(api.app.bodyMemory.limitBytes, LIMIT);
      const emailsBefore = (await api.rowCounts()).emails ?? 0;

      // A 2 MiB send, half written: admitted by its content-length, it holds its 2 MiB until it is answered.
      const held = sendBody(2 * MiB);
      const first = await openSend(api, held, MiB, 'content-length');
      await until(
        () => api.app.bodyMemory.held() === Buffer.byteLength(held),
        5000,
        'the first body to be admitted',
      );

      // Five more 2 MiB sends at once: none fits beside it (2 + 2 > 3 MiB).
      const refused = await Promise.all(
        Array.from({ length: 5 }, () =>
          api.request('POST', '/v1/emails', {
            rawBody: sendBody(2 * MiB),
            headers: { 'content-type': 'application/json' },
          }),
        ),
      );
      for (const response of refused) {
        assert.equal(response.status, 429);
        assert.equal(response.headers.get('retry-after'), '1');
        assert.deepEqual(response.body, {
          error: {
            code: 'server_busy',
            message: 'The server holds as many request bodies in memory as it may at once; retry in 1 s.',
            request_id: response.headers.get('x-request-id'),
          },
        });
      }

      // A body sent chunked is counted as it arrives, and refused once it no longer fits; the client, still
      // sending, reads its 429.
      const chunked = await openSend(api, sendBody(2 * MiB), 0, 'chunked');
      const chunkedAnswer = await chunked.finish();
      chunked.socket.destroy();
      assert.equal(chunkedAnswer.status, 429);
      assert.match(chunkedAnswer.headers, /retry-after: 1/i);
      assert.equal(chunkedAnswer.body.error.code, 'server_busy');

      // A small request fits beside the held send.
      const small = await api.request('POST', '/v1/emails', {
        body: { from: 'a@example.com', to: 'b@example.org', subject: 'Small', text: 'T' },
      });
      assert.equal(small.status, 202);

      // The held send completes, and its bytes are given back with its answer.
      const firstAnswer = await first.finish();
      first.socket.destroy();
      assert.equal(firstAnswer.status, 202);
      await until(() => api.app.bodyMemory.held() === 0, 5000, 'the bodies to be given back');

      // Alone, a body larger than the whole limit still passes: the limit queues large sends, never refuses one
      // for ever.
      const alone = await api.request('POST', '/v1/emails', {
        rawBody: sendBody(4 * MiB),
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(alone.status, 202);
      assert.equal((await api.rowCounts()).emails, emailsBefore + 3, 'the refused sends stored nothing');
      await until(() => api.app.bodyMemory.held() === 0, 5000, 'the last body to be given back');
    });
  });
}

test('HTTP_BODY_MEMORY_LIMIT is read and checked', () => {
  assert.equal(loadConfig({}).httpBodyMemoryBytes, 64 * MiB);
  assert.equal(loadConfig({ HTTP_BODY_MEMORY_LIMIT: '0' }).httpBodyMemoryBytes, 0);
  assert.equal(loadConfig({ HTTP_BODY_MEMORY_LIMIT: String(512 * MiB) }).httpBodyMemoryBytes, 512 * MiB);
  assert.throws(
    () => loadConfig({ HTTP_BODY_MEMORY_LIMIT: '-1' }),
    /HTTP_BODY_MEMORY_LIMIT must be an integer/,
  );
  assert.throws(
    () => loadConfig({ HTTP_BODY_MEMORY_LIMIT: '1.5' }),
    /HTTP_BODY_MEMORY_LIMIT must be an integer/,
  );
});
