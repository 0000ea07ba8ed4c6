import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Page, PageRequest } from '../db/pagination.ts';
import type { Transaction } from '../db/transaction.ts';
import type { IdPrefix } from '../lib/ids.ts';
import { projectOf } from './auth.ts';
import { list, listOf, toPageRequest } from './list.ts';

// The handlers of routes on one resource named in the path (`/v1/segments/:id`, `/contacts/:id/topics`), the
// caller's project's: what every such route does with the request, written once. A route whose handler does
// more (reads the request otherwise, prepares a write before its transaction) writes its handler itself.

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

/** writeUnderPath, `write` also given the request's body. */
export const writeUnderPathWithBody =
  <T, B>(write: (transaction: Transaction, projectId: string, id: string, body: B) => Promise<T>) =>
  async (request: UnderPathRequest & { body: B }, reply: FastifyReply) =>
    reply.transact((transaction) => write(transaction, projectOf(request), request.params.id, request.body));

/**
 * The handler of a route that calls the service with the project and the id of the resource named in the
 * path, and answers what it answers: a read (a view, or 404), or a write the service makes in its own
 * transaction.
 */
export const callUnderPath =
  <T>(call: (projectId: string, id: string) => Promise<T>) =>
  async (request: UnderPathRequest) =>
    call(projectOf(request), request.params.id);

/** callUnderPath, the service also given the request's input: its body, or (`from` 'query') its query. */
export const callUnderPathWith =
  <K extends 'body' | 'query', I, T>(
    from: K,
    call: (projectId: string, id: string, input: I) => Promise<T>,
  ) =>
  async (request: UnderPathRequest & { [key in K]: I }) =>
    call(projectOf(request), request.params.id, request[from]);

/**
 * callUnderPath for one of the resource's own parts named further down the path (`/:id/runs/:runId`): the
 * service also gets that part of the path, `request.params[key]`.
 */
export const callUnderPathAt =
  <K extends string, P, T>(key: K, call: (projectId: string, id: string, part: P) => Promise<T>) =>
  async (request: UnderPathRequest & { params: { [key in K]: P } }) =>
    call(projectOf(request), request.params.id, request.params[key]);

/** The page a list route's query asks for (toPageRequest reads these). */
type PageQuery = { limit?: number | undefined; after?: string | undefined; before?: string | undefined };

/** What a list route's request holds: the resource named in the path (`:id`), the page asked for and the rest of its query (`Q`). */
type ListUnderPathRequest<Q = unknown> = UnderPathRequest & { query: PageQuery & Q };

/** A read of a page of what belongs to the resource `id`, the project's; `query` is the request's whole query. */
type PageUnderPath<T, Q> = (projectId: string, id: string, page: PageRequest, query: Q) => Promise<Page<T>>;

/** The list handler both helpers below return: the page read, each item answered as `view(item)` or as it is. */
const listHandler =
  <T, U, Q>(prefix: IdPrefix, read: PageUnderPath<T, Q>, view?: (item: T) => U) =>
  async (request: ListUnderPathRequest<Q>) => {
    const { query } = request;
    const page = await read(projectOf(request), request.params.id, toPageRequest(query, prefix), query);
    return view === undefined ? list(page.items, page.hasMore) : listOf(page, view);
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
  // Only the three arguments: a reader's own optional fourth (a filter) is not handed the query by mistake.
  return listHandler(prefix, (projectId, id, page) => read(projectId, id, page), view);
}

/** listUnderPath for a list the query also filters: `read` gets the request's whole query (`Q`) too. */
export function filteredListUnderPath<T, Q>(
  prefix: IdPrefix,
  read: PageUnderPath<T, Q>,
): (request: ListUnderPathRequest<Q>) => Promise<ReturnType<typeof list<T>>>;
export function filteredListUnderPath<T, U, Q>(
  prefix: IdPrefix,
  read: PageUnderPath<T, Q>,
  view: (item: T) => U,
): (request: ListUnderPathRequest<Q>) => Promise<ReturnType<typeof list<U>>>;
export function filteredListUnderPath<T, U, Q>(
  prefix: IdPrefix,
  read: PageUnderPath<T, Q>,
  view?: (item: T) => U,
) {
  return listHandler(prefix, read, view);
}
