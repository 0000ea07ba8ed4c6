import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Page, PageRequest } from '../db/pagination.ts';
import type { Transaction } from '../db/transaction.ts';
import type { IdPrefix } from '../lib/ids.ts';
import { projectOf } from './auth.ts';
import { list, listOf, toPageRequest } from './list.ts';

// The handlers of routes on one resource named in the path (`/v1/segments/:id`, `/contacts/:id/topics`), the
// caller's project's: what every such route does with the request, written once. A route whose handler does
// more (reads the body, answers with a view of its own) writes its handler itself.

/** A request to a route on the resource named in the path. */
type UnderPathRequest = FastifyRequest & { params: { id: string } };

/**
 * The handler of a write to the resource named in the path: `write` gets the request's transaction, the
 * project and the id, run by `reply.transact` (with an Idempotency-Key, its answer is saved with the write).
 */
export const writeUnderPath =
  <T>(write: (transaction: Transaction, projectId: string, id: string) => Promise<T>) =>
  async (request: UnderPathRequest, reply: FastifyReply) =>
    reply.transact((transaction) => write(transaction, projectOf(request), request.params.id));

/** What a list route's request holds: the resource named in the path (`:id`) and the page asked for. */
type ListUnderPathRequest = UnderPathRequest & {
  query: { limit?: number | undefined; after?: string | undefined; before?: string | undefined };
};

/**
 * The handler of a list of what belongs to the resource named in the path (`:id`, the caller's project's):
 * `read` gets the project, that id and the page the query asks for (cursors of `prefix`); each item is
 * answered as `view(item)`, or as it is.
 */
export function listUnderPath<T>(
  prefix: IdPrefix,
  read: (projectId: string, id: string, page: PageRequest) => Promise<Page<T>>,
): (request: ListUnderPathRequest) => Promise<ReturnType<typeof list<T>>>;
export function listUnderPath<T, U>(
  prefix: IdPrefix,
  read: (projectId: string, id: string, page: PageRequest) => Promise<Page<T>>,
  view: (item: T) => U,
): (request: ListUnderPathRequest) => Promise<ReturnType<typeof list<U>>>;
export function listUnderPath<T, U>(
  prefix: IdPrefix,
  read: (projectId: string, id: string, page: PageRequest) => Promise<Page<T>>,
  view?: (item: T) => U,
) {
  return async (request: ListUnderPathRequest) => {
    const page = await read(projectOf(request), request.params.id, toPageRequest(request.query, prefix));
    return view === undefined ? list(page.items, page.hasMore) : listOf(page, view);
  };
}
