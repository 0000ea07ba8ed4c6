import { Ajv, type Options } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';

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
