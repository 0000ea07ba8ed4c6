import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fastJsonStringify from 'fast-json-stringify';
import { forSerialization } from '../src/http/serialization.ts';
import { renderOpenApiDocument } from '../src/openapi-document.ts';
import { seeded } from './helpers/random.ts';

// The response schemas are handed to fast-json-stringify rewritten (src/http/serialization.ts): unions of
// constants as enums, "X or null" as type lists, so that no validator is compiled on the event loop when a
// route first answers. The library's output on the schemas as written is the reference: every response
// schema of every route, with random values that fit it, must be written to the same JSON.

type Schema = Record<string, any>;

/** Every response schema in the served OpenAPI document, its titled parts put back in place of their $ref. */
async function responseSchemas(): Promise<Array<[string, Schema]>> {
  const document = (await renderOpenApiDocument()) as Schema;
  const components: Record<string, Schema> = document.components?.schemas ?? {};
  const inline = (schema: unknown): unknown => {
    if (Array.isArray(schema)) return schema.map(inline);
    if (typeof schema !== 'object' || schema === null) return schema;
    const ref = (schema as Schema).$ref;
    if (typeof ref === 'string') return inline(components[ref.replace('#/components/schemas/', '')]);
    return Object.fromEntries(Object.entries(schema).map(([key, value]) => [key, inline(value)]));
  };
  const found: Array<[string, Schema]> = [];
  for (const [route, operations] of Object.entries(document.paths as Record<string, Schema>)) {
    for (const [method, operation] of Object.entries(operations)) {
      for (const [status, response] of Object.entries(
        (operation.responses ?? {}) as Record<string, Schema>,
      )) {
        const schema = response.content?.['application/json']?.schema;
        if (schema) found.push([`${method.toUpperCase()} ${route} ${status}`, inline(schema) as Schema]);
      }
    }
  }
  return found;
}

const TEXTS = [
  '',
  'plain',
  'with "quotes" and \\ backslash',
  'Grüße — 日本語 ✉️',
  'line\nbreak\ttab',
  '\u0000\u001f',
];

/** A value that fits `schema` (the subset of JSON Schema our routes use), drawn from `rng`. */
function valueFor(schema: Schema, rng: ReturnType<typeof seeded>, depth = 0): unknown {
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum)) return rng.pick(schema.enum);
  if (Array.isArray(schema.anyOf)) return valueFor(rng.pick(schema.anyOf as Schema[]), rng, depth);
  const type = Array.isArray(schema.type) ? rng.pick(schema.type as string[]) : schema.type;
  switch (type) {
    case 'null':
      return null;
    case 'boolean':
      return rng.random() < 0.5;
    case 'integer':
      return rng.below(2_000_000) - 1_000;
    case 'number':
      return rng.pick([0, 1.5, -3.25, 1e21, rng.random()]);
    case 'string':
      return schema.format === 'date-time'
        ? new Date(1.7e12 + rng.below(1e11)).toISOString()
        : rng.pick(TEXTS);
    case 'array': {
      // As many items as the schema allows: a union's validator (the reference's) checks minItems too.
      const least = typeof schema.minItems === 'number' ? schema.minItems : 0;
      const length = depth > 4 ? least : least + rng.below(3);
      return Array.from({ length }, () => valueFor(schema.items ?? {}, rng, depth + 1));
    }
    case 'object':
    case undefined: {
      const value: Record<string, unknown> = {};
      const required = new Set<string>(schema.required ?? []);
      for (const [name, property] of Object.entries((schema.properties ?? {}) as Record<string, Schema>)) {
        if (required.has(name) || rng.random() < 0.7) value[name] = valueFor(property, rng, depth + 1);
      }
      return value;
    }
    default:
      throw new Error(`no values for type ${String(type)}`);
  }
}

describe('response serialization', () => {
  it('writes every route response the same JSON as fast-json-stringify on the schema as written', async () => {
    const schemas = await responseSchemas();
    assert.ok(schemas.length > 100, `only ${schemas.length} response schemas found`);
    let unions = 0;
    for (const [name, schema] of schemas) {
      const rewritten = forSerialization(schema) as Schema;
      unions += (JSON.stringify(schema).match(/"anyOf"/g) ?? []).length;
      assert.doesNotMatch(JSON.stringify(rewritten), /"anyOf"/, `${name} still has a union to validate`);
      const reference = fastJsonStringify(schema);
      const ours = fastJsonStringify(rewritten);
      const rng = seeded(name.length * 7919 + 17);
      for (let i = 0; i < 40; i++) {
        const value = valueFor(schema, rng);
        assert.equal(ours(value), reference(value), `${name}, value ${i}: ${JSON.stringify(value)}`);
      }
    }
    // The rewrite has work to do: the routes' schemas are full of unions.
    assert.ok(unions > 100, `only ${unions} unions in the response schemas`);
  });

  it('leaves a union it cannot write without a validator as it is', () => {
    const objectOrString = { anyOf: [{ type: 'object', properties: {} }, { type: 'string' }] };
    assert.deepEqual(forSerialization(objectOrString), objectOrString);
    const mixedConstants = {
      anyOf: [
        { const: 'a', type: 'string' },
        { const: 1, type: 'number' },
      ],
    };
    assert.deepEqual(forSerialization(mixedConstants), mixedConstants);
    assert.deepEqual(
      forSerialization({
        description: 'd',
        anyOf: [
          { const: 'a', type: 'string' },
          { const: 'b', type: 'string' },
        ],
      }),
      { description: 'd', type: 'string', enum: ['a', 'b'] },
    );
    assert.deepEqual(
      forSerialization({ anyOf: [{ type: 'string', format: 'date-time' }, { type: 'null' }] }),
      {
        type: ['string', 'null'],
        format: 'date-time',
      },
    );
    // Bare types become a type list; a branch with a constraint of its own stays a union.
    assert.deepEqual(
      forSerialization({ description: 'v', anyOf: [{ type: 'string' }, { type: 'number' }] }),
      {
        description: 'v',
        type: ['string', 'number'],
      },
    );
    const boundedString = { anyOf: [{ type: 'string', maxLength: 2 }, { type: 'number' }] };
    assert.deepEqual(forSerialization(boundedString), boundedString);
  });
});
