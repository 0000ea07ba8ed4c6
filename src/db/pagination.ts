import { type SelectQueryBuilder, sql } from 'kysely';

export interface PageRequest {
  limit: number;
  /** Return items older than this id (the next page, newest first). */
  after?: string | undefined;
  /** Return items newer than this id (the previous page). */
  before?: string | undefined;
}

export interface Page<T> {
  items: T[];
  hasMore: boolean;
}

/**
 * A page of the rows `query` selects, by pageByIdDesc over its `id` column (`column`: that column's name in
 * a join, `t.id`): the query with the cursor's condition, the order and the limit added. Where a list adds
 * nothing to its filters, the keyset rule is this one function.
 */
export function pageOfQuery<DB, TB extends keyof DB, O>(
  query: SelectQueryBuilder<DB, TB, O>,
  page: PageRequest,
  column = 'id',
): Promise<Page<O>> {
  const id = sql.ref(column);
  return pageByIdDesc(page, (cursor, order, limit) =>
    (cursor ? query.where(id, cursor.op, cursor.id) : query).orderBy(id, order).limit(limit).execute(),
  );
}

/** A page of `f(item)` for each item of `page`, in its order. */
export const mapPage = <T, U>(page: Page<T>, f: (item: T) => U): Page<U> => ({
  items: page.items.map(f),
  hasMore: page.hasMore,
});

export type Cursor = { op: '<' | '>'; id: string } | undefined;

/**
 * Keyset pagination over time-sortable ids, newest first. `fetch` runs the repository's own query with the
 * cursor condition on `id`, in the order given, for at most `limit` rows; one extra row says `has_more`.
 */
export async function pageByIdDesc<T>(
  page: PageRequest,
  fetch: (cursor: Cursor, order: 'asc' | 'desc', limit: number) => Promise<T[]>,
): Promise<Page<T>> {
  if (page.before !== undefined) {
    const rows = await fetch({ op: '>', id: page.before }, 'asc', page.limit + 1);
    const hasMore = rows.length > page.limit;
    return { items: rows.slice(0, page.limit).reverse(), hasMore };
  }
  const cursor: Cursor = page.after !== undefined ? { op: '<', id: page.after } : undefined;
  const rows = await fetch(cursor, 'desc', page.limit + 1);
  return { items: rows.slice(0, page.limit), hasMore: rows.length > page.limit };
}
