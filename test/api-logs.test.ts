import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import { loadConfig } from '../src/config.ts';
import { createApiLogRecorder, type ApiLogEntry, Excerpt } from '../src/modules/logs/log-recorder.ts';
import { excerptOf, excerptOfAnswer, REDACTED } from '../src/modules/logs/log-excerpt.ts';
import type { ApiLogRow } from '../src/modules/logs/logs.repo.ts';
import { createRetention } from '../src/modules/retention/retention.ts';
import { systemClock } from '../src/lib/clock.ts';
import { newId } from '../src/lib/ids.ts';
import { assertApiError, assertResendError, dataOf } from './helpers/answers.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// The API requests each key makes (issue 39): recorded after their answers, in batches; listed at GET /v1/logs
// and by the resend SDK's `logs`; excerpts of bodies bounded, secrets never stored; pruned by age and count.

const DAY = 86_400_000;
const from = 'Shop <shop@example.com>';
// A body of realistic mail: many lines, Unicode, html.
const receipt = {
  from,
  to: ['ada@example.org'],
  subject: 'Ihre Quittung — Nr. 42 ✓',
  html: '<h1>Danke, Ada!</h1>\n<p>Grüße aus Zürich.</p>\n<p>Betrag: <b>12,50 €</b></p>',
  text: 'Danke, Ada!\nGrüße aus Zürich.\nBetrag: 12,50 €',
};

const SUMMARY_KEYS = [
  'api_key_id',
  'created_at',
  'duration_ms',
  'id',
  'method',
  'object',
  'path',
  'status',
  'user_agent',
];

