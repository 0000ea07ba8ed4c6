import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, ENGINES, startTestApp, type TestApp } from './helpers/app.ts';

// Requests generated from the OpenAPI document, on every operation: inputs that follow the schemas, and
// the same with values swapped for hostile ones. Whatever arrives, the answer is never a 5xx. Bounded and
// seeded, so a failure names a request that reproduces. Then every parameter of every operation with the
// bytes that are not text (NUL and other control characters, %-escapes that are not UTF-8), and every
// operation that takes a POST or PATCH with bodies nested thousands deep: each a 4xx that says which.

const REQUESTS_PER_OPERATION = 40;
const SEED = 20261123;

type Schema = Record<string, any>;

/** mulberry32: a small seeded generator, so every run sends the same requests. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const HOSTILE: unknown[] = [
  null,
  0,
  -1,
  1e308,
  Number.MAX_SAFE_INTEGER,
  '',
  ' ',
  '\u0000',
  'x'.repeat(70_000),
  '💌',
  '\ud800',
  '<script>alert(1)</script>',
  "' OR 1=1 --",
  '../../etc/passwd',
  '{{ 7 | times: 7 }}{% for i in (1..100000) %}x{% endfor %}',
  'https://[::ffff:0:127.0.0.1]:0/',
  [],
  {},
  [null],
  { __proto__: { polluted: true } },
  true,
];

const STRINGS = [
  'ada@example.org',
  'Ada <ada@example.org>',
  'https://hooks.example.com/postwire',
  'email.sent',
  'email.delivered',
  'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  'a long enough plain secret',
  'Hello {{ name }}',
  '<p>Hi {{ name | upcase }}</p>',
  'welcome',
  '2026-11-23T10:00:00.000Z',
  'x',
];

/** Query values that are not text once decoded: NUL and other controls, and escapes that are not UTF-8. */
const NOT_TEXT_ESCAPES = [
  '%00',
  'ada%00@example.org',
  '%01',
  'a%0Ab',
  '%1F',
  '%7F',
  '%FF',
  '%C0%80',
  '%ED%A0%80',
  '%E2%82',
];

/** Bodies nested far deeper than any request needs (the Idempotency-Key fingerprint once overflowed on them). */
const NESTED_BODIES: Array<[string, string]> = [
  ['5000 nested [', `${'['.repeat(5000)}${']'.repeat(5000)}`],
  ['5000 nested {"a":', `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`],
  ['100 000 nested [ in an object', `{"name":${'['.repeat(100_000)}${']'.repeat(100_000)}}`],
  ['65 nested arrays', `${'['.repeat(65)}${']'.repeat(65)}`],
];

/** A path segment; a lone surrogate (which encodeURIComponent refuses) goes as its raw UTF-8 bytes. */
const encodePathPart = (value: string): string => {
  try {
    return encodeURIComponent(value);
  } catch {
    return '%ED%A0%80';
  }
};

function generate(schema: Schema, doc: Schema, rng: () => number, depth = 0): unknown {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;
  if (schema.$ref) {
    const name = String(schema.$ref).split('/').pop()!;
    return generate(doc.components.schemas[name] ?? {}, doc, rng, depth);
  }
  if (rng() < 0.08 || depth > 5) return pick(HOSTILE);
  const options = schema.anyOf ?? schema.oneOf;
  if (options) return generate(pick(options), doc, rng, depth + 1);
  if (schema.const !== undefined) return schema.const;
  if (schema.enum) return pick(schema.enum);
  const type = Array.isArray(schema.type) ? pick(schema.type) : schema.type;
  switch (type) {
    case 'object': {
      const value: Record<string, unknown> = {};
      const required = new Set<string>(schema.required ?? []);
      for (const [key, property] of Object.entries<Schema>(schema.properties ?? {})) {
        if ((required.has(key) && rng() > 0.05) || rng() < 0.4)
          value[key] = generate(property, doc, rng, depth + 1);
      }
      if (schema.additionalProperties && typeof schema.additionalProperties === 'object' && rng() < 0.5) {
        value[pick(['name', 'X-Tag', 'order'])] = generate(schema.additionalProperties, doc, rng, depth + 1);
      }
      if (rng() < 0.05) value.unexpected = 1;
      return value;
    }
    case 'array': {
      const length = Math.floor(rng() * Math.min(4, (schema.maxItems ?? 4) + 1));
      return Array.from({ length }, () => generate(schema.items ?? {}, doc, rng, depth + 1));
    }
    case 'string':
      if (schema.format === 'date-time')
        return new Date(Date.now() + (rng() - 0.3) * 86_400_000 * 60).toISOString();
      return pick(STRINGS);
    case 'integer':
    case 'number':
      return pick([schema.minimum ?? 0, schema.maximum ?? 100, 1, 2, 50, -5, 3.5]);
    case 'boolean':
      return rng() < 0.5;
    default:
      return pick(STRINGS);
  }
}

