import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';

// fast-json-stringify writes a union (`anyOf`) by asking an Ajv validator which branch a value matches, and
// compiles that validator on the first answer that reaches it: a few hundred milliseconds on the event loop,
// once per route and process, while every other tenant's request waits (issue 34); compiled with the route
// instead, they made a start a third slower. Two shapes make nearly all of our unions and need no validator
// to be written: a choice of constants (an enum, written as the string or number it is) and "this or null"
// (a JSON type list, which fast-json-stringify writes by the value's own type); a choice of bare JSON types
// (a string or a number, as a filter's value) is a type list too. The response schemas are
// given to fast-json-stringify with those rewritten; the JSON written is the same
// (test/serialization.test.ts holds the two equal on every route's schemas), and the OpenAPI document and
// request validation keep the schemas as written.

type Schema = Record<string, unknown>;

const isObject = (value: unknown): value is Schema =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const PRIMITIVE_TYPES = new Set(['string', 'number', 'integer', 'boolean']);

/** The constants a branch allows (`const`, or an `enum` as OpenAPI 3.0 writes one), or undefined. */
const constantsOf = (branch: Schema): unknown[] | undefined =>
  'const' in branch ? [branch.const] : Array.isArray(branch.enum) ? branch.enum : undefined;

/** Branches of constants of one JSON type: the type and the constants, or undefined for any other shape. */
function constantChoice(branches: Schema[]): { type: string; values: unknown[] } | undefined {
  const values: unknown[] = [];
  let type: string | undefined;
  for (const branch of branches) {
    const constants = constantsOf(branch);
    if (!constants || constants.length === 0) return undefined;
    const own = typeof branch.type === 'string' ? branch.type : typeof constants[0];
    if (!PRIMITIVE_TYPES.has(own) || (type !== undefined && own !== type)) return undefined;
    if (constants.some((constant) => typeof constant !== (own === 'integer' ? 'number' : own)))
      return undefined;
    type = own;
    values.push(...constants);
  }
  return type === undefined ? undefined : { type, values };
}

/** A branch of one JSON type with no union or constant of its own: it can join `null` in a type list. */
const joinsNull = (schema: Schema): boolean =>
  typeof schema.type === 'string' &&
  schema.type !== 'null' &&
  !('anyOf' in schema) &&
  !('oneOf' in schema) &&
  !('const' in schema);

/** Branches that are each a bare JSON type (`{ type: 'string' }`, nothing else), of different types: the types. */
function bareTypes(branches: Schema[]): string[] | undefined {
  const types = branches.map((branch) =>
    Object.keys(branch).length === 1 &&
    typeof branch.type === 'string' &&
    (PRIMITIVE_TYPES.has(branch.type) || branch.type === 'null')
      ? branch.type
      : undefined,
  );
  if (types.some((type) => type === undefined) || new Set(types).size !== types.length) return undefined;
  return types as string[];
}

function rewriteUnion(schema: Schema, branches: Schema[]): Schema {
  const { anyOf: _anyOf, ...siblings } = schema;
  const choice = constantChoice(branches);
  if (choice) return { ...siblings, type: choice.type, enum: choice.values };
  const types = bareTypes(branches);
  if (types) return { ...siblings, type: types };
  if (branches.length === 2) {
    const nullAt = branches.findIndex((branch) => branch.type === 'null' && Object.keys(branch).length === 1);
    const other = branches[1 - nullAt];
    if (nullAt !== -1 && other && joinsNull(other))
      return { ...siblings, ...other, type: [other.type, 'null'] };
  }
  return { ...siblings, anyOf: branches };
}

/** The schema fast-json-stringify is given for a response: the same JSON, without validators to compile. */
export function forSerialization(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(forSerialization);
  if (!isObject(schema)) return schema;
  const rewritten: Schema = {};
  for (const [key, value] of Object.entries(schema)) {
    // `enum`, `const` and `default` hold values, not schemas.
    rewritten[key] = key === 'enum' || key === 'const' || key === 'default' ? value : forSerialization(value);
  }
  const branches = rewritten.anyOf;
  if (Array.isArray(branches) && branches.every(isObject)) return rewriteUnion(rewritten, branches);
  return rewritten;
}

type BuildSerializer = ReturnType<typeof SerializerSelector>;

/** Fastify's own serializer compiler (fast-json-stringify), given the response schemas `forSerialization`. */
export const buildSerializer: BuildSerializer = (externalSchemas, options) => {
  const compile = SerializerSelector()(externalSchemas, options);
  return (route) => compile({ ...route, schema: forSerialization(route.schema) as typeof route.schema });
};