for (const engine of ALL_ENGINES) {
  describe(`API logs (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true });
    });
    after(() => api.close());

    const keyWith = async (permission: string) => {
      const made = await api.request('POST', '/v1/api-keys', { body: { name: permission, permission } });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      return made.body as { id: string; token: string };
    };
    /** The logs as stored, newest first, read without a request (which would add one). */
    const stored = async (projectId = api.projectId) => {
      await api.services.apiLogs.recorder.flush();
      const ids = await api.database.handle.db
        .selectFrom('api_logs')
        .select('id')
        .where('project_id', '=', projectId)
        .orderBy('id', 'desc')
        .execute();
      // Through the repository: an answer several logs share is stored once, and read into each.
      const { apiLogs } = api.services.repositories;
      return Promise.all(ids.map(async ({ id }) => (await apiLogs.get(projectId, id))!));
    };
    const answersStored = (projectId = api.projectId) =>
      api.database.handle.db
        .selectFrom('api_log_answers')
        .selectAll()
        .where('project_id', '=', projectId)
        .execute();

    test('GET /v1/logs lists each request of a key, newest first; a log has excerpts of both bodies', async () => {
      const agent = { 'user-agent': 'billing-service/2.1 (+https://acme.example)' };
      const sent = await api.request('POST', '/v1/emails', { body: receipt, headers: agent });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const listed = await api.request('GET', '/v1/emails?limit=1&after=msg_01jdzzzzzzzzzzzzzzzzzzzzzz', {
        headers: agent,
      });
      assert.equal(listed.status, 200);
      const refused = await api.request('POST', '/v1/emails', { body: { ...receipt, to: [] } });
      assert.equal(refused.status, 422);
      const webhook = await api.request('POST', '/v1/webhooks', {
        body: {
          url: 'http://127.0.0.1:9/hooks',
          events: ['email.sent'],
          secret: 'whsec_c2VjcmV0LXNpZ25pbmcta2V5LTEyMzQ1Njc4OTA=',
        },
      });
      assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
      const key = await keyWith('read_only');
      // Without a valid key, nobody's request: not logged.
      assert.equal((await api.request('GET', '/v1/emails', { key: 'pw_not-a-key' })).status, 401);

      const page = await api.request('GET', '/v1/logs?limit=5');
      assert.equal(page.status, 200);
      assert.equal(page.body.object, 'list');
      assert.equal(page.body.has_more, false);
      const rows = page.body.data as Array<Record<string, unknown>>;
      assert.deepEqual(
        rows.map((log) => [log.method, log.path, log.status]),
        [
          ['POST', '/v1/api-keys', 201],
          ['POST', '/v1/webhooks', 201],
          ['POST', '/v1/emails', 422],
          // The query (cursors, anything a client puts there) is not kept.
          ['GET', '/v1/emails', 200],
          ['POST', '/v1/emails', 202],
        ],
      );
      for (const log of rows) {
        assert.deepEqual(Object.keys(log).sort(), SUMMARY_KEYS);
        assert.equal(log.object, 'log');
        assert.match(String(log.id), /^log_/);
        assert.equal(log.api_key_id, api.services.projects && rows[0]!.api_key_id);
        assert.ok(typeof log.duration_ms === 'number' && log.duration_ms > 0, String(log.duration_ms));
        assert.match(String(log.created_at), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      }
      assert.equal(rows[4]!.user_agent, agent['user-agent']);
      assert.match(String(rows[4]!.api_key_id), /^key_/);

      const sendLog = await api.request('GET', `/v1/logs/${String(rows[4]!.id)}`);
      assert.equal(sendLog.status, 200);
      assert.deepEqual(sendLog.body, {
        ...rows[4],
        request_body: receipt,
        response_body: sent.body,
      });
      const refusedLog = (await api.request('GET', `/v1/logs/${String(rows[2]!.id)}`)).body;
      assert.equal(refusedLog.response_body.error.code, refused.body.error.code);
      assert.equal(refusedLog.response_body.error.message, refused.body.error.message);
      // GET has no body.
      assert.equal((await api.request('GET', `/v1/logs/${String(rows[3]!.id)}`)).body.request_body, null);

      // Secrets are never stored: the webhook's secret, the new key.
      const webhookLog = (await api.request('GET', `/v1/logs/${String(rows[1]!.id)}`)).body;
      assert.equal(webhookLog.request_body.secret, REDACTED);
      assert.equal(webhookLog.request_body.url, 'http://127.0.0.1:9/hooks');
      assert.equal(webhookLog.response_body.data.has_secret, true);
      const keyLog = (await api.request('GET', `/v1/logs/${String(rows[0]!.id)}`)).body;
      assert.equal(keyLog.response_body.token, REDACTED);
      assert.equal(keyLog.response_body.id, key.id);
      const everything = JSON.stringify(await stored());
      assert.ok(!everything.includes(key.token), 'the key is not stored');
      assert.ok(!everything.includes('c2VjcmV0LXNpZ25pbmcta2V5'), 'the secret is not stored');
    });

    test('a list of webhooks, sent as bytes kept from its first answer, is logged with its answer', async () => {
      const first = await api.request('GET', '/v1/webhooks');
      const again = await api.request('GET', '/v1/webhooks');
      assert.equal(again.status, 200);
      assert.deepEqual(again.body, first.body);
      const [newest, before] = await stored();
      for (const row of [newest!, before!]) {
        assert.equal(row.path, '/v1/webhooks');
        assert.deepEqual(JSON.parse(row.response_body!), first.body);
        const shown = await api.request('GET', `/v1/logs/${row.id}`);
        assert.deepEqual(shown.body.response_body, first.body);
      }
      // The same answer in a batch is stored once, and once again for a later batch's (not a copy per log).
      for (let i = 0; i < 3; i += 1) assert.equal((await api.request('GET', '/v1/webhooks')).status, 200);
      const reads = (await stored()).filter((row) => row.method === 'GET' && row.path === '/v1/webhooks');
      assert.equal(reads.length, 5);
      for (const row of reads) assert.deepEqual(JSON.parse(row.response_body!), first.body);
      const answers = await answersStored();
      assert.equal(answers.length, 1);
      assert.deepEqual(JSON.parse(answers[0]!.body), first.body);
      const naming = await api.database.handle.db
        .selectFrom('api_logs')
        .select(['response_body', 'response_answer_id'])
        .where('project_id', '=', api.projectId)
        .where('path', '=', '/v1/webhooks')
        .where('method', '=', 'GET')
        .execute();
      assert.deepEqual(
        naming.map((row) => [row.response_body, row.response_answer_id]),
        naming.map(() => [null, answers[0]!.id]),
      );
    });

    test('a batch stores each log as given: one answer repeated, bodies absent, escapes, text beyond ASCII', async () => {
      const { apiLogs } = api.services.repositories;
      const page = JSON.stringify({ object: 'list', data: [{ url: 'https://example.com/"quoted"\\path' }] });
      const body = JSON.stringify({ subject: 'Grüße — \u2713 😀 "q" \\ \n\t', html: '<p>\u0001</p>' });
      const row = (n: number, fields: Partial<ApiLogRow>): ApiLogRow => ({
        id: newId('log'),
        project_id: api.projectId,
        api_key_id: 'key_batch',
        method: 'GET',
        path: '/v1/webhooks',
        status: 200,
        duration_us: 1234 + n,
        user_agent: 'bench/1',
        created_at: new Date(Date.UTC(2026, 10, 29, 7, 0, n)).toISOString(),
        request_body: null,
        response_body: page,
        response_answer_id: null,
        ...fields,
      });
      const rows = [
        row(1, {}),
        // The same answer again, and an equal one made apart (another string).
        row(2, { status: 304 }),
        row(3, { response_body: JSON.parse(JSON.stringify({ page })).page }),
        row(4, { method: 'POST', path: '/v1/emails', request_body: body, response_body: '{"id":"msg_1"}' }),
        row(5, { request_body: body, response_body: null, user_agent: null }),
        // A lone surrogate is stored as U+FFFD, as a text parameter always took it.
        row(6, { user_agent: 'odd \ud800 agent', response_body: page }),
      ];
      await apiLogs.insertMany(rows);
      for (const { response_answer_id: _, ...expected } of rows) {
        const got = await apiLogs.get(api.projectId, expected.id);
        assert.deepEqual(
          { ...got, status: Number(got?.status), duration_us: Number(got?.duration_us) },
          { ...expected, user_agent: expected.user_agent?.replace('\ud800', '\ufffd') ?? null },
        );
      }
    });

    test('a large body leaves an excerpt of at most 2 KiB, valid JSON, saying what it left out', async () => {
      const lines = Array.from({ length: 2000 }, (_, i) => `<p>Zeile ${i}: Grüße, ✓ "quoted" \\ ok</p>`);
      const body = { ...receipt, html: lines.join('\n'), tags: [{ name: 'kind', value: 'receipt' }] };
      const sent = await api.request('POST', '/v1/emails', { body });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const [row] = await stored();
      assert.ok(Buffer.byteLength(row!.request_body!) <= 2048, String(Buffer.byteLength(row!.request_body!)));
      const excerpt = JSON.parse(row!.request_body!);
      assert.equal(excerpt.from, from);
      assert.ok(body.html.startsWith(excerpt.html.replace(/…\(\d+ more chars\)$/, '')));
      assert.match(excerpt.html, /…\(\d+ more chars\)$/);
      assert.ok(excerpt.html.length < body.html.length);
    });

    test('read_only keys read the logs; sending keys cannot; another project sees none of them', async () => {
      const [newest] = await stored();
      const reader = await keyWith('read_only');
      assert.equal((await api.request('GET', '/v1/logs', { key: reader.token })).status, 200);
      const sender = await keyWith('sending_access');
      assertApiError(
        await api.request('GET', '/v1/logs', { key: sender.token }),
        403,
        'insufficient_permission',
        'This route needs a read_only key (or a full_access key); this key is sending_access.',
      );
      const other = await api.createProject('Elsewhere');
      const theirs = await api.request('GET', '/v1/logs', { key: other.key });
      assert.deepEqual(theirs.body.data, []);
      assertApiError(
        await api.request('GET', `/v1/logs/${newest!.id}`, { key: other.key }),
        404,
        'resource_missing',
        `No log with id '${newest!.id}'.`,
        'id',
      );
      // Their own request is theirs.
      const again = await api.request('GET', '/v1/logs', { key: other.key });
      assert.deepEqual(
        again.body.data.map((log: { path: string; status: number }) => [log.path, log.status]),
        [
          ['/v1/logs/' + newest!.id, 404],
          ['/v1/logs', 200],
        ],
      );
      assertApiError(
        await api.request('GET', '/v1/logs/not-a-log'),
        404,
        'resource_missing',
        "No log with id 'not-a-log'.",
        'id',
      );
      assertApiError(
        await api.request('GET', '/v1/logs?after=msg_1'),
        422,
        'parameter_invalid',
        'after must be an id from this list (log_…).',
        'after',
      );
    });

    test("the resend SDK's logs.list and logs.get: Resend's shapes, the body the SDK sent; errors", async () => {
      const resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend`, userAgent: 'acme-app/3.0' });
      const { id } = dataOf(
        await resend.emails.send({
          from,
          to: 'ada@example.org',
          subject: receipt.subject,
          html: receipt.html,
          replyTo: 'support@example.com',
          tags: [{ name: 'kind', value: 'receipt' }],
        }),
      );
      const listed = dataOf(await resend.logs.list({ limit: 2 }));
      assert.equal(listed.object, 'list');
      assert.equal(listed.has_more, true);
      const [log] = listed.data;
      assert.deepEqual(log, {
        id: log!.id,
        created_at: log!.created_at,
        endpoint: '/emails',
        method: 'POST',
        response_status: 200,
        user_agent: 'acme-app/3.0',
      });
      const got = dataOf(await resend.logs.get(log!.id));
      assert.deepEqual(got, {
        object: 'log',
        ...log!,
        // What the SDK sent, in Resend's names (not Postwire's translation of it).
        request_body: {
          from,
          to: 'ada@example.org',
          subject: receipt.subject,
          html: receipt.html,
          reply_to: 'support@example.com',
          tags: [{ name: 'kind', value: 'receipt' }],
        },
        response_body: { id },
      });
      // /v1's requests are in the same log, under their own path (the test before's last request).
      const page = dataOf(await resend.logs.list({ limit: 1, after: log!.id }));
      assert.deepEqual(
        page.data.map((item) => [item.method, item.endpoint, item.response_status]),
        [['GET', '/v1/logs', 422]],
      );
      // And the SDK's own calls to the logs, under Resend's path.
      const latest = dataOf(await resend.logs.list({ limit: 1 }));
      assert.deepEqual(
        latest.data.map((item) => [item.method, item.endpoint, item.response_status]),
        [['GET', '/logs', 200]],
      );

      assertResendError(await resend.logs.get('log_nope'), 404, 'not_found', "No log with id 'log_nope'.");
      const sender = await keyWith('sending_access');
      const sending = new Resend(sender.token, { baseUrl: `${api.baseUrl}/resend` });
      assertResendError(
        await sending.logs.list(),
        403,
        'restricted_api_key',
        'This route needs a read_only key (or a full_access key); this key is sending_access.',
      );
      const other = await api.createProject('Resend elsewhere');
      const stranger = new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` });
      assertResendError(await stranger.logs.get(log!.id), 404, 'not_found', `No log with id '${log!.id}'.`);
    });

    test('pruned by API_LOG_RETENTION and API_LOG_MAX_ROWS, per project, even with RETENTION off', async () => {
      const other = await api.createProject('Few');
      for (let i = 0; i < 3; i += 1) await api.request('GET', '/v1/emails', { key: other.key });
      const mine = await stored();
      const theirs = await stored(other.projectId);
      assert.ok(mine.length > 5);
      assert.equal(theirs.length, 3);

      const capped = createRetention({
        repositories: api.services.repositories,
        clock: systemClock,
        retentionMs: undefined,
        apiLogs: { retentionMs: 7 * DAY, maxRows: 2 },
        batchSize: 2,
      });
      // Every project's logs past its newest 2 (this suite's other projects have a few too).
      const perProject = await api.database.handle.db
        .selectFrom('api_logs')
        .select((eb) => eb.fn.countAll<number | string>().as('n'))
        .groupBy('project_id')
        .execute();
      const over = perProject.reduce((sum, { n }) => sum + Math.max(0, Number(n) - 2), 0);
      assert.ok(over >= mine.length - 2 + 1);
      assert.deepEqual(await capped.dryRun(), [
        { table: 'api_logs', rows: 0 },
        { table: 'api_logs (over API_LOG_MAX_ROWS)', rows: over },
        // The answers logs share stay while a log names them, and for a while after.
        { table: 'api_log_answers', rows: 0 },
      ]);
      await capped.prune();
      assert.deepEqual(
        (await stored()).map((row) => row.id),
        mine.slice(0, 2).map((row) => row.id),
      );
      assert.deepEqual(
        (await stored(other.projectId)).map((row) => row.id),
        theirs.slice(0, 2).map((row) => row.id),
      );

      const aged = createRetention({
        repositories: api.services.repositories,
        clock: { now: () => new Date(Date.now() + 8 * DAY) },
        retentionMs: undefined,
        apiLogs: { retentionMs: 7 * DAY, maxRows: 10_000 },
      });
      assert.equal((await answersStored()).length, 1);
      await aged.prune();
      assert.deepEqual(await stored(), []);
      assert.deepEqual(await stored(other.projectId), []);
      assert.deepEqual(await answersStored(), []);
    });
  });
}

describe('API logs: settings, batches and excerpts', () => {
  test('API_LOG_RETENTION and API_LOG_MAX_ROWS: defaults and bounds', () => {
    assert.equal(loadConfig({}).apiLogRetentionMs, 7 * DAY);
    assert.equal(loadConfig({}).apiLogMaxRows, 10_000);
    assert.equal(loadConfig({ API_LOG_RETENTION: '2d', API_LOG_MAX_ROWS: '0' }).apiLogMaxRows, 0);
    assert.throws(() => loadConfig({ API_LOG_RETENTION: '10m' }), /API_LOG_RETENTION must be from 1h/);
    assert.throws(() => loadConfig({ API_LOG_MAX_ROWS: '-1' }), /API_LOG_MAX_ROWS must be an integer/);
  });

  const entry = (i: number): ApiLogEntry => ({
    projectId: 'proj_1',
    keyId: 'key_1',
    method: 'POST',
    path: `/v1/emails/${i}`,
    status: 202,
    durationMs: 1.25,
    at: new Date(Date.UTC(2026, 10, 28, 12, 0, i)),
    userAgent: 'x'.repeat(600),
    requestBody: { i },
    responseBody: JSON.stringify({ id: `msg_${i}` }),
  });

  test('logs wait in memory and are written a batch per INSERT: when the batch fills, or on flush', async () => {
    const inserts: ApiLogRow[][] = [];
    const recorder = createApiLogRecorder({
      repo: { insertMany: async (rows) => void inserts.push([...rows]) },
      // No timer fires during the test: the batch size and flush() decide.
      writing: { flushMs: 3_600_000, maxBatch: 3, maxPending: 5 },
    });
    recorder.record(entry(1));
    recorder.record(entry(2));
    assert.equal(inserts.length, 0, 'nothing written while the batch is not full');
    recorder.record(entry(3));
    await recorder.flush();
    assert.deepEqual(
      inserts.map((batch) => batch.map((row) => row.path)),
      [['/v1/emails/1', '/v1/emails/2', '/v1/emails/3']],
    );
    const [first] = inserts[0]!;
    assert.deepEqual(
      { ...first!, id: 'x' },
      {
        id: 'x',
        project_id: 'proj_1',
        api_key_id: 'key_1',
        method: 'POST',
        path: '/v1/emails/1',
        status: 202,
        duration_us: 1250,
        user_agent: 'x'.repeat(512),
        request_body: '{"i":1}',
        response_body: '{"id":"msg_1"}',
        created_at: '2026-11-28T12:00:01.000Z',
        response_answer_id: null,
      },
    );
    recorder.record(entry(4));
    await recorder.flush();
    assert.deepEqual(
      inserts.at(-1)!.map((row) => row.path),
      ['/v1/emails/4'],
    );

    // A body of megabytes is excerpted when it is logged: the batch holds 2 KiB, not the body, until written.
    const html = '<p>Grüße ✓</p>\n'.repeat(40_000);
    const large: ApiLogEntry = { ...entry(5), requestBody: { html }, requestBytes: html.length + 12 };
    const answer = JSON.stringify({ data: Array.from({ length: 20_000 }, (_, i) => ({ id: `msg_${i}` })) });
    large.responseBody = answer;
    recorder.record(large);
    const excerpted = (body: unknown) => body instanceof Excerpt;
    assert.ok(excerpted(large.requestBody) && excerpted(large.responseBody));
    await recorder.flush();
    const [kept] = inserts.at(-1)!;
    assert.ok(Buffer.byteLength(kept!.request_body!) <= 2048);
    assert.match(JSON.parse(kept!.request_body!).html, /^<p>Grüße ✓<\/p>\n.*…\(\d+ more chars\)$/s);
    // The answer's first 1.5 KiB, as sent, and how much of it is left out.
    const answerBytes = Buffer.byteLength(kept!.response_body!);
    assert.ok(answerBytes <= 1536 && answerBytes > 1400, String(answerBytes));
    const { data } = JSON.parse(kept!.response_body!) as { data: unknown[] };
    assert.deepEqual(data.slice(0, 3), [{ id: 'msg_0' }, { id: 'msg_1' }, { id: 'msg_2' }]);
    assert.match(String(data.at(-1)), /^…\(\d+ more chars\)$/);

    // A database that does not take them: the batch is told of and dropped, later logs still go.
    const failing = createApiLogRecorder({
      repo: {
        insertMany: async () => {
          throw new Error('database is gone');
        },
      },
      writing: { flushMs: 3_600_000 },
    });
    const told: string[] = [];
    failing.logTo({ info() {}, warn() {}, error: (_o, message) => void told.push(message) });
    failing.record(entry(5));
    await failing.flush();
    assert.deepEqual(told, ['API logs: a batch could not be written']);
  });

  test('logs that arrive while a batch is written wait for their own batch to fill, not for the write to end', async () => {
    const inserts: string[][] = [];
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let first = true;
    const recorder = createApiLogRecorder({
      repo: {
        insertMany: async (rows) => {
          inserts.push(rows.map((row) => row.path));
          if (first) {
            first = false;
            await held;
          }
        },
      },
      writing: { flushMs: 3_600_000, maxBatch: 3, maxPending: 50 },
    });
    for (const i of [1, 2, 3]) recorder.record(entry(i));
    // The full batch goes in a turn of its own; two more logs come while it is written.
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(inserts, [['/v1/emails/1', '/v1/emails/2', '/v1/emails/3']]);
    recorder.record(entry(4));
    recorder.record(entry(5));
    release();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(
      inserts.length,
      1,
      'the two logs wait for their batch (or the timer), not one statement each',
    );
    recorder.record(entry(6));
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(inserts.at(-1), ['/v1/emails/4', '/v1/emails/5', '/v1/emails/6']);
    recorder.record(entry(7));
    await recorder.flush();
    assert.deepEqual(inserts.at(-1), ['/v1/emails/7'], 'flush writes what is left');
    assert.equal(inserts.length, 3);
  });

  test('the timer writes the logs pending when it fires; those that arrive during that write wait for the next', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const inserts: string[][] = [];
    let release = () => {};
    const recorder = createApiLogRecorder({
      repo: {
        insertMany: async (rows) => {
          inserts.push(rows.map((row) => row.path));
          await new Promise<void>((resolve) => (release = resolve));
        },
      },
      writing: { flushMs: 100, maxBatch: 3, maxPending: 50 },
    });
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    recorder.record(entry(1));
    t.mock.timers.tick(99);
    await turn();
    assert.equal(inserts.length, 0);
    t.mock.timers.tick(1);
    await turn();
    assert.deepEqual(inserts, [['/v1/emails/1']]);
    recorder.record(entry(2));
    release();
    await turn();
    assert.equal(inserts.length, 1, 'the log that came during the write waits for the timer');
    t.mock.timers.tick(100);
    await turn();
    assert.deepEqual(inserts.at(-1), ['/v1/emails/2']);
    release();
    await recorder.flush();
    assert.equal(inserts.length, 2);
  });
  test('excerpts: secrets redacted at any depth, long values cut with a marker, never over the bound', () => {
    assert.equal(excerptOf(undefined, 2048), null);
    assert.deepEqual(
      JSON.parse(
        excerptOf(
          {
            webhook: { secret: 'whsec_x', Signing_Secret: 's', url: 'https://a.example' },
            headers: { Authorization: 'Bearer pw_x', 'X-Ref': 'r-1' },
            files: [{ download_url: 'https://x/resend/downloads?token=t' }],
            password: 'p',
            api_key: 'k',
            token: null,
          },
          2048,
        )!,
      ),
      {
        webhook: { secret: REDACTED, Signing_Secret: REDACTED, url: 'https://a.example' },
        headers: { Authorization: REDACTED, 'X-Ref': 'r-1' },
        files: [{ download_url: REDACTED }],
        password: REDACTED,
        api_key: REDACTED,
        token: null,
      },
    );
    const many = Array.from({ length: 1000 }, (_, i) => ({ email: `user${i}@example.org`, name: 'Zoë ✓' }));
    const cut = excerptOf({ data: many }, 2048)!;
    assert.ok(Buffer.byteLength(cut) <= 2048);
    const parsed = JSON.parse(cut) as { data: unknown[] };
    assert.match(String(parsed.data.at(-1)), /^…\(\d+ more items\)$/);
    assert.deepEqual(parsed.data[0], many[0]);
    // Characters of three bytes and escapes: still within the bound.
    const wide = excerptOf({ text: '✓"\n'.repeat(5000) }, 2048)!;
    assert.ok(Buffer.byteLength(wide) <= 2048, String(Buffer.byteLength(wide)));
    assert.equal(
      excerptOfAnswer('From: a@example.org\r\n\r\nHi', 2048),
      '"From: a@example.org\\r\\n\\r\\nHi"',
    );
    // An answer is cut from its text: a long string keeps its first 512 characters.
    assert.equal(
      excerptOfAnswer(`"${'x'.repeat(300_000)}"`, 2048),
      `"${'x'.repeat(512)}…(299488 more chars)"`,
    );
  });
});
