import { type Options, Parser } from 'csv-parse';
import { parseAddress } from '../../lib/addresses.ts';
import { DomainError, invalidParam } from '../../lib/errors.ts';
import type { ContactPropertyRecord, PropertyType, PropertyValue } from './contact-properties.repo.ts';
import { MAX_NAME_LENGTH, MAX_PROPERTY_STRING } from './contacts.schemas.ts';

// What a contact import reads in a CSV: the parser's settings (the same for the upload's check and the job's
// read), the column map resolved against the header, and a row turned into a contact's fields. Pure: no I/O.

/** The most data rows an import may have. */
export const MAX_IMPORT_ROWS = 1_000_000;
/** The most bytes an import's CSV may have: 1 M rows of a few hundred bytes each. */
export const MAX_IMPORT_BYTES = 512 * 1024 * 1024;
/** The longest row (so a quote never closed cannot make the parser hold the rest of the file). */
export const MAX_ROW_BYTES = 64 * 1024;
/** The most columns a row may have. */
export const MAX_COLUMNS = 200;

/**
 * RFC 4180 with what spreadsheets write: a UTF-8 BOM, CRLF or LF, quoted fields holding commas, quotes and
 * line breaks. Rows with a different number of columns than the header are read (and fail on their own).
 */
export const newCsvParser = (): Parser =>
  new Parser({
    bom: true,
    relax_column_count: true,
    skip_empty_lines: true,
    max_record_size: MAX_ROW_BYTES,
    encoding: 'utf8',
  } satisfies Options);

/** A parser's error as the 400 the upload answers: the row it stopped in (the header is row 0), what was wrong. */
export function csvError(error: unknown): DomainError {
  const { code, records, message } = error as { code?: string; records?: number; message?: string };
  const where = records === undefined ? '' : records === 0 ? ' in the header' : ` at row ${records}`;
  const what =
    code === 'CSV_QUOTE_NOT_CLOSED'
      ? 'a quoted field is not closed'
      : code === 'CSV_MAX_RECORD_SIZE'
        ? `a row is longer than ${MAX_ROW_BYTES} bytes`
        : code === 'CSV_INVALID_CLOSING_QUOTE' || code === 'CSV_NON_TRIMABLE_CHAR_AFTER_CLOSING_QUOTE'
          ? 'a quote inside a quoted field is not doubled ("")'
          : (message ?? 'it cannot be read');
  return new DomainError('invalid_request', 'invalid_csv', `The file is not CSV${where}: ${what}.`, 'file');
}

/** A property column as sent: its column, or `{ column, type }` (Resend's form; the type must be the declared one). */
export type PropertyColumn = string | { column: string; type?: string | undefined };

/** The column map as sent: which CSV column holds each field. */
export interface ColumnMapInput {
  email?: string | undefined;
  first_name?: string | undefined;
  last_name?: string | undefined;
  unsubscribed?: string | undefined;
  properties?: Record<string, PropertyColumn> | undefined;
}

/** The column map resolved: each field's column index in the header. */
export interface ResolvedColumns {
  email: number;
  firstName?: number | undefined;
  lastName?: number | undefined;
  unsubscribed?: number | undefined;
  properties: Array<{ id: string; key: string; type: PropertyType; index: number }>;
}

const mapError = (param: string, message: string) =>
  new DomainError('validation', 'invalid_column_map', message, param);

/** A header's name compared loosely for the default map: `First Name`, `first-name`, `FIRST_NAME`. */
const loose = (name: string) =>
  name
    .trim()
    .toLowerCase()
    .replace(/[\s-]+/g, '_');

/** Checks the header: named columns, no name twice (a map could not tell them apart). */
export function checkHeader(header: readonly string[]): void {
  if (header.length > MAX_COLUMNS) {
    throw mapError('file', `The header has ${header.length} columns; at most ${MAX_COLUMNS}.`);
  }
  const seen = new Set<string>();
  header.forEach((name, index) => {
    if (name.trim() === '') {
      throw mapError('file', `Column ${index + 1} of the header has no name; every column needs one.`);
    }
    if (seen.has(name)) throw mapError('file', `The header names the column '${name}' twice.`);
    seen.add(name);
  });
}

/**
 * The column map against the header and the project's declared properties. Without a map, columns are
 * found by name: `email`, `first_name`, `last_name`, `unsubscribed` (in any case, spaces or `-` for `_`)
 * and the declared property keys (exactly).
 */
