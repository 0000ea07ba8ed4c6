import { Ajv, type ErrorObject, type Options, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyInstance, FastifyRequest, RouteOptions } from 'fastify';
import type { DeferredSchemas } from './deferred-schemas.ts';

/**
 * C0 control characters and DEL. No query or path parameter of the API has a use for them, and U+0000
 * cannot even reach PostgreSQL (its text refuses the character, so a filter holding it would fail the query).
 */
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;

/**
 * Set (not enumerable) on a parsed query string whose percent-escapes do not decode to UTF-8 text (`%FF`,
 * `%C0%80`, a lone surrogate as `%ED%A0%80`): the name of the first such parameter, as sent.
 */
const MALFORMED_PARAMETER = Symbol('malformed query parameter');

/**
 * The query string as Fastify's default parser reads it (`+` is a space, a repeated name gives a list, a
 * name without `=` is empty), except that a percent-escape that is not UTF-8 is noted, for validation to
 * refuse, instead of being kept as literal text and searched for.
 */
export function parseQueryString(query: string): Record<string, string | string[]> {
  const parsed: Record<string, string | string[]> = Object.create(null);
  let malformed: string | undefined;
  for (const pair of query.split('&')) {
    if (pair === '') continue;
    const equals = pair.indexOf('=');
    const rawName = equals < 0 ? pair : pair.slice(0, equals);
    const name = decodeQueryPart(rawName);
    const value = equals < 0 ? '' : decodeQueryPart(pair.slice(equals + 1));
    if (name === undefined || value === undefined) {
      malformed ??= name ?? rawName;
      continue;
    }
    const previous = parsed[name];
    if (previous === undefined) parsed[name] = value;
    else if (Array.isArray(previous)) previous.push(value);
    else parsed[name] = [previous, value];
  }
  if (malformed !== undefined) Object.defineProperty(parsed, MALFORMED_PARAMETER, { value: malformed });
  return parsed;
}

/** A query string part decoded, or undefined when its escapes are not UTF-8. */
function decodeQueryPart(part: string): string | undefined {
  const plain = part.includes('+') ? part.replace(/\+/g, ' ') : part;
  if (!plain.includes('%')) return plain;
  try {
    return decodeURIComponent(plain);
  } catch {
    return undefined;
  }
}

const issue = (name: string, message: string): ErrorObject => ({
  keyword: 'text',
  instancePath: `/${name}`,
  schemaPath: '#',
  params: {},
  message,
});

/** The issue with a query string's or path's text once its schema passed: bytes that are not text. */
function textIssue(data: unknown, httpPart: string): ErrorObject | undefined {
  if (typeof data !== 'object' || data === null) return undefined;
  const malformed = (data as { [MALFORMED_PARAMETER]?: string })[MALFORMED_PARAMETER];
  if (httpPart === 'querystring' && malformed !== undefined) {
    return issue(malformed, 'must be UTF-8 text, percent-encoded (a %-escape in it is not)');
  }
  // On every request with a query or path: no array or entry list made for the one or two values there are.
  for (const name in data) {
    if (!Object.hasOwn(data, name)) continue;
    const value = (data as Record<string, unknown>)[name];
    if (Array.isArray(value) ? value.some(hasControlCharacter) : hasControlCharacter(value)) {
      return issue(name, 'must not contain control characters (such as NUL, %00)');
    }
  }
  return undefined;
}

const hasControlCharacter = (item: unknown): boolean =>
  typeof item === 'string' && CONTROL_CHARACTER.test(item);

/** A parsed query string or path without a parameter, nor a malformed one (which has no name to keep). */
function isEmpty(data: unknown): data is Record<string, unknown> {
  if (typeof data !== 'object' || data === null) return false;
  if ((data as { [MALFORMED_PARAMETER]?: string })[MALFORMED_PARAMETER] !== undefined) return false;
  for (const _ in data) return false;
  return true;
}

/** What validation fills into an empty part, when it passes and fills only primitives; null otherwise. */
function defaultsOfEmpty(validate: ValidateFunction, part: string): Record<string, unknown> | null {
  const probe: Record<string, unknown> = Object.create(null);
  if (!validate(probe) || textIssue(probe, part)) return null;
  const values = Object.values(probe);
  return values.every((value) => value === null || typeof value !== 'object') ? { ...probe } : null;
}

// Bodies are checked strictly: a string "true" is not a boolean and an unknown field is an error. Query
// strings and path parameters arrive as text, so those (and only those) are coerced to the schema's types;
// then their text is checked: every filter and id, on every route, refuses control characters and escapes
// that are not UTF-8 with a 422 naming the parameter, on either engine, before any query runs.
// Each validator is compiled on its route's first request (deferred-schemas.ts).
export function installValidation(app: FastifyInstance, schemas: DeferredSchemas): void {
  const base: Options = { allErrors: false, strict: false, useDefaults: true, removeAdditional: false };
  const strict = addFormats.default(new Ajv({ ...base, coerceTypes: false }));
  const coercing = addFormats.default(new Ajv({ ...base, coerceTypes: 'array' }));
  app.setValidatorCompiler(({ schema, method, url, httpPart }) =>
    schemas.validator(`${method} ${url} ${httpPart}`, () => {
      if (httpPart === 'body') return strict.compile(schema as object);
      const validate: ValidateFunction = coercing.compile(schema as object);
      const part = httpPart ?? '';
      // A part with nothing in it (a list read without a query string, the usual case) passes or fails the
      // same way every time: checked once, and then given the defaults that check filled in (primitive
      // values only, so that no request shares an array or object with another).
      let emptyDefaults: Record<string, unknown> | null | undefined;
      const checked = (data: unknown): boolean => {
        if (isEmpty(data)) {
          emptyDefaults ??= defaultsOfEmpty(validate, part);
          if (emptyDefaults) {
            Object.assign(data, emptyDefaults);
            checked.errors = null;
            return true;
          }
        }
        const valid = validate(data);
        const issue = valid ? textIssue(data, part) : undefined;
        checked.errors = issue ? [issue] : (validate.errors ?? null);
        return valid && !issue;
      };
      checked.errors = null as ErrorObject[] | null;
      return checked;
    }),
  );
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route's body may be left out (an action such as publish, test or redeliver, whose body only
     * adjusts it): see `installOptionalBodies`. A POST route without a body schema has this rule too.
     */
    optionalBody?: boolean;
  }
}

/** Whether a route reads no body, an empty body and `{}` alike (`installOptionalBodies`). */
export const bodyIsOptional = (route: { schema?: { body?: unknown }; config?: { optionalBody?: boolean } }) =>
  route.schema?.body === undefined || route.config?.optionalBody === true;

/**
 * The one rule for a body that may be left out — a route without a body schema (cancel, verify, rotate), or
 * one whose config says `optionalBody` (publish, render, test, redeliver, recover): no body at all, an empty
 * body (zero bytes, even labelled `content-type: application/json`, as SDKs that label every request send
 * it) and `{}` are the same request. Such a route with a body schema gets `{}` for a body left out, so a
 * field it requires (recover's `since`) is reported missing by name rather than the body as not an object.
 */
export function installOptionalBodies(app: FastifyInstance): void {
  app.addHook('onRoute', (route: RouteOptions) => {
    if (route.schema?.body === undefined || route.config?.optionalBody !== true) return;
    const hooks = route.preValidation === undefined ? [] : [route.preValidation].flat();
    route.preValidation = [
      async (request: FastifyRequest) => {
        request.body ??= {};
      },
      ...hooks,
    ];
  });
}
