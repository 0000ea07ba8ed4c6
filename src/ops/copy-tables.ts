// What `postwire copy-to` copies: which tables, with which columns, in which order (parents before the
// tables whose foreign keys point at them). copy-to.ts runs the copy.
import type { DatabaseSync } from 'node:sqlite';
import type pg from 'pg';

/**
 * Tables not copied, and why:
 * - postwire_migrations: the target's own, written when the same migrations run on it (the copy checks that
 *   both databases have the same ones applied);
 * - cache_stamps: version stamps for in-memory reads; on PostgreSQL their values come from a sequence, and
 *   the triggers that watch the copied tables give them new values as the rows arrive, which is all a stamp
 *   needs (a value it never had before);
 * - stamp_listeners: PostgreSQL's processes that hear of cached writes (migration 0048), its own processes',
 *   none on SQLite.
 * Everything else is copied as is, the queues included: a pending job stays due, and a job leased by a worker
 * that stopped comes back at once, since its worker's row in queue_workers has a heartbeat long past.
 */
export const NOT_COPIED = new Set(['postwire_migrations', 'cache_stamps', 'stamp_listeners']);

/** Where an interrupted copy records how far each table got; dropped when the copy is complete. */
export const PROGRESS_TABLE = 'postwire_copy_progress';

/** A reason to refuse that the operator can act on: the CLI prints the message alone. */
export class CopyError extends Error {}

export interface Column {
  name: string;
  /** The target's type, which says how a SQLite value is converted. */
  type: string;
}

export interface TablePlan {
  name: string;
  columns: Column[];
  primaryKey: string[];
}

/**
 * The tables to copy, parents before the tables whose foreign keys point at them, each with its columns (the
 * same set on both sides, the target's types) and its primary key (the order rows are read and resumed in).
 */
export async function planTables(source: DatabaseSync, target: pg.Client): Promise<TablePlan[]> {
  const sourceTables = (
    source
      .prepare(
        "select name from sqlite_master where type = 'table' and name not like 'sqlite\\_%' escape '\\'",
      )
      .all() as Array<{ name: string }>
  )
    .map((row) => row.name)
    .filter((name) => !NOT_COPIED.has(name));
  const targetColumns = await target.query<{ table_name: string; column_name: string; data_type: string }>(
    `select table_name, column_name, data_type from information_schema.columns
      where table_schema = current_schema() order by table_name, ordinal_position`,
  );
  const columnsByTable = new Map<string, Column[]>();
  for (const row of targetColumns.rows) {
    if (NOT_COPIED.has(row.table_name) || row.table_name === PROGRESS_TABLE) continue;
    const list = columnsByTable.get(row.table_name) ?? [];
    list.push({ name: row.column_name, type: row.data_type });
    columnsByTable.set(row.table_name, list);
  }
  const missing = sourceTables.filter((name) => !columnsByTable.has(name));
  const extra = [...columnsByTable.keys()].filter((name) => !sourceTables.includes(name));
  if (missing.length > 0 || extra.length > 0) {
    throw new CopyError(
      `the two databases do not have the same tables (only in SQLite: ${missing.join(', ') || 'none'}; ` +
        `only in PostgreSQL: ${extra.join(', ') || 'none'}).`,
    );
  }

  const plans = new Map<string, TablePlan>();
  for (const name of sourceTables) {
    const info = source.prepare(`select name, pk from pragma_table_info(?)`).all(name) as Array<{
      name: string;
      pk: number;
    }>;
    const columns = columnsByTable.get(name)!;
    const sourceNames = info
      .map((column) => column.name)
      .sort()
      .join(',');
    const targetNames = columns
      .map((column) => column.name)
      .sort()
      .join(',');
    if (sourceNames !== targetNames) {
      throw new CopyError(
        `table ${name} has different columns (SQLite: ${sourceNames}; PostgreSQL: ${targetNames}).`,
      );
    }
    const primaryKey = info
      .filter((column) => Number(column.pk) > 0)
      .sort((a, b) => Number(a.pk) - Number(b.pk))
      .map((column) => column.name);
    if (primaryKey.length === 0) throw new CopyError(`table ${name} has no primary key to copy it by.`);
    plans.set(name, { name, columns, primaryKey });
  }

  const references = await target.query<{ child: string; parent: string }>(
    `select child.relname as child, parent.relname as parent
      from pg_constraint c
      join pg_class child on child.oid = c.conrelid
      join pg_class parent on parent.oid = c.confrelid
      join pg_namespace n on n.oid = child.relnamespace
      where c.contype = 'f' and n.nspname = current_schema()`,
  );
  return parentsFirst([...plans.values()], references.rows);
}

function parentsFirst(plans: TablePlan[], references: Array<{ child: string; parent: string }>): TablePlan[] {
  const ordered: TablePlan[] = [];
  const placed = new Set<string>();
  const visiting = new Set<string>();
  const byName = new Map(plans.map((plan) => [plan.name, plan]));
  const visit = (plan: TablePlan) => {
    if (placed.has(plan.name)) return;
    if (visiting.has(plan.name)) throw new CopyError(`foreign keys form a cycle through ${plan.name}.`);
    visiting.add(plan.name);
    for (const reference of references) {
      if (reference.child !== plan.name || reference.parent === plan.name) continue;
      const parent = byName.get(reference.parent);
      if (parent) visit(parent);
    }
    visiting.delete(plan.name);
    placed.add(plan.name);
    ordered.push(plan);
  };
  for (const plan of [...plans].sort((a, b) => a.name.localeCompare(b.name))) visit(plan);
  return ordered;
}
