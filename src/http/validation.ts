import { isUtf8 } from 'node:buffer';
import { Ajv, type Options } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';
import { invalidParam } from '../lib/errors.ts';

/** The error code of a JSON body whose bytes are not UTF-8 (the error handler answers 400). */
export const BODY_NOT_UTF8 = 'POSTWIRE_ERR_BODY_NOT_UTF8';

// Bodies are checked strictly: a string "true" is not a boolean and an unknown field is an error. Query
// strings and path parameters arrive as text, so those (and only those) are coerced to the schema's types.
export function installValidation(app: FastifyInstance): void {
  const base: Options = { allErrors: false, strict: false, useDefaults: true, removeAdditional: false };
  const strict = addFormats.default(new Ajv({ ...base, coerceTypes: false }));
  const coercing = addFormats.default(new Ajv({ ...base, coerceTypes: 'array' }));
  app.setValidatorCompiler(({ schema, httpPart }) =>
    (httpPart === 'body' ? strict : coercing).compile(schema as object),
  );
}

/**
 * JSON bodies as Fastify parses them (empty, malformed and `__proto__` bodies refused the same way), except
 * that a string holding U+0000 is a 422 naming its field: PostgreSQL text cannot store the character, so it
 * would otherwise fail the write (a 500) there and be stored on SQLite. Only bodies whose text has the
 * escape are searched.
 */
export function installJsonBody(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const bytes = body as Buffer; // parseAs: 'buffer'
    // A route that takes no body (an action such as cancel) accepts an empty one even when labelled JSON, as
    // SDKs that set content-type on every request send it (the Resend SDK's emails.cancel does).
    if (bytes.length === 0 && request.routeOptions.schema?.body === undefined) return done(null, undefined);
    // Decoding would turn bytes that are not UTF-8 into U+FFFD and store that: the body is refused instead.
    if (!isUtf8(bytes)) return done(Object.assign(new Error('not UTF-8'), { code: BODY_NOT_UTF8 }));
    const text = bytes.toString('utf8');
    parse(request, text, (error, value) => {
      if (error || !text.includes('\\u0000')) return done(error, value);
      const path = nulPath(value, '');
      if (path === undefined) return done(null, value);
      done(
        invalidParam(
          path || 'body',
          `The ${path ? `field '${path}'` : 'body'} must not contain the NUL character (\\u0000).`,
        ),
      );
    });
  });
}

/** The field path (`a.b[2]`) of the first string holding U+0000, '' for the value itself, else undefined. */
function nulPath(value: unknown, path: string): string | undefined {
  if (typeof value === 'string') return value.includes('\u0000') ? path : undefined;
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = nulPath(value[index], `${path}[${index}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (typeof value === 'object' && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      const found = nulPath(item, path ? `${path}.${key}` : key);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}
