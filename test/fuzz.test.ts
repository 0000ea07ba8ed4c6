import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ENGINES, startTestApp, type TestApp } from './helpers/app.ts';

// Requests generated from the OpenAPI document, on every operation: inputs that follow the schemas, and
// the same with values swapped for hostile ones. Whatever arrives, the answer is never a 5xx. Bounded and
// seeded, so a failure names a request that reproduces.

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

for (const engine of ENGINES) {
  describe(`fuzzing from the OpenAPI document (${engine})`, () => {
    test(
      `${REQUESTS_PER_OPERATION} generated requests per operation: no 5xx`,
      { timeout: 240_000 },
      async (t) => {
        const api: TestApp = await startTestApp(engine, { allowPrivateUrls: false });
        t.after(() => api.close());
        const doc = (await api.request('GET', '/v1/openapi.json')).body as Schema;
        // Real ids to aim at, besides made-up ones.
        const webhook = await api.request('POST', '/v1/webhooks', {
          body: { url: 'https://hooks.example.com/f', events: ['email.sent'] },
        });
        const template = await api.request('POST', '/v1/templates', {
          body: { name: 'Fuzz', alias: 'fuzz', subject: 'S', html: '<p>{{ name }}</p>' },
        });
        const email = await api.request('POST', '/v1/emails', {
          body: { from: 'a@example.com', to: 'b@example.org', subject: 'S', text: 'T' },
        });
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
              const query = new URLSearchParams();
              for (const parameter of operation.parameters ?? []) {
                if (parameter.in !== 'query' || rng() < 0.5) continue;
                const value = generate(parameter.schema ?? {}, doc, rng);
                query.set(parameter.name, typeof value === 'string' ? value : JSON.stringify(value));
              }
              const bodySchema = operation.requestBody?.content?.['application/json']?.schema;
              const body = bodySchema ? generate(bodySchema, doc, rng) : undefined;
              const target = `${url}${query.size > 0 ? `?${query}` : ''}`;
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
  });
}
