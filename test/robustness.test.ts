import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// Odd inputs of every kind, sent to every route: whatever they are, the answer is a 4xx (or a success
// where the input happens to be acceptable), never a 500.
const bodies: Array<[string, string]> = [
  ['null', 'null'],
  ['a number', '123'],
  ['a string', '"hello"'],
  ['an array', '[1,2,3]'],
  ['proto pollution', '{"__proto__":{"polluted":true}}'],
  ['constructor pollution', '{"constructor":{"prototype":{"polluted":true}}}'],
  ['deep nesting', `${'{"a":'.repeat(2000)}1${'}'.repeat(2000)}`],
  ['lone surrogate', '{"name":"\\ud800","url":"\\ud800","events":["\\ud800"],"from":"\\ud800"}'],
  ['huge number', '{"limit":1e400,"version":1e400,"enabled":1e400}'],
  ['nulls everywhere', '{"name":null,"url":null,"events":null,"from":null,"to":null,"variables":null}'],
  [
    'long strings',
    JSON.stringify({ name: 'x'.repeat(300_000), url: `https://a.example/${'x'.repeat(300_000)}` }),
  ],
  [
    'control characters',
    JSON.stringify({ name: 'a\u0000b', subject: 'line\r\nBcc: x@y.z', url: 'https://a\u0000.example/' }),
  ],
];

const odditiesInPath = [
  '%00',
  '%ZZ',
  'x'.repeat(5000),
  '..%2F..%2Fetc%2Fpasswd',
  'wh_%F0%9F%92%A9',
  "' OR 1=1 --",
];

for (const engine of ALL_ENGINES) {
  describe(`robustness: no input answers 500 (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let routes: Array<{ method: string; url: string }>;
    let ids: Record<string, string>;
    before(async () => {
      api = await startTestApp(engine);
      const webhook = await api.request('POST', '/v1/webhooks', {
        body: { url: 'https://hooks.example.com/r', events: ['email.sent'] },
      });
      const template = await api.request('POST', '/v1/templates', {
        body: { name: 'T', subject: 'S', html: '<p>{{ name }}</p>' },
      });
      ids = { webhook_id: webhook.body.data.id, id: template.body.id };
      routes = [];
      for (const [path, methods] of Object.entries(
        (await api.request('GET', '/v1/openapi.json')).body.paths,
      )) {
        for (const method of Object.keys(methods as object))
          routes.push({ method: method.toUpperCase(), url: path });
      }
      assert.ok(routes.length > 20, 'every documented route is exercised');
    });
    after(() => api.close());

    const fill = (url: string, value?: string) =>
      url.replace(/\{(\w+)\}/g, (_, name: string) => value ?? ids[name] ?? ids.id ?? 'x');

    test('odd JSON bodies on every route', async () => {
      for (const { method, url } of routes) {
        if (method === 'GET' || method === 'DELETE') continue;
        for (const [what, rawBody] of bodies) {
          const response = await api.request(method, fill(url), {
            rawBody,
            headers: { 'content-type': 'application/json' },
          });
          assert.ok(
            response.status < 500,
            `${method} ${url} with ${what}: ${response.status} ${JSON.stringify(response.body)}`,
          );
          if (response.status >= 400)
            assert.equal(typeof response.body.error.code, 'string', `${method} ${url} ${what}`);
        }
      }
      assert.equal(({} as any).polluted, undefined, 'no prototype was polluted');
    });

    test('odd path parameters and query strings on every route', async () => {
      for (const { method, url } of routes) {
        for (const oddity of odditiesInPath) {
          if (!url.includes('{')) continue;
          const response = await api.request(
            method,
            fill(url, oddity),
            method === 'GET' || method === 'DELETE' ? {} : { body: {} },
          );
          assert.ok(response.status < 500, `${method} ${fill(url, oddity).slice(0, 80)}: ${response.status}`);
        }
        if (method === 'GET') {
          for (const query of [
            'limit=-1',
            'limit=%00',
            'after=%ZZ',
            'after=%00',
            'before=%00',
            `before=${'x'.repeat(5000)}`,
            'limit[]=1&limit[]=2',
            'type=%00',
          ]) {
            const response = await api.request('GET', `${fill(url)}?${query}`);
            assert.ok(response.status < 500, `GET ${url}?${query.slice(0, 40)}: ${response.status}`);
          }
        }
      }
    });

    test('a list cursor that is not an id of the listed kind is a 422, before any query', async () => {
      const lists: Array<[string, string]> = [
        ['/v1/emails', 'msg'],
        ['/v1/webhooks', 'wh'],
        ['/v1/templates', 'tpl'],
        ['/v1/events', 'evt'],
        [`/v1/webhooks/${ids.webhook_id}/deliveries`, 'dlv'],
        ['/v1/suppressions', 'sup'],
      ];
      for (const [path, prefix] of lists) {
        for (const param of ['after', 'before']) {
          for (const cursor of ['%00', 'x', 'evt_%00', prefix === 'wh' ? ids.id! : ids.webhook_id!]) {
            const response = await api.request('GET', `${path}?${param}=${cursor}`);
            assert.equal(response.status, 422, `${path}?${param}=${cursor}`);
            assert.deepEqual(response.body, {
              error: {
                code: 'parameter_invalid',
                // A NUL is refused as no text at all, in every query parameter, before the cursor is read.
                message: cursor.includes('%00')
                  ? `The query parameter '${param}' must not contain control characters (such as NUL, %00).`
                  : `${param} must be an id from this list (${prefix}_…).`,
                param,
                request_id: response.headers.get('x-request-id'),
              },
            });
          }
        }
        const unknown = `${prefix}_01m8362j4ke00a6yqc5prman4d`;
        const page = await api.request('GET', `${path}?after=${unknown}`);
        assert.equal(page.status, 200, `${path}: an id of the kind that does not exist is just a position`);
      }
      // A template's versions page by version number.
      const versions = await api.request('GET', '/v1/templates/tpl_x/versions?after=x');
      assert.equal(versions.status, 422);
      assert.deepEqual(versions.body, {
        error: {
          code: 'parameter_invalid',
          message: "The query parameter 'after' must be an integer.",
          param: 'after',
          request_id: versions.headers.get('x-request-id'),
        },
      });
    });
  });
}