/** An app to fuzz, its OpenAPI document, and real resources to aim ids at (besides made-up ones). */
async function fuzzTarget(engine: (typeof ENGINES)[number]) {
  const api: TestApp = await startTestApp(engine, { allowPrivateUrls: false });
  const doc = (await api.request('GET', '/v1/openapi.json')).body as Schema;
  const webhook = await api.request('POST', '/v1/webhooks', {
    body: { url: 'https://hooks.example.com/f', events: ['email.sent'] },
  });
  const template = await api.request('POST', '/v1/templates', {
    body: { name: 'Fuzz', alias: 'fuzz', subject: 'S', html: '<p>{{ name }}</p>' },
  });
  const email = await api.request('POST', '/v1/emails', {
    body: { from: 'a@example.com', to: 'b@example.org', subject: 'S', text: 'T' },
  });
  return { api, doc, webhook, template, email };
}

for (const engine of ALL_ENGINES) {
  describe(`fuzzing from the OpenAPI document (${engine})`, { skip: engineSkip(engine) }, () => {
    test(
      `${REQUESTS_PER_OPERATION} generated requests per operation: no 5xx`,
      { timeout: 240_000 },
      async (t) => {
        const { api, doc, webhook, template, email } = await fuzzTarget(engine);
        t.after(() => api.close());
        const ids = [
          webhook.body.data.id,
          template.body.id,
          email.body.id,
          'fuzz',
          'evt_01m8362j4ke00a6yqc5prman4d',
        ];

        const rng = random(SEED);
        const pick = <T>(items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;
        const failures: string[] = [];
        let sent = 0;
        for (const [path, operations] of Object.entries<Schema>(doc.paths)) {
          for (const [method, operation] of Object.entries<Schema>(operations)) {
            for (let round = 0; round < REQUESTS_PER_OPERATION; round++) {
              const url = path.replace(/\{(\w+)\}/g, (_, name: string) =>
                encodePathPart(
                  name === 'version'
                    ? String(pick([1, 2, 0, -1, 999999999]))
                    : String(pick([...ids, ...HOSTILE])),
                ),
              );
              const query: string[] = [];
              for (const parameter of operation.parameters ?? []) {
                if (parameter.in !== 'query' || rng() < 0.5) continue;
                // A fifth of the filters sent are bytes that are not text, as they arrive on the wire.
                if (rng() < 0.2) {
                  query.push(`${parameter.name}=${pick(NOT_TEXT_ESCAPES)}`);
                  continue;
                }
                const value = generate(parameter.schema ?? {}, doc, rng);
                const text = typeof value === 'string' ? value : JSON.stringify(value);
                query.push(`${parameter.name}=${encodePathPart(text)}`);
              }
              const bodySchema = operation.requestBody?.content?.['application/json']?.schema;
              const body = bodySchema ? generate(bodySchema, doc, rng) : undefined;
              const target = `${url}${query.length > 0 ? `?${query.join('&')}` : ''}`;
              const response = await api.request(method.toUpperCase(), target, {
                ...(body === undefined ? {} : { body }),
                headers: rng() < 0.2 ? { 'idempotency-key': pick(['k1', 'k2', 'x'.repeat(300)]) } : {},
              });
              sent += 1;
              if (response.status >= 500) {
                failures.push(
                  `${method.toUpperCase()} ${target.slice(0, 120)} ${JSON.stringify(body)?.slice(0, 300)} → ${response.status}`,
                );
              }
            }
          }
        }
        process.stdout.write(`# ${engine}: ${sent} generated requests, ${failures.length} answered 5xx\n`);
        assert.deepEqual(failures, []);
      },
    );

    test(
      'every query and path parameter refuses bytes that are not text, naming the parameter',
      { timeout: 120_000 },
      async (t) => {
        const { api, doc, webhook, template, email } = await fuzzTarget(engine);
        t.after(() => api.close());
        const real: Record<string, string> = {
          id: email.body.id,
          webhook_id: webhook.body.data.id,
          version: '1',
          index: '0',
          address: 'b@example.org',
        };
        const before = await api.rowCounts();
        const wrong: string[] = [];
        let sent = 0;
        const expect = async (
          method: string,
          target: string,
          status: number,
          param: string | undefined,
          body?: unknown,
        ) => {
          const response = await api.request(method, target, body === undefined ? {} : { body });
          sent += 1;
          const error = response.body?.error;
          if (
            response.status !== status ||
            error?.param !== param ||
            error?.request_id !== response.headers.get('x-request-id')
          ) {
            wrong.push(
              `${method} ${target} → ${response.status} ${JSON.stringify(response.body).slice(0, 200)}`,
            );
          }
        };
        let queryParameters = 0;
        for (const [path, operations] of Object.entries<Schema>(doc.paths)) {
          for (const [verb, operation] of Object.entries<Schema>(operations)) {
            const method = verb.toUpperCase();
            const body = operation.requestBody ? {} : undefined;
            const parameters: Schema[] = operation.parameters ?? [];
            const fill = (values: Record<string, string>) =>
              path.replace(/\{(\w+)\}/g, (_, name: string) => values[name] ?? template.body.id);
            for (const parameter of parameters.filter((p) => p.in === 'query')) {
              queryParameters += 1;
              for (const escape of NOT_TEXT_ESCAPES) {
                await expect(method, `${fill(real)}?${parameter.name}=${escape}`, 422, parameter.name, body);
              }
            }
            for (const parameter of parameters.filter((p) => p.in === 'path')) {
              for (const escape of ['%00', 'x%0Ay', '%7F']) {
                const target = fill({ ...real, [parameter.name]: escape });
                await expect(method, target, 422, parameter.name, body);
              }
              // A path whose escapes are not UTF-8 is no URL at all: 400 before any route, in the API's shape.
              await expect(method, fill({ ...real, [parameter.name]: '%FF' }), 400, undefined, body);
            }
          }
        }
        assert.ok(queryParameters >= 20, `only ${queryParameters} query parameters in the document`);
        process.stdout.write(`# ${engine}: ${sent} parameters that are not text, ${wrong.length} wrong\n`);
        assert.deepEqual(wrong, []);
        assert.deepEqual(await api.rowCounts(), before, 'nothing was stored');
      },
    );

    test(
      'bodies nested thousands deep, with and without an Idempotency-Key: 400 on every operation',
      { timeout: 120_000 },
      async (t) => {
        const api: TestApp = await startTestApp(engine, { allowPrivateUrls: false });
        t.after(() => api.close());
        const doc = (await api.request('GET', '/v1/openapi.json')).body as Schema;
        const email = await api.request('POST', '/v1/emails', {
          body: {
            from: 'a@example.com',
            to: 'b@example.org',
            subject: 'S',
            text: 'T',
            scheduled_at: new Date(Date.now() + 3_600_000).toISOString(),
          },
        });
        const webhook = await api.request('POST', '/v1/webhooks', {
          body: { url: 'https://hooks.example.com/f', events: ['email.sent'] },
        });
        const before = await api.rowCounts();
        const wrong: string[] = [];
        let operations = 0;
        for (const [path, methods] of Object.entries<Schema>(doc.paths)) {
          for (const verb of Object.keys(methods)) {
            if (verb !== 'post' && verb !== 'patch' && verb !== 'put') continue;
            operations += 1;
            // The real ids of the kind the path names, so the body (not the id) is what gets refused.
            const target = path.replace(/\{(\w+)\}/g, (_, name: string) =>
              name === 'webhook_id' || path.startsWith('/v1/webhooks') ? webhook.body.data.id : email.body.id,
            );
            for (const [what, rawBody] of NESTED_BODIES) {
              for (const key of [undefined, `nested-${operations}`]) {
                const response = await api.request(verb.toUpperCase(), target, {
                  rawBody,
                  headers: {
                    'content-type': 'application/json',
                    ...(key ? { 'idempotency-key': key } : {}),
                  },
                });
                if (
                  response.status !== 400 ||
                  response.body?.error?.code !== 'invalid_json' ||
                  !/more than 64 levels deep/.test(response.body.error.message)
                ) {
                  wrong.push(
                    `${verb.toUpperCase()} ${path} ${what}${key ? ' with a key' : ''} → ${response.status} ${JSON.stringify(response.body).slice(0, 200)}`,
                  );
                }
              }
            }
            // 64 levels is the limit, not a refusal: that body gets whatever the operation says about it.
            const deepest = await api.request(verb.toUpperCase(), target, {
              rawBody: `${'['.repeat(64)}${']'.repeat(64)}`,
              headers: { 'content-type': 'application/json', 'idempotency-key': `deepest-${operations}` },
            });
            if (deepest.status >= 500)
              wrong.push(`${verb.toUpperCase()} ${path} 64 levels → ${deepest.status}`);
          }
        }
        assert.ok(operations >= 15, `only ${operations} operations take a body`);
        assert.deepEqual(wrong, []);
        const after = await api.rowCounts();
        assert.deepEqual(after, before, 'nothing was stored');
      },
    );
  });
}
