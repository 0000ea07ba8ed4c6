import assert from 'node:assert/strict';
import { isIPv6 } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';
import { createDns } from '../src/lib/dns.ts';
import type { Resolver } from '../src/lib/network-policy.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { WEBHOOK_KEYS } from './helpers/shapes.ts';
import { createWebhookRepo } from '../src/modules/webhooks/webhooks.repo.ts';

const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

// Host names a real DNS server (test/helpers/dns.ts) answers for, asked by the app's own resolver over the
// network (the DNS half of the private-address policy runs as in production); everything else is NXDOMAIN,
// as on a closed network.
const dns: Record<string, string[]> = {
  'hooks.example.com': ['93.184.216.34'],
  'loopback.example.com': ['127.0.0.1'],
  'internal.example.com': ['10.1.2.3'],
  'metadata.example.com': ['169.254.169.254'],
  'mapped.example.com': ['::ffff:127.0.0.1'],
  'translated.example.com': ['::ffff:0:10.1.2.3'],
  // A public address first: one bad address among several is enough to refuse.
  'nat64-local.example.com': ['93.184.216.34', '64:ff9b:1::a9fe:a9fe'],
  'site-local.example.com': ['fec0::5'],
};

let dnsServer: TestDnsServer;
let resolver: Resolver;
before(async () => {
  dnsServer = await startDnsServer();
  for (const [name, addresses] of Object.entries(dns)) {
    dnsServer.add(
      name,
      ...addresses.map((address) => ({
        type: isIPv6(address) ? ('AAAA' as const) : ('A' as const),
        address,
      })),
    );
  }
  resolver = createDns({ servers: [dnsServer.address] }).resolveAddresses;
});
after(() => dnsServer.close());

