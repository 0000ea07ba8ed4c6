import { CompiledQuery } from 'kysely';
import type { Engine } from './handle.ts';
import { placeholder } from './engine/sql.ts';
import { createBoundedMemo } from '../lib/memo.ts';

/**
 * SQL text with its parameters, placeholders in the engine's style (`$1` or `?`). The worker's hot statements
 * are written this way rather than through the query builder: building them was a fifth of its CPU time.
 * Parameters must be added in the order their placeholders appear in the text (SQLite's `?` are positional).
 */
export function statement(engine: Engine) {
  const parameters: unknown[] = [];
  return {
    parameters,
    param(value: unknown): string {
      parameters.push(value);
      return placeholder(engine, parameters.length);
    },
    compile: (text: string) => CompiledQuery.raw(text, parameters),
  };
}

/**
 * Numbered placeholders in the engine's style, one per call (`?`, or `$1`, `$2`, … on PostgreSQL), for
 * writing a statement's text once, away from its values.
 */
export function placeholders(engine: Engine): () => string {
  let count = 0;
  return () => placeholder(engine, ++count);
}

/**
 * A row's values in `columns`' order: rows are written by column name (a missing or misspelt one is a type
 * error) and bound by position.
 */
export function inColumnOrder<C extends string>(
  columns: readonly C[],
  row: Readonly<Record<C, unknown>>,
): unknown[] {
  return columns.map((column) => row[column]);
}

/**
 * A table of values for a statement's WITH, `name (columns) AS (VALUES …)`, its rows given by column name
 * and its placeholders taken from `param` (so they land in the statement's order). `casts` types the
 * columns whose parameters PostgreSQL would otherwise read as text (a VALUES list has no column types).
 */
export function valuesTable<C extends string>(
  name: string,
  columns: readonly C[],
  rows: ReadonlyArray<Readonly<Record<C, unknown>>>,
  param: (value: unknown) => string,
  casts: Partial<Record<C, string>> = {},
): string {
  return `${name} (${columns.join(', ')}) AS (${valuesList(columns, rows, param, casts)})`;
}

/** The `VALUES …` list of valuesTable, for a FROM (`(VALUES …) AS name (columns)`). */
export function valuesList<C extends string>(
  columns: readonly C[],
  rows: ReadonlyArray<Readonly<Record<C, unknown>>>,
  param: (value: unknown) => string,
  casts: Partial<Record<C, string>> = {},
): string {
  const values = rows.map((row) => {
    const slots = columns.map((column) => {
      const slot = param(row[column]);
      const cast = casts[column];
      return cast ? `CAST(${slot} AS ${cast})` : slot;
    });
    return `(${slots.join(', ')})`;
  });
  return `VALUES ${values.join(', ')}`;
}

/**
 * SQL texts kept by their shape: a multi-row statement's text depends only on how many rows it holds (and
 * which of them take an expression instead of a value), so it is written once per shape and reused, sparing
 * the query builder's building and compiling on every call. Bounded, the oldest shape dropped first.
 */
export function textsByShape(write: (shape: string) => string, limit = 256): (shape: string) => string {
  const texts = createBoundedMemo<string, string>(limit);
  return (shape) => texts(shape, () => write(shape));
}

/**
 * A multi-row INSERT of `columns` into `table` (then `suffix`, such as an `ON CONFLICT …` clause, which both
 * engines spell alike): its text written once per number of rows, its rows given by column name.
 */
export function multiRowInsert<C extends string>(
  engine: Engine,
  table: string,
  columns: readonly C[],
  suffix = '',
): (rows: ReadonlyArray<Readonly<Record<C, unknown>>>) => CompiledQuery {
  const texts = textsByShape((shape) => {
    const slot = placeholders(engine);
    const row = () => `(${columns.map(slot).join(', ')})`;
    const values = Array.from({ length: Number(shape) }, row).join(', ');
    return `INSERT INTO ${table} (${columns.join(', ')}) VALUES ${values}${suffix ? ` ${suffix}` : ''}`;
  });
  return (rows) => {
    // One array filled in place: a batch of logs is 100–300 rows of 12 values, an array per row was as many
    // arrays more to make and flatten.
    const values = new Array<unknown>(rows.length * columns.length);
    let at = 0;
    for (const row of rows) for (const column of columns) values[at++] = row[column];
    return CompiledQuery.raw(texts(String(rows.length)), values);
  };
}

/**
 * Runs `each` on consecutive slices of `items`, at most `size` long, one after another (`first` tells the
 * first slice): statements that stay far below the engines' bind-parameter limits and never hold every row's
 * values at once.
 */
export async function inChunks<T>(
  items: readonly T[],
  size: number,
  each: (chunk: T[], first: boolean) => Promise<unknown>,
): Promise<void> {
  for (let start = 0; start < items.length; start += size)
    await each(items.slice(start, start + size), start === 0);
}

/**
 * PostgreSQL: statements run as one, each of `parts` a data-modifying WITH of `last` (`WITH part1 AS (…), part2
 * AS (…) last`), their `$n` placeholders renumbered in turn: one round trip, and one transaction of its own
 * when autocommitted. Every part runs to completion with the same snapshot (none sees another's rows; foreign
 * keys are checked at the statement's end, so a part may insert rows that name another part's). `shape` keys
 * the joined text (the parts' texts must depend on nothing else).
 */
export function joinedStatements(): (
  shape: string,
  parts: CompiledQuery[],
  last: CompiledQuery,
) => CompiledQuery {
  const texts = createBoundedMemo<string, string>(256);
  return (shape, parts, last) => {
    const text = texts(shape, () => {
      let offset = 0;
      const renumbered = [...parts, last].map((query) => {
        const from = offset;
        offset += query.parameters.length;
        return query.sql.replace(/\$(\d+)/g, (_, n: string) => `$${Number(n) + from}`);
      });
      const lastText = renumbered.pop()!;
      return `WITH ${renumbered.map((part, i) => `part${i} AS (${part})`).join(', ')} ${lastText}`;
    });
    return CompiledQuery.raw(
      text,
      [...parts, last].flatMap((query) => query.parameters),
    );
  };
}

/**
 * PostgreSQL: rows taken as one array parameter per column and read back as a table, `unnest($1::text[], …)
 * AS v (columns)` (its placeholders numbered from the first, one per column): a statement's text then stays
 * the same whatever number of rows it holds, so each connection parses and plans it once, where a VALUES list
 * is a new text (parsed, and planned five times before its plan is kept) for every row count. Each array is
 * read by a subquery, `(SELECT $1::text[])`, so that the planner estimates the same number of rows whether or
 * not it knows the values: planned with them (a custom plan) a short array looked cheaper than the plan kept
 * for any values (the generic plan), and the statement was planned again on every run (0.3 ms of
 * PostgreSQL's CPU per group of sends) instead of once per connection. `types` gives each column's type that
 * is not text. `columnArrays` makes the parameters.
 */
export function unnestedRows<C extends string>(
  columns: readonly C[],
  types: Partial<Record<C, string>> = {},
): string {
  const arrays = columns.map((column, i) => `(SELECT $${i + 1}::${types[column] ?? 'text'}[])`);
  return `unnest(${arrays.join(', ')}) AS v (${columns.join(', ')})`;
}

/** The parameters of unnestedRows: for each column, its values in the rows' order. */
export function columnArrays<C extends string>(
  columns: readonly C[],
  rows: ReadonlyArray<Readonly<Record<C, unknown>>>,
): unknown[][] {
  return columns.map((column) => rows.map((row) => row[column]));
}