export function resolveColumns(
  header: readonly string[],
  map: ColumnMapInput | undefined,
  declared: readonly ContactPropertyRecord[],
): ResolvedColumns {
  const indexOf = (param: string, column: string) => {
    const index = header.indexOf(column);
    if (index < 0) {
      throw mapError(
        param,
        `The column map names '${column}' for ${param.replace('column_map.', '')}, which the header does not have. Header: ${header.join(', ')}.`,
      );
    }
    return index;
  };
  if (map === undefined) {
    const byName = (field: string) => {
      const index = header.findIndex((name) => loose(name) === field);
      return index < 0 ? undefined : index;
    };
    const email = byName('email');
    if (email === undefined) {
      throw mapError(
        'column_map.email',
        `The header has no 'email' column; name it so, or send a column_map. Header: ${header.join(', ')}.`,
      );
    }
    return {
      email,
      firstName: byName('first_name'),
      lastName: byName('last_name'),
      unsubscribed: byName('unsubscribed'),
      properties: declared.flatMap((property) => {
        const index = header.indexOf(property.key);
        return index < 0 ? [] : [{ id: property.id, key: property.key, type: property.type, index }];
      }),
    };
  }
  if (map.email === undefined)
    throw mapError('column_map.email', 'The column map must name the email column.');
  const optional = (field: 'first_name' | 'last_name' | 'unsubscribed') =>
    map[field] === undefined ? undefined : indexOf(`column_map.${field}`, map[field]);
  const properties = Object.entries(map.properties ?? {}).map(([key, given]) => {
    const param = `column_map.properties.${key}`;
    const property = declared.find((each) => each.key === key);
    if (!property) {
      throw mapError(
        param,
        `'${key}' is not a declared contact property; declare it first (POST /v1/contact-properties). Declared: ${declared.map((each) => each.key).join(', ') || 'none'}.`,
      );
    }
    const { column, type } = typeof given === 'string' ? { column: given, type: undefined } : given;
    if (type !== undefined && type !== property.type) {
      throw mapError(param, `'${key}' is declared as a ${property.type} property, not ${type}.`);
    }
    return { id: property.id, key, type: property.type, index: indexOf(param, column) };
  });
  return {
    email: indexOf('column_map.email', map.email),
    firstName: optional('first_name'),
    lastName: optional('last_name'),
    unsubscribed: optional('unsubscribed'),
    properties,
  };
}

/** A row read as a contact: an empty cell sets nothing (a new contact has no value; an existing one keeps its). */
export interface ImportedRow {
  email: string;
  firstName?: string | undefined;
  lastName?: string | undefined;
  unsubscribed?: boolean | undefined;
  values: Map<string, PropertyValue>;
}

const YES = new Set(['true', 'yes', '1', 'y']);
const NO = new Set(['false', 'no', '0', 'n']);

/** A data row as a contact's fields, or why it cannot be imported. */
export function readRow(
  record: readonly string[],
  columns: ResolvedColumns,
  width: number,
): { ok: true; row: ImportedRow } | { ok: false; reason: string } {
  if (record.length !== width) {
    return { ok: false, reason: `The row has ${record.length} columns; the header has ${width}.` };
  }
  const cell = (index: number | undefined) => (index === undefined ? '' : record[index]!.trim());
  const given = cell(columns.email);
  if (given === '') return { ok: false, reason: 'The email is empty.' };
  const parsed = parseAddress(given);
  if (!parsed.ok || parsed.value.name !== null || given.length > 320) {
    return { ok: false, reason: `'${given.slice(0, 320)}' is not an email address.` };
  }
  const name = (index: number | undefined, which: string) => {
    const text = cell(index);
    if (text.length > MAX_NAME_LENGTH)
      throw new Error(`The ${which} name is over ${MAX_NAME_LENGTH} characters.`);
    return text === '' ? undefined : text;
  };
  try {
    const row: ImportedRow = {
      email: parsed.value.address.toLowerCase(),
      firstName: name(columns.firstName, 'first'),
      lastName: name(columns.lastName, 'last'),
      values: new Map(),
    };
    const flag = cell(columns.unsubscribed).toLowerCase();
    if (YES.has(flag)) row.unsubscribed = true;
    else if (NO.has(flag)) row.unsubscribed = false;
    else if (flag !== '') throw new Error(`unsubscribed is '${flag}', not true or false.`);
    for (const property of columns.properties) {
      const text = cell(property.index);
      if (text === '') continue;
      if (property.type === 'number') {
        const value = Number(text);
        if (!Number.isFinite(value))
          throw new Error(`'${property.key}' is a number property: '${text}' is not a number.`);
        row.values.set(property.id, value);
      } else {
        if (text.length > MAX_PROPERTY_STRING) {
          throw new Error(`'${property.key}' is over ${MAX_PROPERTY_STRING} characters.`);
        }
        row.values.set(property.id, text);
      }
    }
    return { ok: true, row };
  } catch (error) {
    return { ok: false, reason: (error as Error).message };
  }
}

/** The import's options as the request sends them (JSON text in form fields). */
export function parseJsonField<T>(param: string, text: string | undefined): T | undefined {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch {
    throw invalidParam(param, `${param} must be JSON.`);
  }
}