for (const engine of ALL_ENGINES) {
  describe(`webhooks (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine, { resolver: (host) => resolver(host) });
    });
    after(() => api.close());

    const create = (body: unknown, key?: string) =>
      api.request('POST', '/v1/webhooks', { body, ...(key ? { key } : {}) });

    test('the seed example: create returns the webhook in data, without its secret', async () => {
      const response = await create({
        url: 'https://hooks.example.com/postwire',
        secret: SECRET,
        enabled: true,
        events: ['email.sent', 'email.delivered', 'email.bounced'],
      });
      assert.equal(response.status, 201);
      assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(Object.keys(response.body), ['data']);
      const webhook = response.body.data;
      assert.deepEqual(Object.keys(webhook).sort(), [...WEBHOOK_KEYS].sort());
      assert.match(webhook.id, /^wh_[0-9a-z]{26}$/);
      assert.match(webhook.created_at, TIMESTAMP);
      assert.equal(webhook.updated_at, webhook.created_at);
      assert.deepEqual(
        { ...webhook, id: 'ID', created_at: 'T', updated_at: 'T' },
        {
          id: 'ID',
          url: 'https://hooks.example.com/postwire',
          enabled: true,
          events: ['email.sent', 'email.delivered', 'email.bounced'],
          format: 'postwire',
          created_at: 'T',
          updated_at: 'T',
          has_secret: true,
          ...(WEBHOOK_KEYS.includes('disabled_reason') ? { disabled_reason: null } : {}),
          ...(WEBHOOK_KEYS.includes('failing_since') ? { failing_since: null } : {}),
        },
      );
    });

    test('the secret is never answered and is encrypted at rest', async () => {
      const response = await create({
        url: 'https://hooks.example.com/s',
        secret: 'my plain secret, long',
        events: ['email.sent'],
      });
      assert.equal(response.status, 201);
      const id = response.body.data.id;
      const texts = [
        JSON.stringify(response.body),
        JSON.stringify((await api.request('GET', `/v1/webhooks/${id}`)).body),
        JSON.stringify((await api.request('GET', '/v1/webhooks')).body),
        JSON.stringify((await api.request('PATCH', `/v1/webhooks/${id}`, { body: { enabled: false } })).body),
      ];
      for (const text of texts) assert.ok(!text.includes('my plain secret'), text);
      const row = await api.database.handle.db
        .selectFrom('webhooks')
        .select('secret_sealed')
        .where('id', '=', id)
        .executeTakeFirstOrThrow();
      assert.ok(row.secret_sealed && !row.secret_sealed.includes('my plain secret'));
      assert.match(row.secret_sealed, /^v1\./);
    });

    test('enabled defaults to true, secret is optional, duplicate events are removed', async () => {
      const response = await create({
        url: 'https://hooks.example.com/d',
        events: ['email.sent', 'email.bounced', 'email.sent'],
      });
      assert.equal(response.status, 201);
      assert.equal(response.body.data.enabled, true);
      assert.equal(response.body.data.has_secret, false);
      assert.deepEqual(response.body.data.events, ['email.sent', 'email.bounced']);
    });

    test('a host that does not resolve yet is accepted (delivery checks again at connect time)', async () => {
      const response = await create({ url: 'https://not-yet-live.example.net/hook', events: ['email.sent'] });
      assert.equal(response.status, 201);
    });

    test('get, patch each field, secret null removes it, delete', async () => {
      const created = (
        await create({ url: 'https://hooks.example.com/p', events: ['email.sent'], enabled: true })
      ).body.data;

      const fetched = await api.request('GET', `/v1/webhooks/${created.id}`);
      assert.equal(fetched.status, 200);
      assert.deepEqual(fetched.body, { data: created });

      const disabled = await api.request('PATCH', `/v1/webhooks/${created.id}`, { body: { enabled: false } });
      assert.equal(disabled.status, 200);
      assert.equal(disabled.body.data.enabled, false);
      assert.equal(disabled.body.data.created_at, created.created_at);
      assert.ok(disabled.body.data.updated_at > created.updated_at, 'updated_at moves on a change');
      assert.deepEqual({ ...disabled.body.data, enabled: true, updated_at: created.updated_at }, created);

      const withSecret = await api.request('PATCH', `/v1/webhooks/${created.id}`, {
        body: { secret: 'rotated-secret-2026' },
      });
      assert.equal(withSecret.body.data.has_secret, true);
      assert.ok(withSecret.body.data.updated_at > disabled.body.data.updated_at);

      const moved = await api.request('PATCH', `/v1/webhooks/${created.id}`, {
        body: { url: 'https://hooks.example.com/new', events: ['email.bounced'], enabled: true },
      });
      assert.equal(moved.status, 200);
      assert.equal(moved.body.data.url, 'https://hooks.example.com/new');
      assert.deepEqual(moved.body.data.events, ['email.bounced']);
      assert.equal(moved.body.data.enabled, true);
      assert.equal(moved.body.data.has_secret, true, 'fields not sent stay as they were');

      const withoutSecret = await api.request('PATCH', `/v1/webhooks/${created.id}`, {
        body: { secret: null },
      });
      assert.equal(withoutSecret.body.data.has_secret, false);
      assert.equal((await api.request('GET', `/v1/webhooks/${created.id}`)).body.data.has_secret, false);

      const deleted = await api.request('DELETE', `/v1/webhooks/${created.id}`);
      assert.equal(deleted.status, 200);
      assert.deepEqual(deleted.body, { data: { id: created.id, deleted: true } });
      const gone = await api.request('GET', `/v1/webhooks/${created.id}`);
      assert.equal(gone.status, 404);
      assert.equal(gone.body.error.code, 'resource_missing');
      assert.equal((await api.request('DELETE', `/v1/webhooks/${created.id}`)).status, 404);
    });

    test('an update writes only what it changed, so a concurrent disable is not undone', async () => {
      const created = (await create({ url: 'https://hooks.example.com/race', events: ['email.sent'] })).body
        .data;
      const repo = createWebhookRepo(api.database.handle.db);
      const stale = (await repo.find(api.projectId, created.id))!;
      // The delivery worker disables it (a 410) after the PATCH read the row and before it writes.
      await api.database.handle.db
        .updateTable('webhooks')
        .set({ enabled: false, disabled_reason: 'The endpoint answered 410 Gone.' })
        .where('id', '=', created.id)
        .execute();
      await repo.update(stale, {
        ...stale,
        url: 'https://hooks.example.com/moved',
        updatedAt: new Date().toISOString(),
      });
      const after = (await api.request('GET', `/v1/webhooks/${created.id}`)).body.data;
      assert.equal(after.url, 'https://hooks.example.com/moved');
      assert.equal(after.enabled, false);
      assert.equal(after.disabled_reason, 'The endpoint answered 410 Gone.');
    });

    test('unknown and malformed ids are 404 on get, patch and delete', async () => {
      for (const id of ['wh_01m80709nxe009tv2hk8dxzf66', 'nope', 'tpl_01m80709nxe009tv2hk8dxzf66']) {
        for (const [method, body] of [
          ['GET', undefined],
          ['PATCH', { enabled: false }],
          ['DELETE', undefined],
        ] as const) {
          const response = await api.request(method, `/v1/webhooks/${id}`, body ? { body } : {});
          assert.equal(response.status, 404, `${method} ${id}`);
          assert.deepEqual(response.body, {
            error: {
              code: 'resource_missing',
              message: `No webhook with id '${id}'.`,
              param: 'id',
              request_id: response.headers.get('x-request-id'),
            },
          });
        }
      }
    });
  });

  describe(`webhooks list (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let ids: string[];
    before(async () => {
      api = await startTestApp(engine);
      ids = [];
      for (let index = 0; index < 5; index += 1) {
        const response = await api.request('POST', '/v1/webhooks', {
          body: { url: `https://hooks.example.com/${index}`, events: ['email.sent'] },
        });
        ids.push(response.body.data.id);
      }
      ids.reverse(); // newest first
    });
    after(() => api.close());

    test('the seed example: the list envelope, newest first', async () => {
      const response = await api.request('GET', '/v1/webhooks');
      assert.equal(response.status, 200);
      assert.deepEqual(Object.keys(response.body), ['object', 'data', 'has_more']);
      assert.equal(response.body.object, 'list');
      assert.equal(response.body.has_more, false);
      assert.deepEqual(
        response.body.data.map((webhook: any) => webhook.id),
        ids,
      );
      for (const webhook of response.body.data)
        assert.deepEqual(Object.keys(webhook).sort(), [...WEBHOOK_KEYS].sort());
    });

    test('limit, after and before page through it', async () => {
      const first = await api.request('GET', '/v1/webhooks?limit=2');
      assert.deepEqual(
        first.body.data.map((webhook: any) => webhook.id),
        ids.slice(0, 2),
      );
      assert.equal(first.body.has_more, true);
      const second = await api.request('GET', `/v1/webhooks?limit=2&after=${ids[1]}`);
      assert.deepEqual(
        second.body.data.map((webhook: any) => webhook.id),
        ids.slice(2, 4),
      );
      assert.equal(second.body.has_more, true);
      const last = await api.request('GET', `/v1/webhooks?limit=2&after=${ids[3]}`);
      assert.deepEqual(
        last.body.data.map((webhook: any) => webhook.id),
        ids.slice(4),
      );
      assert.equal(last.body.has_more, false);
      const back = await api.request('GET', `/v1/webhooks?limit=2&before=${ids[4]}`);
      assert.deepEqual(
        back.body.data.map((webhook: any) => webhook.id),
        ids.slice(2, 4),
      );
      assert.equal(back.body.has_more, true);
      const top = await api.request('GET', `/v1/webhooks?limit=2&before=${ids[2]}`);
      assert.deepEqual(
        top.body.data.map((webhook: any) => webhook.id),
        ids.slice(0, 2),
      );
      assert.equal(top.body.has_more, false);
    });

    test('a list read without parameters gets the defaults every time, around reads with them', async () => {
      // The empty query is validated once per route and its defaults kept (src/http/validation.ts): a read
      // with parameters between two without must not change what the next one without gets.
      const listed = (response: { body: any }) => response.body.data.map((webhook: any) => webhook.id);
      assert.deepEqual(listed(await api.request('GET', '/v1/webhooks')), ids);
      assert.deepEqual(listed(await api.request('GET', '/v1/webhooks?limit=2')), ids.slice(0, 2));
      assert.deepEqual(listed(await api.request('GET', `/v1/webhooks?after=${ids[0]}`)), ids.slice(1));
      for (let read = 0; read < 2; read += 1) {
        const again = await api.request('GET', '/v1/webhooks');
        assert.deepEqual(listed(again), ids);
        assert.equal(again.body.has_more, false);
      }
    });

    test('bad list parameters are 422 naming the parameter', async () => {
      for (const [query, param] of [
        ['limit=0', 'limit'],
        ['limit=101', 'limit'],
        ['limit=abc', 'limit'],
        ['limit=1.5', 'limit'],
        ['colour=red', 'colour'],
        [`after=${ids[0]}&before=${ids[1]}`, 'before'],
      ]) {
        const response = await api.request('GET', `/v1/webhooks?${query}`);
        assert.equal(response.status, 422, query);
        assert.equal(response.body.error.param, param, query);
        assert.match(response.body.error.code, /^parameter_(invalid|unknown)$/);
      }
    });

    test("another project's key sees none of these webhooks", async () => {
      const other = await api.createProject('Other');
      const list = await api.request('GET', '/v1/webhooks', { key: other.key });
      assert.deepEqual(list.body, { object: 'list', data: [], has_more: false });
      for (const [method, body] of [
        ['GET', undefined],
        ['PATCH', { enabled: false }],
        ['DELETE', undefined],
      ] as const) {
        const response = await api.request(method, `/v1/webhooks/${ids[0]}`, {
          key: other.key,
          ...(body ? { body } : {}),
        });
        assert.equal(response.status, 404, method);
      }
      const mine = await api.request('GET', `/v1/webhooks/${ids[0]}`);
      assert.equal(mine.body.data.enabled, true, "the other project's PATCH changed nothing");
    });
  });

  describe(`webhooks: bad input (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let existing: any;
    let countsBefore: Record<string, number>;
    before(async () => {
      api = await startTestApp(engine, { resolver: (host) => resolver(host) });
      existing = (
        await api.request('POST', '/v1/webhooks', {
          body: { url: 'https://hooks.example.com/x', events: ['email.sent'] },
        })
      ).body.data;
    });
    beforeEach(async () => {
      countsBefore = await api.rowCounts();
    });
    after(() => api.close());

    const valid = { url: 'https://hooks.example.com/hook', events: ['email.sent'] };

    async function expectRefused(
      method: string,
      path: string,
      body: unknown,
      status: number,
      code: string,
      param: string | undefined,
    ) {
      const response = await api.request(method, path, { body });
      assert.equal(response.status, status, `${JSON.stringify(body)} → ${JSON.stringify(response.body)}`);
      assert.equal(response.body.error.code, code, JSON.stringify(response.body));
      assert.equal(response.body.error.param, param, JSON.stringify(response.body));
      assert.equal(typeof response.body.error.message, 'string');
      assert.equal(response.body.error.request_id, response.headers.get('x-request-id'));
      assert.deepEqual(await api.rowCounts(), countsBefore, 'nothing stored');
      const unchanged = await api.request('GET', `/v1/webhooks/${existing.id}`);
      assert.deepEqual(unchanged.body.data, existing, 'the existing webhook is unchanged');
    }

    const cases: Array<[string, unknown, string, string | undefined]> = [
      ['url missing', { events: ['email.sent'] }, 'parameter_missing', 'url'],
      ['url not a string', { ...valid, url: 42 }, 'parameter_invalid', 'url'],
      ['url empty', { ...valid, url: '' }, 'parameter_invalid', 'url'],
      ['url not absolute', { ...valid, url: '/hooks' }, 'parameter_invalid', 'url'],
      [
        'url too long',
        { ...valid, url: `https://hooks.example.com/${'a'.repeat(2100)}` },
        'parameter_invalid',
        'url',
      ],
      ['url ftp', { ...valid, url: 'ftp://hooks.example.com/x' }, 'parameter_invalid', 'url'],
      ['url javascript', { ...valid, url: 'javascript:alert(1)' }, 'parameter_invalid', 'url'],
      ['url plain http', { ...valid, url: 'http://hooks.example.com/x' }, 'parameter_invalid', 'url'],
      ['url localhost', { ...valid, url: 'https://localhost/x' }, 'url_not_allowed', 'url'],
      ['url sub.localhost', { ...valid, url: 'https://api.localhost/x' }, 'url_not_allowed', 'url'],
      ['url 127.0.0.1', { ...valid, url: 'https://127.0.0.1/x' }, 'url_not_allowed', 'url'],
      ['url hex loopback', { ...valid, url: 'https://0x7f000001/x' }, 'url_not_allowed', 'url'],
      ['url decimal loopback', { ...valid, url: 'https://2130706433/x' }, 'url_not_allowed', 'url'],
      ['url [::1]', { ...valid, url: 'https://[::1]/x' }, 'url_not_allowed', 'url'],
      ['url mapped v6', { ...valid, url: 'https://[::ffff:127.0.0.1]/x' }, 'url_not_allowed', 'url'],
      ['url NAT64 loopback', { ...valid, url: 'https://[64:ff9b::127.0.0.1]/x' }, 'url_not_allowed', 'url'],
      [
        'url NAT64 hex metadata',
        { ...valid, url: 'https://[64:ff9b::a9fe:a9fe]/x' },
        'url_not_allowed',
        'url',
      ],
      ['url v4-compatible', { ...valid, url: 'https://[::127.0.0.1]/x' }, 'url_not_allowed', 'url'],
      [
        'url local-use NAT64 (RFC 8215)',
        { ...valid, url: 'https://[64:ff9b:1::a00:1]/x' },
        'url_not_allowed',
        'url',
      ],
      [
        'url local-use NAT64, public IPv4 inside',
        { ...valid, url: 'https://[64:ff9b:1:ffff:ffff::808:808]/x' },
        'url_not_allowed',
        'url',
      ],
      ['url site-local', { ...valid, url: 'https://[fec0::1]/x' }, 'url_not_allowed', 'url'],
      ['url site-local, end', { ...valid, url: 'https://[feff:ffff::1]/x' }, 'url_not_allowed', 'url'],
      ['url 6to4 private', { ...valid, url: 'https://[2002:a00:1::]/x' }, 'url_not_allowed', 'url'],
      [
        'url IPv4-translated loopback',
        { ...valid, url: 'https://[::ffff:0:127.0.0.1]/x' },
        'url_not_allowed',
        'url',
      ],
      [
        'url IPv4-translated private, in hex',
        { ...valid, url: 'https://[::ffff:0:a00:1]/x' },
        'url_not_allowed',
        'url',
      ],
      ['url port 0', { ...valid, url: 'https://hooks.example.com:0/x' }, 'parameter_invalid', 'url'],
      [
        'url with user:password',
        { ...valid, url: 'https://ada:s3cret@hooks.example.com/x' },
        'parameter_invalid',
        'url',
      ],
      [
        'url with a user name',
        { ...valid, url: 'https://ada@hooks.example.com/x' },
        'parameter_invalid',
        'url',
      ],
      [
        'url resolving to local-use NAT64',
        { ...valid, url: 'https://nat64-local.example.com/x' },
        'url_not_allowed',
        'url',
      ],
      [
        'url resolving to site-local',
        { ...valid, url: 'https://site-local.example.com/x' },
        'url_not_allowed',
        'url',
      ],
      [
        'url resolving translated',
        { ...valid, url: 'https://translated.example.com/x' },
        'url_not_allowed',
        'url',
      ],
      [
        'url metadata',
        { ...valid, url: 'https://169.254.169.254/latest/meta-data' },
        'url_not_allowed',
        'url',
      ],
      ['url private 10/8', { ...valid, url: 'https://10.0.0.5/x' }, 'url_not_allowed', 'url'],
      ['url private 192.168', { ...valid, url: 'https://192.168.1.1/x' }, 'url_not_allowed', 'url'],
      ['url 0.0.0.0', { ...valid, url: 'https://0.0.0.0/x' }, 'url_not_allowed', 'url'],
      [
        'url resolving private',
        { ...valid, url: 'https://internal.example.com/x' },
        'url_not_allowed',
        'url',
      ],
      [
        'url resolving to 127.0.0.1',
        { ...valid, url: 'https://loopback.example.com/x' },
        'url_not_allowed',
        'url',
      ],
      [
        'url resolving metadata',
        { ...valid, url: 'https://metadata.example.com/x' },
        'url_not_allowed',
        'url',
      ],
      ['url resolving mapped', { ...valid, url: 'https://mapped.example.com/x' }, 'url_not_allowed', 'url'],
      ['events missing', { url: valid.url }, 'parameter_missing', 'events'],
      ['events empty', { ...valid, events: [] }, 'parameter_invalid', 'events'],
      ['events not an array', { ...valid, events: 'email.sent' }, 'parameter_invalid', 'events'],
      ['events item not a string', { ...valid, events: ['email.sent', 7] }, 'parameter_invalid', 'events[1]'],
      [
        'events unknown kind',
        { ...valid, events: ['email.sent', 'email.exploded'] },
        'parameter_invalid',
        'events[1]',
      ],
      ['enabled as a string', { ...valid, enabled: 'true' }, 'parameter_invalid', 'enabled'],
      ['enabled null', { ...valid, enabled: null }, 'parameter_invalid', 'enabled'],
      ['secret not a string', { ...valid, secret: 12345 }, 'parameter_invalid', 'secret'],
      ['secret empty', { ...valid, secret: '' }, 'parameter_invalid', 'secret'],
      ['secret too long', { ...valid, secret: 'x'.repeat(513) }, 'parameter_invalid', 'secret'],
      ['secret bad whsec', { ...valid, secret: 'whsec_!!!not base64!!!' }, 'parameter_invalid', 'secret'],
      ['secret of one character', { ...valid, secret: 'x' }, 'parameter_invalid', 'secret'],
      ['secret of 15 characters', { ...valid, secret: 'x'.repeat(15) }, 'parameter_invalid', 'secret'],
      [
        'secret ending in CRLF',
        { ...valid, secret: 'a long enough secret\r\n' },
        'parameter_invalid',
        'secret',
      ],
      ['secret with a NUL', { ...valid, secret: 'a long enough\u0000secret' }, 'parameter_invalid', 'secret'],
      [
        'whsec of 16 bytes',
        { ...valid, secret: `whsec_${Buffer.alloc(16, 1).toString('base64')}` },
        'parameter_invalid',
        'secret',
      ],
      [
        'whsec of 65 bytes',
        { ...valid, secret: `whsec_${Buffer.alloc(65, 1).toString('base64')}` },
        'parameter_invalid',
        'secret',
      ],
      ['unknown field', { ...valid, colour: 'blue' }, 'parameter_unknown', 'colour'],
      ['id is not settable', { ...valid, id: 'wh_mine' }, 'parameter_unknown', 'id'],
      ['body an array', [valid], 'parameter_invalid', undefined],
      ['body a string', 'hello', 'parameter_invalid', undefined],
    ];

    for (const [name, body, code, param] of cases) {
      test(`POST: ${name} → 422 ${code}`, () =>
        expectRefused('POST', '/v1/webhooks', body, 422, code, param));
    }

    test('the secret and port rules say what they want', async () => {
      const messages: Array<[unknown, string]> = [
        [{ ...valid, secret: 'x'.repeat(15) }, 'A plain secret must be at least 16 characters.'],
        [
          { ...valid, secret: 'a long enough secret\r\n' },
          'A secret must not contain control characters (line breaks, tabs, NUL).',
        ],
        [
          { ...valid, secret: `whsec_${Buffer.alloc(16, 1).toString('base64')}` },
          'A whsec_ secret must hold 24 to 64 bytes of base64; it holds 16.',
        ],
        [{ ...valid, url: 'https://hooks.example.com:0/x' }, 'url must not use port 0.'],
        // A refused local receiver names the setting that allows it.
        [
          { ...valid, url: 'http://hooks.example.com/x' },
          'url must use https; to allow plain http (local development), the operator sets ' +
            'POSTWIRE_ALLOW_PRIVATE_URLS=true.',
        ],
        [
          { ...valid, url: 'https://127.0.0.1:4000/hooks' },
          'url is not allowed: 127.0.0.1 is a loopback, private or link-local address, which webhooks may not ' +
            'reach; to allow it (local development), the operator sets POSTWIRE_ALLOW_PRIVATE_URLS=true.',
        ],
        [
          { ...valid, url: 'https://ada:s3cret@hooks.example.com/x' },
          'url must not contain a user name or password (user:password@); the signing secret authenticates deliveries.',
        ],
      ];
      for (const [body, message] of messages) {
        const response = await api.request('POST', '/v1/webhooks', { body });
        assert.equal(response.body.error.message, message);
      }
    });

    const patchCases: Array<[string, unknown, string, string | undefined]> = [
      ['empty body', {}, 'parameter_missing', undefined],
      ['url localhost', { url: 'https://localhost/x' }, 'url_not_allowed', 'url'],
      ['url IPv4-translated', { url: 'https://[::ffff:0:127.0.0.1]/x' }, 'url_not_allowed', 'url'],
      ['secret too short', { secret: 'short-secret' }, 'parameter_invalid', 'secret'],
      ['secret with a line break', { secret: 'a long enough secret\n' }, 'parameter_invalid', 'secret'],
      ['url not a URL', { url: 'not a url' }, 'parameter_invalid', 'url'],
      [
        'url with user:password',
        { url: 'https://ada:s3cret@hooks.example.com/x' },
        'parameter_invalid',
        'url',
      ],
      ['events empty', { events: [] }, 'parameter_invalid', 'events'],
      ['events unknown kind', { events: ['nope'] }, 'parameter_invalid', 'events[0]'],
      ['enabled as a number', { enabled: 1 }, 'parameter_invalid', 'enabled'],
      ['secret a number', { secret: 1 }, 'parameter_invalid', 'secret'],
      ['unknown field', { enabled: true, created_at: 'now' }, 'parameter_unknown', 'created_at'],
      ['has_secret is read-only', { has_secret: false }, 'parameter_unknown', 'has_secret'],
    ];
    for (const [name, body, code, param] of patchCases) {
      test(`PATCH: ${name} → 422 ${code}`, () =>
        expectRefused('PATCH', `/v1/webhooks/${existing.id}`, body, 422, code, param));
    }

    test('malformed JSON is 400, not JSON is 415, over 1 MiB is 413; nothing stored', async () => {
      const attempts: Array<[string, string, Record<string, string>, number, string]> = [
        ['POST', '{"url": ', { 'content-type': 'application/json' }, 400, 'invalid_json'],
        ['POST', '', { 'content-type': 'application/json' }, 400, 'invalid_json'],
        ['PATCH', '{enabled: false}', { 'content-type': 'application/json' }, 400, 'invalid_json'],
        [
          'POST',
          'url=https://x',
          { 'content-type': 'application/x-www-form-urlencoded' },
          415,
          'unsupported_media_type',
        ],
        ['POST', JSON.stringify(valid), { 'content-type': 'text/plain' }, 415, 'unsupported_media_type'],
        [
          'POST',
          JSON.stringify({ ...valid, secret: 'x'.repeat(1024 * 1024) }),
          { 'content-type': 'application/json' },
          413,
          'body_too_large',
        ],
      ];
      const noContentType = await api.request('POST', '/v1/webhooks', {
        rawBody: new TextEncoder().encode(JSON.stringify(valid)),
      });
      assert.equal(noContentType.status, 415);
      assert.equal(noContentType.body.error.code, 'unsupported_media_type');
      for (const [method, rawBody, headers, status, code] of attempts) {
        const path = method === 'POST' ? '/v1/webhooks' : `/v1/webhooks/${existing.id}`;
        const response = await api.request(method, path, { rawBody, headers });
        assert.equal(response.status, status, `${method} ${rawBody.slice(0, 40)}`);
        assert.equal(response.body.error.code, code);
        assert.equal(response.body.error.request_id, response.headers.get('x-request-id'));
      }
      assert.deepEqual(await api.rowCounts(), countsBefore);
    });

    test('http and private hosts are accepted when the operator allows private URLs', async () => {
      const open = await startTestApp(engine, { allowPrivateUrls: true });
      try {
        for (const url of ['http://127.0.0.1:8080/hook', 'https://localhost/x', 'http://10.0.0.5/x']) {
          const response = await open.request('POST', '/v1/webhooks', {
            body: { url, events: ['email.sent'] },
          });
          assert.equal(response.status, 201, url);
          assert.equal(response.body.data.url, url);
        }
        const ftp = await open.request('POST', '/v1/webhooks', {
          body: { url: 'ftp://x/y', events: ['email.sent'] },
        });
        assert.equal(ftp.status, 422, 'only http(s) even then');
      } finally {
        await open.close();
      }
    });
  });
}
