import { type Expression, type Kysely, type SqlBool, sql } from 'kysely';
import type { Database } from './schema.ts';

// Retention (RETENTION): each table's owner says which of its rows are old enough to go; this deletes them a
// batch at a time, so no statement holds a write lock for long beside sends and deliveries.

/** What one owner prunes: its old rows counted, and deleted a batch at a time. */
export interface PruneTarget {
  /** The table, as `postwire prune --dry-run` names it. */
  table: string;
  /** Rows that would go now. */
  count(): Promise<number>;
  /** Deletes up to `limit` of them; resolves to how many went. */
  deleteBatch(limit: number): Promise<number>;
}

/**
 * A prune target over `table`'s rows that `old` selects, deleted by `key` (the primary key, or for rows kept
 * per email, the email id: all of an email's rows go together).
 */
export function pruneTarget(
  db: Kysely<Database>,
  table: keyof Database,
  key: string,
  old: Expression<SqlBool>,
): PruneTarget {
  let after: string | undefined;
  return {
    table,
    async count() {
      const result = await sql<{
        n: string | number;
      }>`SELECT count(*) AS n FROM ${sql.table(table)} WHERE ${old}`.execute(db);
      return Number(result.rows[0]?.n ?? 0);
    },
    async deleteBatch(limit) {
      // In key order, from where the last batch ended: each batch starts past the rows deleted before it
      // (on PostgreSQL dead until vacuumed), instead of scanning over them again.
      const from = after === undefined ? sql`` : sql`AND ${sql.ref(key)} > ${after}`;
      const result = await sql<{ key: string }>`DELETE FROM ${sql.table(table)} WHERE ${sql.ref(key)} IN (
        SELECT ${sql.ref(key)} FROM ${sql.table(table)} WHERE ${old} ${from} ORDER BY ${sql.ref(key)} LIMIT ${limit})
        RETURNING ${sql.ref(key)} AS key`.execute(db);
      for (const row of result.rows) if (after === undefined || row.key > after) after = row.key;
      return result.rows.length;
    },
  };
}
