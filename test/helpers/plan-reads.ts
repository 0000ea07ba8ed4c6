/** Rows a PostgreSQL plan's scans of `table` read (EXPLAIN (ANALYZE, FORMAT JSON)): returned and filtered out, over every loop. */
export function rowsRead(node: Record<string, any>, table: string): number {
  const own =
    node['Relation Name'] === table
      ? (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)) * node['Actual Loops']
      : 0;
  const children = (node.Plans as Record<string, any>[] | undefined) ?? [];
  return own + children.reduce((sum, child) => sum + rowsRead(child, table), 0);
}
