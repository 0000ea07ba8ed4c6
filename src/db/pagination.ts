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
