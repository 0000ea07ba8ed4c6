import { type TSchema, Type } from '@sinclair/typebox';

/** A date-time string as the API writes them; `description` says what moment it is. */
export const timestamp = (description: string) =>
  Type.String({ format: 'date-time', description: `${description} ISO 8601 UTC with milliseconds.` });

/** `schema` or null. */
export const nullable = <T extends TSchema>(schema: T, description?: string) =>
  Type.Union([schema, Type.Null()], description ? { description } : {});
