import { loadConfig } from '../src/config.ts';
import { once } from 'node:events';
import net from 'node:net';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createProjectRepo } from '../src/modules/projects/projects.repo.ts';
import { createProjectService } from '../src/modules/projects/projects.service.ts';
import { systemClock } from '../src/lib/clock.ts';
import { sha256Hex } from '../src/lib/crypto.ts';
import { connectionsCheckingIntervalMs } from '../src/app.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

const hook = { url: 'https://hooks.example.com/h', events: ['email.sent'] };

for (const engine of ALL_ENGINES) {
  describe(`authentication (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    const unauthorized = async (headers: Record<string, string>, key: string | null, message: string) => {
      const response = await api.request('GET', '/v1/webhooks', { key, headers });
      assert.equal(response.status, 401);
      assert.match(response.headers.get('www-authenticate') ?? '', /^Bearer/);
      assert.deepEqual(response.body, {
        error: { code: 'invalid_api_key', message, request_id: response.headers.get('x-request-id') },
      });
    };

    test('no key, an unknown key, another scheme, an empty bearer: 401 saying which', async () => {
      const missing = 'Missing API key: send the header `Authorization: Bearer <API_KEY>`.';
      await unauthorized({}, null, missing);
      await unauthorized({ authorization: '  ' }, null, missing);
      await unauthorized({}, 'pw_not_a_real_key_at_all_000000', 'Unknown or revoked API key.');
      await unauthorized(
        { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` },
        null,
        "The Authorization header must use the Bearer scheme, not 'Basic': `Authorization: Bearer <API_KEY>`.",
      );
      await unauthorized(
        { authorization: api.key },
        null,
        'The Authorization header must use the Bearer scheme, not a bare value: `Authorization: Bearer <API_KEY>`.',
      );
      await unauthorized(
        { authorization: 'Bearer ' },
        null,
        'Missing API key after `Bearer` in the Authorization header.',
      );
    });

    test('the Bearer scheme in any case', async () => {
      for (const scheme of ['bearer', 'BEARER', 'bEaReR']) {
        const response = await api.request('GET', '/v1/webhooks', {
          key: null,
          headers: { authorization: `${scheme} ${api.key}` },
        });
        assert.equal(response.status, 200, scheme);
      }
    });

    test('an address that keeps failing to authenticate is refused with 429, even with a good key', async (t) => {
      // A clock that stands still: the window's end, and so retry-after, is exact.
      const clock = { now: () => new Date('2026-11-23T10:00:00.000Z') };
      const guarded = await startTestApp(engine, { authFailureLimit: { limit: 3, windowMs: 60_000 }, clock });
      t.after(() => guarded.close());
      for (let attempt = 1; attempt <= 3; attempt++) {
        const response = await guarded.request('GET', '/v1/webhooks', { key: `pw_guess_${attempt}` });
        assert.equal(response.status, 401, `guess ${attempt}`);
      }
      for (const key of ['pw_guess_4', guarded.key]) {
        const response = await guarded.request('GET', '/v1/webhooks', { key });
        assert.equal(response.status, 429);
        assert.equal(response.headers.get('retry-after'), '60');
        assert.deepEqual(response.body, {
          error: {
            code: 'rate_limited',
            message: 'Too many failed authentications from this address; retry in 60 s.',
            request_id: response.headers.get('x-request-id'),
          },
        });
      }
      // Another app (another limiter) is not affected; nor is a public route.
      assert.equal((await guarded.request('GET', '/healthz', { key: null })).status, 200);
      assert.equal((await api.request('GET', '/v1/webhooks')).status, 200);
    });

    test('a revoked key is 401; the project’s other keys still work', async () => {
      const projects = createProjectService({
        db: api.database.handle.db,
        repo: createProjectRepo(api.database.handle.db),
        clock: systemClock,
      });
      const second = await projects.createKey(api.projectId, { name: 'second' });
      assert.equal((await api.request('GET', '/v1/webhooks', { key: second.plaintext })).status, 200);
      await projects.revokeKey(api.projectId, second.key.id);
      await unauthorized({}, second.plaintext, 'Unknown or revoked API key.');
      assert.equal((await api.request('GET', '/v1/webhooks')).status, 200);
    });

    test('keys are stored as SHA-256 hashes, never in plain', async () => {
      const rows = await api.database.handle.db.selectFrom('api_keys').selectAll().execute();
      assert.ok(rows.length > 0);
      for (const row of rows) {
        assert.match(row.key_hash, /^[0-9a-f]{64}$/);
        assert.ok(!JSON.stringify(row).includes(api.key));
      }
    });

    test('a refused key writes nothing', async () => {
      const before = await api.rowCounts();
      const response = await api.request('POST', '/v1/webhooks', {
        body: hook,
        key: 'pw_wrong_wrong_wrong_wrong',
      });
      assert.equal(response.status, 401);
      assert.deepEqual(await api.rowCounts(), before);
    });

    test('health, the OpenAPI document and the docs answer without a key', async () => {
      const health = await api.request('GET', '/healthz', { key: null });
      assert.equal(health.status, 200);
      assert.deepEqual(health.body, { status: 'ok' });
      assert.equal((await api.request('GET', '/v1/openapi.json', { key: null })).status, 200);
      assert.equal((await api.request('GET', '/docs', { key: null })).status < 400, true);
    });
  });

  describe(`routing and request ids (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    test('an unknown path is 404 with the error body', async () => {
      const response = await api.request('GET', '/v1/nothing-here');
      assert.equal(response.status, 404);
      assert.deepEqual(response.body, {
        error: {
          code: 'route_not_found',
          message: 'No route GET /v1/nothing-here.',
          request_id: response.headers.get('x-request-id'),
        },
      });
    });

    test('a known path with another method is 405 with allow', async () => {
      const cases: Array<[string, string, string]> = [
        ['PUT', '/v1/webhooks', 'GET, POST'],
        ['DELETE', '/v1/webhooks', 'GET, POST'],
        ['POST', '/v1/webhooks/wh_01m80709nxe009tv2hk8dxzf66', 'GET, PATCH, DELETE'],
        ['GET', '/v1/templates/tpl_01m80709nxe009tv2hk8dxzf66/publish', 'POST'],
      ];
      for (const [method, path, allow] of cases) {
        const response = await api.request(method, path);
        assert.equal(response.status, 405, `${method} ${path}`);
        assert.equal(response.headers.get('allow'), allow);
        assert.equal(response.body.error.code, 'method_not_allowed');
      }
    });

    test('every response carries x-request-id, the same as in an error body', async () => {
      const seen = new Set<string>();
      for (const [method, path, key] of [
        ['GET', '/healthz', null],
        ['GET', '/v1/webhooks', undefined],
        ['GET', '/v1/webhooks', null],
        ['GET', '/nope', undefined],
      ] as const) {
        const response = await api.request(method, path, { key });
        const id = response.headers.get('x-request-id');
        assert.match(id ?? '', /^req_[0-9a-z]{26}$/);
        seen.add(id!);
        if (response.status >= 400) assert.equal(response.body.error.request_id, id);
      }
      assert.equal(seen.size, 4, 'each request gets its own id');
    });

    test('a connection that sends nothing is closed after HTTP_IDLE_TIMEOUT', async (t) => {
      const timeouts = { idleMs: 300, headersMs: 1000, requestMs: 2000, keepAliveMs: 200 };
      const quick = await startTestApp(engine, { httpTimeouts: timeouts });
      t.after(() => quick.close());
      const url = new URL(quick.baseUrl);
      const silent = net.connect(Number(url.port), url.hostname);
      await once(silent, 'connect');
      const opened = performance.now();
      // The server's close is the signal; no answer was ever asked for.
      await once(silent, 'close');
      assert.ok(performance.now() - opened >= 250, 'not before the idle timeout');
      assert.deepEqual(loadConfig({ HTTP_IDLE_TIMEOUT: '30s', HTTP_HEADERS_TIMEOUT: '5s' }).httpTimeouts, {
        idleMs: 30_000,
        headersMs: 5000,
        requestMs: 60_000,
        keepAliveMs: 5000,
      });
      assert.throws(
        () => loadConfig({ HTTP_REQUEST_TIMEOUT: '1ms' }),
        /HTTP_REQUEST_TIMEOUT must be from 100ms to 1h/,
      );
    });

    test('HTTP_HEADERS_TIMEOUT holds: a silent or trickling client is cut off at it, not 30 s later', async (t) => {
      // Node looks for connections past the headers and request timeouts every 30 s unless told otherwise,
      // so a 10 s headers timeout closed a silent socket after ~38 s. The check now runs at a tenth of the
      // shorter timeout; without it, neither socket below is closed before the deadline.
      const timeouts = { idleMs: 60_000, headersMs: 500, requestMs: 1500, keepAliveMs: 5000 };
      const quick = await startTestApp(engine, { httpTimeouts: timeouts });
      t.after(() => quick.close());
      assert.equal(connectionsCheckingIntervalMs(timeouts), 50);
      assert.equal(
        connectionsCheckingIntervalMs({ ...timeouts, headersMs: 10_000, requestMs: 60_000 }),
        1000,
      );
      // Node keeps the option on the server, untyped.
      const server = quick.app.server as unknown as { connectionsCheckingInterval: number };
      assert.equal(server.connectionsCheckingInterval, 50);
      const url = new URL(quick.baseUrl);
      for (const client of ['silent', 'trickling'] as const) {
        const socket = net.connect(Number(url.port), url.hostname);
        socket.on('error', () => {});
        await once(socket, 'connect');
        const opened = performance.now();
        // The trickling client keeps the connection busy, a byte of one header every 100 ms, so the idle timeout
        // never fires; only the headers timeout can end it. It stops once answered (a byte written after the
        // server's close would only earn a reset).
        let trickle: NodeJS.Timeout | undefined;
        let answer = '';
        socket.on('data', (chunk: Buffer) => {
          answer += chunk.toString();
          clearInterval(trickle);
        });
        if (client === 'trickling') {
          socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ');
          trickle = setInterval(() => socket.write('a'), 100);
        }
        // The server's close is the signal (a reset closes too): not before the headers timeout, and with its
        // 408. That it comes at the timeout and not 30 s later is the 50 ms check interval asserted above (the
        // elapsed time is not bounded from above: a busy machine is slow too; a hang fails at the test's timeout).
        await new Promise<void>((resolve) => socket.once('close', () => resolve())).finally(() =>
          clearInterval(trickle),
        );
        const elapsed = performance.now() - opened;
        socket.destroy();
        assert.ok(
          elapsed >= timeouts.headersMs - 50,
          `${client}: closed after ${elapsed} ms, before the timeout`,
        );
        assert.match(answer, /^HTTP\/1\.1 408 /, client);
      }
    });

    test('a 10 MiB body sent to its end gets the 413 answer, not a reset connection', async () => {
      const url = new URL(api.baseUrl);
      for (const framing of ['content-length', 'chunked']) {
        const socket = net.connect(Number(url.port), url.hostname);
        await once(socket, 'connect');
        const total = 10 * 1024 * 1024;
        socket.write(
          `POST /v1/templates HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${api.key}\r\n` +
            `content-type: application/json\r\n` +
            (framing === 'chunked'
              ? 'transfer-encoding: chunked\r\n\r\n'
              : `content-length: ${total}\r\n\r\n`),
        );
        // Like most clients, it sends the whole body before it reads: every write must be taken.
        const chunk = Buffer.alloc(64 * 1024, 0x61);
        for (let sent = 0; sent < total; sent += chunk.length) {
          const data =
            framing === 'chunked'
              ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')])
              : chunk;
          if (!socket.write(data)) await once(socket, 'drain');
        }
        if (framing === 'chunked') socket.write('0\r\n\r\n');
        let answer = '';
        socket.setEncoding('utf8');
        for await (const text of socket) {
          answer += text;
          const [head, body = ''] = answer.split('\r\n\r\n');
          const length = /content-length: (\d+)/i.exec(head ?? '')?.[1];
          if (length !== undefined && Buffer.byteLength(body) >= Number(length)) break;
        }
        socket.destroy();
        const [head, body] = answer.split('\r\n\r\n');
        assert.match(head!, /^HTTP\/1\.1 413 /, framing);
        assert.equal(JSON.parse(body!).error.code, 'body_too_large');
      }
    });

    test('a body that is not UTF-8 is 400 and stores nothing, not stored as U+FFFD', async () => {
      const before = await api.rowCounts();
      for (const bytes of [
        Buffer.from([...Buffer.from('{"name":"caf'), 0xe9, ...Buffer.from('","html":"<p>x</p>"}')]),
        Buffer.from([...Buffer.from('{"name":"'), 0xed, 0xa0, 0x80, ...Buffer.from('","html":"x"}')]),
        Buffer.from([...Buffer.from('{"name":"'), 0xc0, 0xaf, ...Buffer.from('","html":"x"}')]),
      ]) {
        const response = await api.request('POST', '/v1/templates', {
          rawBody: bytes,
          headers: { 'content-type': 'application/json' },
        });
        assert.equal(response.status, 400);
        assert.deepEqual(response.body, {
          error: {
            code: 'invalid_json',
            message: 'The body is not valid UTF-8.',
            request_id: response.headers.get('x-request-id'),
          },
        });
      }
      assert.deepEqual(await api.rowCounts(), before);
      const utf8 = await api.request('POST', '/v1/templates', {
        body: { name: 'café ☕', html: '<p>x</p>' },
      });
      assert.equal(utf8.body.name, 'café ☕');
    });

    test('a string holding U+0000 is 422 naming its field, and stores nothing', async () => {
      const before = await api.rowCounts();
      const cases: Array<[string, string, unknown, string]> = [
        ['POST', '/v1/templates', { name: 'a\u0000b', html: '<p>x</p>' }, 'name'],
        ['POST', '/v1/webhooks', { ...hook, url: 'https://hooks.example.com/\u0000' }, 'url'],
        ['POST', '/v1/webhooks', { ...hook, events: ['email.sent', '\u0000'] }, 'events[1]'],
      ];
      for (const [method, path, body, param] of cases) {
        const response = await api.request(method, path, { body });
        assert.equal(response.status, 422, `${method} ${path} ${param}`);
        assert.equal(response.body.error.code, 'parameter_invalid');
        assert.equal(response.body.error.param, param);
      }
      assert.deepEqual(await api.rowCounts(), before);
      // An escaped backslash before "u0000" is ordinary text.
      const literal = await api.request('POST', '/v1/templates', {
        rawBody: '{"name":"\\\\u0000","html":"<p>x</p>"}',
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(literal.status, 201);
      assert.equal(literal.body.name, '\\u0000');
    });

    test('the event-kind catalogue', async () => {
      const response = await api.request('GET', '/v1/event-kinds');
      assert.equal(response.status, 200);
      assert.equal(response.body.object, 'list');
      assert.equal(response.body.has_more, false);
      const types = response.body.data.map((kind: any) => kind.type);
      for (const seedKind of ['email.sent', 'email.delivered', 'email.bounced'])
        assert.ok(types.includes(seedKind));
      assert.deepEqual(types, [
        'email.sent',
        'email.delivered',
        'email.delivery_delayed',
        'email.bounced',
        'email.failed',
        'email.complained',
        'email.suppressed',
        'email.opened',
        'email.clicked',
        'email.unsubscribed',
        'email.received',
        'domain.verified',
        'domain.failed',
        'project.warning',
        'project.sending_paused',
        'project.sending_resumed',
        'contact.created',
        'contact.updated',
        'contact.deleted',
        'contact.topics_updated',
        'broadcast.sent',
        'destination.suspended',
        'destination.resumed',
      ]);
      for (const kind of response.body.data) {
        assert.equal(kind.object, 'event_kind');
        assert.ok(kind.description.length > 10);
      }
    });
  });

  describe(`rate limit (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine, { rateLimit: { limit: 3, windowMs: 60_000 } });
    });
    after(() => api.close());

    test('the fourth request in the window is 429 with retry-after; limits are per key', async () => {
      for (let index = 0; index < 3; index += 1) {
        const response = await api.request('GET', '/v1/webhooks');
        assert.equal(response.status, 200);
        assert.equal(response.headers.get('ratelimit-limit'), '3');
        assert.equal(response.headers.get('ratelimit-remaining'), String(2 - index));
        assert.ok(Number(response.headers.get('ratelimit-reset')) >= 1);
      }
      const limited = await api.request('GET', '/v1/webhooks');
      assert.equal(limited.status, 429);
      assert.equal(limited.body.error.code, 'rate_limited');
      assert.equal(limited.headers.get('ratelimit-remaining'), '0');
      const retryAfter = Number(limited.headers.get('retry-after'));
      assert.ok(retryAfter >= 1 && retryAfter <= 60, String(retryAfter));

      const other = await api.createProject();
      assert.equal((await api.request('GET', '/v1/webhooks', { key: other.key })).status, 200);
    });
  });

  describe(`idempotency (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    test('the same key and body replays the first response and creates once', async () => {
      const headers = { 'idempotency-key': 'create-hook-1' };
      const first = await api.request('POST', '/v1/webhooks', { body: hook, headers });
      assert.equal(first.status, 201);
      assert.equal(first.headers.get('idempotent-replayed'), null);
      const counts = await api.rowCounts();
      const second = await api.request('POST', '/v1/webhooks', { body: hook, headers });
      assert.equal(second.status, 201);
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(second.body, first.body);
      assert.deepEqual(await api.rowCounts(), counts);
    });

    test('the same key with another body is 422 and creates nothing', async () => {
      const headers = { 'idempotency-key': 'create-hook-2' };
      assert.equal((await api.request('POST', '/v1/webhooks', { body: hook, headers })).status, 201);
      const counts = await api.rowCounts();
      const other = await api.request('POST', '/v1/webhooks', {
        body: { ...hook, url: 'https://hooks.example.com/other' },
        headers,
      });
      assert.equal(other.status, 422);
      assert.equal(other.body.error.code, 'idempotency_key_reused');
      assert.deepEqual(await api.rowCounts(), counts);
    });

    test('keys are per project, a refused body stores no result, and other keys create again', async () => {
      const headers = { 'idempotency-key': 'shared-key' };
      const invalid = await api.request('POST', '/v1/webhooks', {
        body: { url: 'https://hooks.example.com/h' },
        headers,
      });
      assert.equal(invalid.status, 422);
      const fixed = await api.request('POST', '/v1/webhooks', { body: hook, headers });
      assert.equal(fixed.status, 201, 'a request the schema refused did not use up the key');
      const other = await api.createProject();
      const theirs = await api.request('POST', '/v1/webhooks', { body: hook, headers, key: other.key });
      assert.equal(theirs.status, 201);
      assert.equal(theirs.headers.get('idempotent-replayed'), null);
      assert.notEqual(theirs.body.data.id, fixed.body.data.id);
      const fresh = await api.request('POST', '/v1/webhooks', {
        body: hook,
        headers: { 'idempotency-key': 'another' },
      });
      assert.notEqual(fresh.body.data.id, fixed.body.data.id);
    });

    test('a key an older version left without an answer is taken over at once', async () => {
      const body = { url: 'https://hooks.example.com/abandoned', events: ['email.sent'] };
      const stuck = async (key: string, ageMs: number) =>
        api.database.handle.db
          .insertInto('idempotency_keys')
          .values({
            project_id: api.projectId,
            key,
            // What the server hashes: the validated body, with the schema's default for `enabled` filled in.
            request_hash: sha256Hex(`POST /v1/webhooks\n${JSON.stringify({ ...body, enabled: true })}`),
            status_code: null,
            response_body: null,
            created_at: new Date(Date.now() - ageMs).toISOString(),
          })
          .execute();
      await stuck('crashed-mid-request', 10_000);
      const retried = await api.request('POST', '/v1/webhooks', {
        body,
        headers: { 'idempotency-key': 'crashed-mid-request' },
      });
      assert.equal(retried.status, 201);
      assert.equal(retried.headers.get('idempotent-replayed'), null);
      const replayed = await api.request('POST', '/v1/webhooks', {
        body,
        headers: { 'idempotency-key': 'crashed-mid-request' },
      });
      assert.deepEqual(replayed.body, retried.body, 'the retry now owns the key');
      assert.equal(replayed.headers.get('idempotent-replayed'), 'true');
    });

    test('parallel requests with one key create once; the others get its answer', async () => {
      const counts = await api.rowCounts();
      const headers = { 'idempotency-key': 'parallel-key' };
      const answers = await Promise.all(
        Array.from({ length: 5 }, () => api.request('POST', '/v1/webhooks', { body: hook, headers })),
      );
      assert.deepEqual(
        answers.map((answer) => answer.status),
        [201, 201, 201, 201, 201],
      );
      assert.equal(answers.filter((answer) => answer.headers.get('idempotent-replayed') === null).length, 1);
      assert.equal(new Set(answers.map((answer) => answer.body.data.id)).size, 1);
      assert.deepEqual(await api.rowCounts(), { ...counts, webhooks: counts.webhooks! + 1 });
    });

    test('a refusal by the service rolls its work back and is replayed as the answer', async () => {
      const headers = { 'idempotency-key': 'refused-key' };
      const body = { url: 'https://127.0.0.1/private', events: ['email.sent'] };
      const counts = await api.rowCounts();
      const refused = await api.request('POST', '/v1/webhooks', { body, headers });
      assert.equal(refused.status, 422);
      const again = await api.request('POST', '/v1/webhooks', { body, headers });
      assert.equal(again.status, 422);
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(again.body, refused.body);
      assert.deepEqual(await api.rowCounts(), counts);
    });

    test('an over-long key is 422', async () => {
      const response = await api.request('POST', '/v1/webhooks', {
        body: hook,
        headers: { 'idempotency-key': 'k'.repeat(256) },
      });
      assert.equal(response.status, 422);
      assert.equal(response.body.error.param, 'Idempotency-Key');
    });
  });
}
