import type { Kysely } from 'kysely';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { mapPage, type Cursor, type Page, type PageRequest, pageByIdDesc } from '../../db/pagination.ts';
import { prepareQuery } from '../../db/prepared-query.ts';
import { createValidatedCache, type Stamps, type ThroughOptions } from '../../db/validated-cache.ts';
import { createBoundedMemo, createIdentityMemo } from '../../lib/memo.ts';
import { deleteProjectRow, updateProjectRow } from '../../db/project-rows.ts';

export interface WebhookRecord {
  id: string;
  projectId: string;
  url: string;
  enabled: boolean;
  events: string[];
  /** AES-256-GCM sealed signing secret; null when the webhook has none. */
  secretSealed: string | null;
  createdAt: string;
  updatedAt: string;
  /** Why the delivery worker disabled the webhook; null otherwise. */
  disabledReason: string | null;
  /** The secret a PATCH replaced, which still signs deliveries (next to the new one) until it expires. */
  previousSecretSealed: string | null;
  previousSecretExpiresAt: string | null;
  /** The payload format deliveries to it have. */
  format: WebhookFormat;
}

export type WebhookFormat = 'postwire' | 'resend';

const toRecord = (row: Row<'webhooks'>): WebhookRecord => ({
  id: row.id,
  projectId: row.project_id,
  url: row.url,
  enabled: Boolean(row.enabled),
  events: JSON.parse(row.events) as string[],
  secretSealed: row.secret_sealed,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  disabledReason: row.disabled_reason,
  previousSecretSealed: row.previous_secret_sealed,
  previousSecretExpiresAt: row.previous_secret_expires_at,
  format: row.format as WebhookFormat,
});

const toRow = (record: WebhookRecord) => ({
  id: record.id,
  project_id: record.projectId,
  url: record.url,
  enabled: record.enabled,
  events: JSON.stringify(record.events),
  secret_sealed: record.secretSealed,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
  disabled_reason: record.disabledReason,
  previous_secret_sealed: record.previousSecretSealed,
  previous_secret_expires_at: record.previousSecretExpiresAt,
  format: record.format,
});

/**
 * A project's webhooks are kept in memory whole, newest first, up to this many; a project with more is read
 * from the database page by page, as before.
 */
const CACHED_WEBHOOKS_PER_PROJECT = 500;
/** Projects whose webhooks one process keeps in memory; past this, the oldest goes. */
const CACHED_PROJECTS = 2_000;

/** Too many webhooks to keep in memory: read them from the database. */
const UNCACHED = 'uncached';
/** Pages kept per cached list (the first page, and a few cursors being walked). */
const PAGES_KEPT_PER_LIST = 8;

/**
 * `stamps`: keep each project's webhooks in memory while the webhooks stamp holds (validated-cache.ts), for
 * the list, a single webhook and the events' fan-out.
 */
