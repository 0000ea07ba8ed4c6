// The cached writes, defined once: for each stamp scope of the in-memory reads (validated-cache.ts), the
// tables whose rows those reads hold and the columns whose change gives the scope a new stamp.
//
// Two things follow this definition and must agree with it:
// - the triggers that bump the stamps in the database (migrations 0015 and 0018: an INSERT or DELETE of a
//   row, or an UPDATE naming one of the columns in its SET list, as `UPDATE OF` fires on both engines);
// - this process's own detector of its cached writes on PostgreSQL (writesCachedRows, below), after which
//   its answers wait out the other processes' stamp leases.
// test/cached-tables.test.ts reads the triggers from each engine's catalog and compares them with this list;
// changing it means a migration that recreates the triggers to match.
//
// Columns outside the lists are bookkeeping the cached reads do not hold (a webhook's last_success_at and
// failing_since, a domain's check lease and schedule): writing them changes no stamp and makes nobody wait.

export interface CachedTable {
  table: string;
  /** Only an UPDATE naming one of these columns counts; every UPDATE counts when absent. */
  columns?: readonly string[];
}

export const CACHED_WRITES = {
  api_keys: [{ table: 'api_keys' }],
  webhooks: [
    {
      table: 'webhooks',
      columns: [
        'id',
        'project_id',
        'url',
        'enabled',
        'events',
        'secret_sealed',
        'created_at',
        'updated_at',
        'disabled_reason',
        'previous_secret_sealed',
        'previous_secret_expires_at',
        'format',
      ],
    },
  ],
  templates: [{ table: 'templates' }, { table: 'template_versions' }],
  domains: [{ table: 'domains', columns: ['id', 'project_id', 'name', 'status', 'return_path_verified'] }],
} as const satisfies Record<string, readonly CachedTable[]>;

/** A version stamp's scope: what one stamp vouches for. */
export type StampScope = keyof typeof CACHED_WRITES;

/**
 * Tables whose deletion reaches cached rows by cascade (their foreign keys), so that the cached tables'
 * DELETE triggers fire: a project's deletion takes its keys, webhooks, templates and domains with it.
 */
export const CASCADING_TO_CACHED: readonly string[] = ['projects'];

const cachedTables = new Map<string, CachedTable>(
  Object.values(CACHED_WRITES).flatMap((tables) => tables.map((table) => [table.table, table] as const)),
);

const WRITTEN_TABLES = [...cachedTables.keys(), ...CASCADING_TO_CACHED].join('|');
/**
 * A write to a cached table, or a deletion that cascades to one, its table quoted or not. Group 1: the verb,
 * 2: the table.
 */
const CACHED_TABLE_WRITE = `\\b(insert\\s+into|update|delete\\s+from)\\s+"?(${WRITTEN_TABLES})"?(?=[\\s(]|$)`;
const LEADING_CACHED_TABLE_WRITE = new RegExp(`^\\s*${CACHED_TABLE_WRITE}`, 'i');
const ANY_CACHED_TABLE_WRITE = new RegExp(CACHED_TABLE_WRITE, 'gi');

/**
 * The cached-table writes a statement's text holds. Every statement run on PostgreSQL is read so: a write is
 * at a statement's start (one anchored match, as cheap as a regex gets) unless the statement is a WITH, whose
 * parts may write anywhere.
 */
function cachedTableWrites(sql: string): Iterable<RegExpMatchArray> {
  if (/^\s*with\b/i.test(sql)) return sql.matchAll(ANY_CACHED_TABLE_WRITE);
  const leading = LEADING_CACHED_TABLE_WRITE.exec(sql);
  return leading ? [leading] : [];
}

/**
 * Whether a statement's SQL text writes what a stamp vouches for, as the triggers see it: an INSERT or
 * DELETE of a cached table (or a DELETE that cascades to one), or an UPDATE whose SET list names one of its
 * table's cached columns. Text it cannot read counts as a cached write: waiting for nothing is only slower.
 */
export function writesCachedRows(sql: string): boolean {
  for (const match of cachedTableWrites(sql)) {
    const verb = match[1]!.toLowerCase();
    const table = cachedTables.get(match[2]!.toLowerCase());
    if (!verb.startsWith('update')) {
      if (table || verb.startsWith('delete')) return true;
      continue;
    }
    if (!table) continue;
    if (!table.columns) return true;
    const assigned = assignedColumns(sql, match.index! + match[0].length);
    if (!assigned || assigned.some((column) => table.columns!.includes(column))) return true;
  }
  return false;
}

/** What ends an UPDATE's SET list, read where a space is. */
const END_OF_SET = /\s+(?:where|from|returning)\b/iy;

/**
 * The columns an UPDATE's SET list names, read from `from` (just after the table's name): each assignment,
 * split at commas outside parentheses and quotes, up to its WHERE, FROM or RETURNING (or the statement's
 * end). Undefined when the text is not of that form.
 */
function assignedColumns(sql: string, from: number): string[] | undefined {
  const set = /^\s+(?:as\s+"?\w+"?\s+)?set\s/i.exec(sql.slice(from));
  if (!set) return undefined;
  const assignments: string[] = [];
  let depth = 0;
  let start = from + set[0].length;
  let index = start;
  for (; index < sql.length; index++) {
    const char = sql[index]!;
    if (char === "'") {
      index = sql.indexOf("'", index + 1);
      if (index < 0) return undefined;
    } else if (char === '(') depth++;
    else if (char === ')') {
      // The end of a WITH's part.
      if (depth === 0) break;
      depth--;
    } else if (depth === 0 && char === ',') {
      assignments.push(sql.slice(start, index));
      start = index + 1;
    } else if (depth === 0 && /\s/.test(char)) {
      END_OF_SET.lastIndex = index;
      if (END_OF_SET.test(sql)) break;
    }
  }
  assignments.push(sql.slice(start, index));
  const columns: string[] = [];
  for (const assignment of assignments) {
    const column = /^\s*"?(\w+)"?\s*=/.exec(assignment);
    if (!column) return undefined;
    columns.push(column[1]!.toLowerCase());
  }
  return columns;
}
