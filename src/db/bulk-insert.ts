import { CompiledQuery } from 'kysely';
import type { Engine } from './handle.ts';
import { inColumnOrder, placeholders, textsByShape } from './sql-text.ts';

// A batch of rows written in one statement, in the form that costs each engine least.

type Rows<C extends string> = ReadonlyArray<Readonly<Record<C, unknown>>>;

/**
 * A multi-row INSERT of `columns` into `table`, in one statement whatever the number of rows, followed by
 * `onConflict` (an `ON CONFLICT …` clause, which both engines spell alike).
 *
 * SQLite: a `VALUES` list of placeholders (its text kept per number of rows), bound in this process.
 *
 * PostgreSQL: every row in one JSON parameter (`json_populate_recordset` over the table's own row type), and
 * each distinct value of the `shared` columns (long texts that repeat from row to row) once, in a second JSON
 * parameter that the rows point into by position. A hundred logs of a read served again (bench/api.ts) were
 * 1,100 parameters and 170 KB to write to the database's socket, the same 1.5 KiB answer a hundred times:
 * that write was a fifth of the API process's busy time (its share of the loopback's work included). As one
 * text for every batch, it is prepared once per connection. Lone surrogates, which PostgreSQL's JSON refuses
 * and its text parameters took as U+FFFD, are made U+FFFD here.
 */
export function bulkInsert<C extends string>(
  engine: Engine,
  table: string,
  columns: readonly C[],
  { shared = [], onConflict = '' }: { shared?: readonly C[]; onConflict?: string } = {},
): (rows: Rows<C>) => CompiledQuery {
  const after = onConflict === '' ? '' : ` ${onConflict}`;
  if (engine !== 'postgres') {
    const texts = textsByShape((shape) => {
      const slot = placeholders(engine);
      const row = () => `(${columns.map(slot).join(', ')})`;
      const values = Array.from({ length: Number(shape) }, row).join(', ');
      return `INSERT INTO ${table} (${columns.join(', ')}) VALUES ${values}${after}`;
    });
    return (rows) =>
      CompiledQuery.raw(
        texts(String(rows.length)),
        rows.flatMap((row) => inColumnOrder(columns, row)),
      );
  }

  const isShared = new Set<string>(shared);
  const joins = shared.map(
    (column, i) => ` LEFT JOIN texts AS t${i} ON t${i}.n = CAST(r.${column} AS bigint)`,
  );
  const selected = columns.map((column) =>
    isShared.has(column) ? `t${shared.indexOf(column)}.text` : `r.${column}`,
  );
  const text =
    `WITH texts AS MATERIALIZED (SELECT text, n FROM json_array_elements_text($2::json) WITH ORDINALITY AS t (text, n)) ` +
    `INSERT INTO ${table} (${columns.join(', ')}) SELECT ${selected.join(', ')} ` +
    `FROM json_populate_recordset(NULL::${table}, $1::json) AS r${joins.join('')}${after}`;

  return (rows) => {
    const texts: unknown[] = [];
    const positions = new Map<unknown, number>();
    const positionOf = (value: unknown) => {
      if (value === null || value === undefined) return null;
      let position = positions.get(value);
      if (position === undefined) {
        position = texts.push(value);
        positions.set(value, position);
      }
      return position;
    };
    const objects = rows.map((row) => {
      const object: Record<string, unknown> = {};
      for (const column of columns)
        object[column] = isShared.has(column) ? positionOf(row[column]) : row[column];
      return object;
    });
    return CompiledQuery.raw(text, [wellFormedJson(objects), wellFormedJson(texts)]);
  };
}

/** An escaped lone surrogate in JSON.stringify's text (it escapes nothing else of that range). */
const LONE_SURROGATE = /\\ud[89a-f]/i;

const wellFormed = (_key: string, value: unknown) =>
  typeof value === 'string' ? value.toWellFormed() : value;

/** JSON that PostgreSQL's parser takes: lone surrogates as U+FFFD, as a text parameter would have them. */
function wellFormedJson(value: unknown): string {
  const json = JSON.stringify(value);
  // A text holding a backslash before `ud800` matches too; it is then written again, unchanged.
  return LONE_SURROGATE.test(json) ? JSON.stringify(value, wellFormed) : json;
}