export function createWebhookRepo(db: Kysely<Database>, stamps?: Stamps) {
  type PageQuery = (projectId: string, limit: number, cursorId?: string) => Promise<Row<'webhooks'>[]>;
  // The list runs on every GET /v1/webhooks: prepared once for each shape of page (the first one, older
  // than a cursor, newer than one).
  const pageQueries = new Map<string, PageQuery>();
  function pageQuery(cursor: Cursor, order: 'asc' | 'desc'): PageQuery {
    const shape = `${cursor?.op ?? 'first'} ${order}`;
    let query = pageQueries.get(shape);
    if (!query) {
      query = prepareQuery(db, (projectId: string, limit: number, cursorId?: string) => {
        let select = db.selectFrom('webhooks').selectAll().where('project_id', '=', projectId);
        if (cursor) select = select.where('id', cursor.op, cursorId!);
        return select.orderBy('id', order).limit(limit);
      });
      pageQueries.set(shape, query);
    }
    return query;
  }

  /** Each cached list's pages, by the page asked for. */
  const pagesOf = createIdentityMemo<
    readonly WebhookRecord[],
    (key: string, make: () => Promise<Page<WebhookRecord>>) => Promise<Page<WebhookRecord>>
  >();
  const cache =
    stamps &&
    createValidatedCache<readonly WebhookRecord[] | typeof UNCACHED>(stamps, {
      scope: 'webhooks',
      maxEntries: CACHED_PROJECTS,
    });
  const loadProject = async (via: Kysely<Database>, projectId: string) => {
    const rows = await via
      .selectFrom('webhooks')
      .selectAll()
      .where('project_id', '=', projectId)
      .orderBy('id', 'desc')
      .limit(CACHED_WEBHOOKS_PER_PROJECT + 1)
      .execute();
    return rows.length > CACHED_WEBHOOKS_PER_PROJECT ? UNCACHED : rows.map(toRecord);
  };
  /** The project's webhooks newest first, from memory; undefined when not cached here or too many. */
  async function cachedProject(projectId: string, transaction?: Transaction, through?: ThroughOptions) {
    const via = transaction?.db;
    if (!cache) return undefined;
    const webhooks = await cache.get(projectId, () => loadProject(via ?? db, projectId), via, through);
    return webhooks === UNCACHED ? undefined : webhooks;
  }

  return {
    /**
     * The project's enabled webhooks (or only `onlyWebhookId`, when enabled), oldest first: whom an event is
     * delivered to, read in `transaction` (the one the event is stored in, which also sees its own writes);
     * `unwritten`: it has written no webhooks (validated-cache.ts: the committed list serves).
     */
    async enabledWebhooks(
      projectId: string,
      { onlyWebhookId, unwritten }: { onlyWebhookId?: string | undefined; unwritten?: boolean },
      transaction: Transaction,
    ): Promise<ReadonlyArray<Pick<WebhookRecord, 'id' | 'events'>>> {
      const wanted = (webhook: WebhookRecord) =>
        webhook.enabled && (onlyWebhookId === undefined || webhook.id === onlyWebhookId);
      const cached = await cachedProject(projectId, transaction, { unwritten: unwritten ?? false });
      if (cached) return cached.filter(wanted).reverse();
      let query = transaction.db.selectFrom('webhooks').selectAll().where('project_id', '=', projectId);
      if (onlyWebhookId !== undefined) query = query.where('id', '=', onlyWebhookId);
      const rows = await query.where('enabled', '=', true).orderBy('id').execute();
      return rows.map(toRecord);
    },

    /**
     * Reads the webhooks' stamp now, outside any transaction, shared with the reads in flight: a transaction
     * that reads enabledWebhooks (`unwritten`) within the stamp's lease then reads no stamp of its own. Only
     * a saving, never a guarantee: the lease may run out first, and the transaction then reads it itself.
     * Without a lease (SQLite's stamps: a read of a few microseconds on every use) there is nothing to save.
     */
    async readStamp(): Promise<void> {
      if (stamps && stamps.leaseMs > 0) await stamps.current('webhooks');
    },

    async insert(record: WebhookRecord, transaction: Transaction): Promise<void> {
      await transaction.db.insertInto('webhooks').values(toRow(record)).execute();
    },

    async find(projectId: string, id: string): Promise<WebhookRecord | undefined> {
      const cached = await cachedProject(projectId);
      if (cached) return cached.find((webhook) => webhook.id === id);
      const row = await db
        .selectFrom('webhooks')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && toRecord(row);
    },

    /** From memory, a page asked for again returns the same (frozen) page while the webhooks are unchanged. */
    async list(projectId: string, page: PageRequest): Promise<Page<WebhookRecord>> {
      const cached = await cachedProject(projectId);
      if (cached) {
        const pages = pagesOf(cached, () => createBoundedMemo(PAGES_KEPT_PER_LIST));
        return pages(`${page.limit}:${page.after ?? ''}:${page.before ?? ''}`, () =>
          pageByIdDesc(page, async (cursor, order, limit) => pageOf(cached, cursor, order, limit)).then(
            (made) =>
              Object.freeze({ items: Object.freeze(made.items) as WebhookRecord[], hasMore: made.hasMore }),
          ),
        );
      }
      return mapPage(
        await pageByIdDesc(page, (cursor, order, limit) =>
          cursor
            ? pageQuery(cursor, order)(projectId, limit, cursor.id)
            : pageQuery(cursor, order)(projectId, limit),
        ),
        toRecord,
      );
    },

    /**
     * The project's webhooks in a failure streak, by id: since when every delivery attempt has failed. Read
     * from the table each time, not from memory: the streak is the delivery worker's bookkeeping, which the
     * cached records leave out (so that it does not invalidate them).
     */
    async failingSince(projectId: string): Promise<Map<string, string>> {
      const rows = await db
        .selectFrom('webhooks')
        .select(['id', 'failing_since'])
        .where('project_id', '=', projectId)
        .where('failing_since', 'is not', null)
        .execute();
      return new Map(rows.map((row) => [row.id, row.failing_since!]));
    },

    /** `reenabled` also forgets the failure streak, so the 5-day disable rule counts afresh. */
    /**
     * Writes only the columns that differ between `current` and `next`: the delivery worker may disable the
     * webhook meanwhile, and a PATCH of its url must not write `enabled` back over that.
     */
    async update(
      current: WebhookRecord,
      next: WebhookRecord,
      options: { reenabled?: boolean } = {},
      transaction?: Transaction,
    ): Promise<void> {
      const before: Record<string, unknown> = toRow(current);
      const changes = Object.fromEntries(
        Object.entries(toRow(next)).filter(([column, value]) => before[column] !== value),
      ) as Partial<ReturnType<typeof toRow>>;
      await updateProjectRow(
        transaction?.db ?? db,
        'webhooks',
        next.projectId,
        next.id,
        options.reenabled ? { ...changes, failing_since: null } : changes,
      );
    },

    /**
     * A delivery to the webhook succeeded at `now`: ends its failure streak. Skipped (no row write) when
     * nothing would change but a last success already newer than `recentSince`. In `transaction`: the
     * deliveries' outcome write's.
     */
    async recordSuccess(
      id: string,
      now: string,
      recentSince: string,
      transaction: Transaction,
    ): Promise<void> {
      await transaction.db
        .updateTable('webhooks')
        .set({ last_success_at: now, failing_since: null })
        .where('id', '=', id)
        .where((eb) =>
          eb.or([
            eb('failing_since', 'is not', null),
            eb('last_success_at', 'is', null),
            eb('last_success_at', '<', recentSince),
          ]),
        )
        .execute();
    },

    /**
     * Deliveries to the webhook failed from `firstAt` to `now`: starts its failure streak unless one is under
     * way, and disables it (returning why) when `disableNow` says so (a 410) or the streak has lasted
     * `disableAfterMs`. In `transaction`, as recordSuccess.
     */
    async recordFailures(
      id: string,
      failures: { firstAt: string; now: string; disableNow?: string | undefined; disableAfterMs: number },
      transaction: Transaction,
    ): Promise<string | undefined> {
      const { now } = failures;
      const db = transaction.db;
      await db
        .updateTable('webhooks')
        .set({ failing_since: failures.firstAt })
        .where('id', '=', id)
        .where('failing_since', 'is', null)
        .execute();
      const webhook = await db
        .selectFrom('webhooks')
        .select(['enabled', 'failing_since'])
        .where('id', '=', id)
        .executeTakeFirst();
      if (!webhook || !webhook.enabled) return undefined;
      let reason = failures.disableNow;
      const failingSince = webhook.failing_since ?? now;
      if (!reason && Date.parse(now) - Date.parse(failingSince) >= failures.disableAfterMs) {
        reason = `Every delivery attempt has failed since ${failingSince}; the webhook was disabled at ${now}.`;
      }
      if (!reason) return undefined;
      await db
        .updateTable('webhooks')
        .set({ enabled: false, disabled_reason: reason, updated_at: now })
        .where('id', '=', id)
        .where('enabled', '=', true)
        .execute();
      return reason;
    },

    async delete(projectId: string, id: string, transaction?: Transaction): Promise<boolean> {
      return deleteProjectRow(transaction?.db ?? db, 'webhooks', projectId, id);
    },
  };
}

/** What the page query would return, from a list held newest first. */
function pageOf<T extends { id: string }>(
  newestFirst: readonly T[],
  cursor: Cursor,
  order: 'asc' | 'desc',
  limit: number,
): T[] {
  const matching = cursor
    ? newestFirst.filter((item) => (cursor.op === '<' ? item.id < cursor.id : item.id > cursor.id))
    : newestFirst;
  return (order === 'desc' ? matching : [...matching].reverse()).slice(0, limit);
}

export type WebhookRepo = ReturnType<typeof createWebhookRepo>;
