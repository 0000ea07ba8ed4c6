import type { Engine } from '../handle.ts';
import { type RawBuilder, sql } from 'kysely';

// The few SQL spellings the two engines do not share, each written once. Statements written as text
// (db/sql-text.ts) take these pieces instead of spelling an engine's variant themselves.

/** The `n`th (from 1) bind placeholder: `$n` on PostgreSQL, `?` (bound by position) on SQLite. */
export const placeholder = (engine: Engine, n: number): string => (engine === 'postgres' ? `$${n}` : '?');

/**
 * Ends the subquery that picks a claim's rows. PostgreSQL: the rows are locked and rows another claimer holds
 * are skipped, so concurrent workers take different rows without waiting for each other. SQLite has no row
 * locks (a writer holds the whole database), so nothing is added.
 */
export const skipLockedRows = (engine: Engine): string =>
  locksRows(engine) ? ' FOR UPDATE SKIP LOCKED' : '';

/**
 * Whether a SELECT can lock the rows it reads until its transaction ends (FOR UPDATE): PostgreSQL can; SQLite
 * has no row locks (a writer holds the whole database, so a transaction that writes is alone anyway).
 */
export const locksRows = (engine: Engine): boolean => engine === 'postgres';

/** The larger of two values: GREATEST on PostgreSQL; on SQLite, MAX with two arguments is that function. */
export const greatestOf = (engine: Engine, a: string, b: string): string =>
  `${engine === 'postgres' ? 'GREATEST' : 'MAX'}(${a}, ${b})`;

/**
 * Whether a statement may write in its WITH (a data-modifying common table expression): PostgreSQL may, so
 * writes that go together are sent as one statement there (a round trip each saved); SQLite may not, and runs
 * them one after another (in process, it has no round trips to save).
 */
export const writesInWith = (engine: Engine): boolean => engine === 'postgres';

/**
 * How many rows a multi-row INSERT written off the request path (the API request log's) carries. PostgreSQL:
 * a statement's fixed cost, ~1 ms of CPU on each side of the socket (its round trip, parse and commit), is
 * shared by more rows, and its backend's CPU a row fell from 28 to 18 µs from 100 rows to 300
 * (bench/pg-round-trips.ts). SQLite: in process, where a statement holds the event loop while it runs.
 */
export const rowsPerBatchInsert = (engine: Engine): number => (engine === 'postgres' ? 300 : 100);

/**
 * Whether the member `key` of a JSON text column holds the JSON value `json` (JSON.stringify's text): compared
 * as jsonb on PostgreSQL (the column is text there too); on SQLite through `->`, which answers a member as its
 * JSON text, as JSON.stringify wrote it. `key` must be a plain label (letters, digits, `_`): SQLite reads a
 * label with a `.` or `[` as a path.
 */
/**
 * `column` starts with `prefix`, as an index on the column can serve it: on SQLite a range (BINARY order is
 * the UTF-8 bytes', so the range is exactly the prefix's strings), which the column's ordinary index reads;
 * on PostgreSQL a LIKE, which an index with `text_pattern_ops` reads whatever the database's collation.
 */
export const textStartsWith = (engine: Engine, column: string, prefix: string): RawBuilder<boolean> =>
  engine === 'postgres'
    ? sql<boolean>`${sql.ref(column)} like ${`${prefix.replace(/[\\%_]/g, (char) => `\\${char}`)}%`} escape '\\'`
    : sql<boolean>`(${sql.ref(column)} >= ${prefix} and ${sql.ref(column)} < ${`${prefix}\u{10FFFF}`})`;

export const jsonMemberIs = (
  engine: Engine,
  column: string,
  key: string,
  json: string,
): RawBuilder<boolean> =>
  engine === 'postgres'
    ? sql<boolean>`(${sql.ref(column)})::jsonb -> ${key} = ${json}::jsonb`
    : sql<boolean>`${sql.ref(column)} -> ${key} = ${json}`;

/**
 * The member `key` of a JSON text column as JSON (null when it has none), comparable with jsonValue(): jsonb on
 * PostgreSQL, JSON text on SQLite (`->`, as JSON.stringify writes it). `key` as for jsonMemberIs.
 */
export const jsonMember = (engine: Engine, column: string, key: string): RawBuilder<unknown> =>
  engine === 'postgres' ? sql`(${sql.ref(column)})::jsonb -> ${key}` : sql`${sql.ref(column)} -> ${key}`;

/** A JSON value (JSON.stringify's text) as jsonMember() answers one; null stays SQL NULL. */
export const jsonValue = (engine: Engine, json: string | null): RawBuilder<unknown> =>
  engine === 'postgres' ? sql`${json}::jsonb` : sql`${json}`;

/** The member `key` of a JSON text column read as a number (a member that holds one); null when it has none. */
export const jsonMemberNumber = (engine: Engine, column: string, key: string): RawBuilder<number> =>
  engine === 'postgres'
    ? sql<number>`((${sql.ref(column)})::jsonb ->> ${key})::numeric`
    : sql<number>`${sql.ref(column)} ->> ${key}`;
