// What every command of the `postwire` CLI is and is given, and how commands print rows.
import type { ParseArgsConfig } from 'node:util';
import type { Config } from '../config.ts';
import type { DatabaseHandle } from '../db/connection.ts';
import type { Output } from '../lib/operator-output.ts';
import type { Services } from '../services.ts';

export interface CliIo {
  stdout: Output;
  stderr: Output;
  env: Record<string, string | undefined>;
}

/** A mistake in how the command was called: answered with the usage text and exit code 2. */
export class UsageError extends Error {}

export type Options = NonNullable<ParseArgsConfig['options']>;
export type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

export interface Context {
  io: CliIo;
  config: Config;
  /** Opens (and migrates) the database on first use; closed when the command ends. */
  database(): Promise<DatabaseHandle>;
  /** The services on that database, built on first use, as the server builds them. */
  services(): Promise<Services>;
}

export interface Command {
  /** The words that name it, e.g. ['keys', 'create']. */
  words: string[];
  options?: Options;
  /** Names of the positional arguments it requires. */
  args?: string[];
  /** String options that must be given. */
  required?: string[];
  /** Returns undefined when the process keeps running (serve). */
  run(context: Context, values: Values, args: string[]): Promise<number | undefined>;
}

export const json = { json: { type: 'boolean' } } as const satisfies Options;

/** Rows as JSON with `--json`, else as a table: its `headers`, each row's `cells`, and what an empty one says. */
export function listing<Row>(
  values: Values,
  rows: Row[],
  shown: { headers: string[]; cells: (row: Row) => string[]; empty: string },
): string {
  return values.json === true
    ? `${JSON.stringify(rows, null, 2)}\n`
    : table(shown.headers, rows.map(shown.cells), shown.empty);
}

/** `text` on one line (control characters as spaces), cut to `max` characters with an ellipsis. */
export function oneLine(text: string, max: number): string {
  const flat = text.replace(/\p{Cc}+/gu, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function table(headers: string[], rows: string[][], empty: string): string {
  if (rows.length === 0) return `${empty}\n`;
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join('  ')
      .trimEnd();
  return `${[headers, ...rows].map(line).join('\n')}\n`;
}
