import { type TOptional, type TProperties, type TSchema, Type } from '@sinclair/typebox';

/** A date-time string as the API writes them; `description` says what moment it is. */
export const timestamp = (description: string) =>
  Type.String({ format: 'date-time', description: `${description} ISO 8601 UTC with milliseconds.` });

/** What every time filter of the API takes, said once in each one's description. */
export const TIME_FILTER_FORMS =
  'An ISO 8601 date-time (`2026-11-20T09:30:00Z`) or a plain date (`2026-11-20`), which means 00:00:00Z (UTC) of that day.';

/**
 * A time filter (`since`, `until`, in a query string or a body): a date-time or a plain date. Every filter
 * takes both, through this one schema; `instantOf` (src/lib/clock.ts) reads the value.
 */
export const timeFilter = (description: string) =>
  Type.Union([Type.String({ format: 'date-time' }), Type.String({ format: 'date' })], {
    description: `${description} ${TIME_FILTER_FORMS}`,
  });

/** `schema` or null. */
export const nullable = <T extends TSchema>(schema: T, description?: string) =>
  Type.Union([schema, Type.Null()], description ? { description } : {});

/**
 * A string or a number in an answer: a JSON type list, not a union, so the answer is written by the value's
 * own type with no validator to compile (src/http/serialization.ts). Requests take a union (with its limits).
 */
export const answeredStringOrNumber = (description?: string) =>
  Type.Unsafe<string | number>({ type: ['string', 'number'], ...(description ? { description } : {}) });

/** `answeredStringOrNumber`, or null. */
export const answeredStringOrNumberOrNull = (description?: string) =>
  Type.Unsafe<string | number | null>({
    type: ['string', 'number', 'null'],
    ...(description ? { description } : {}),
  });

/** A response of bytes (a message, an attachment, a CSV), not JSON: documented as such. */
export const binary = (contentType: string, description: string) => ({
  description,
  content: { [contentType]: { schema: { type: 'string', format: 'binary' } } },
});

/**
 * An object of the API with a life of its own: `object` naming its kind, its `id`, its own fields, then when
 * it was created and when it last changed, in that order; `described` says what the id and the two times are.
 */
export const apiObject = <K extends string, P extends TProperties>(
  kind: K,
  title: string,
  described: { id: string; created: string; updated: string },
  properties: P,
) =>
  Type.Object(
    {
      object: Type.Literal(kind),
      id: Type.String({ description: described.id }),
      ...properties,
      created_at: timestamp(described.created),
      updated_at: timestamp(described.updated),
    },
    { title },
  );

/**
 * A request body that changes part of a resource: each of `properties` optional (the ones sent change), and
 * nothing else accepted.
 */
export const partialBody = <P extends TProperties>(title: string, properties: P) =>
  Type.Object(
    Object.fromEntries(Object.entries(properties).map(([key, schema]) => [key, Type.Optional(schema)])) as {
      [K in keyof P]: TOptional<P[K]>;
    },
    { additionalProperties: false, title },
  );
