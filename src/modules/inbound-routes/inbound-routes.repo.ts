import type { Insertable, Kysely } from 'kysely';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, RouteAction, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { deleteProjectRow, updateProjectRow } from '../../db/project-rows.ts';

// The inbound_routes table, written only here.

export interface InboundRouteRecord {
  id: string;
  projectId: string;
  domain: string;
  localPart: string;
  priority: number;
  action: RouteAction;
  rejectMessage: string | null;
  spamRejectScore: number | null;
  enabled: boolean;
  createdAt: string;
  updatedAt: string;
}

export type RouteChanges = Partial<
  Pick<
    InboundRouteRecord,
    'domain' | 'localPart' | 'priority' | 'action' | 'rejectMessage' | 'spamRejectScore' | 'enabled'
  >
>;

const toRecord = (row: Row<'inbound_routes'>): InboundRouteRecord => ({
  id: row.id,
  projectId: row.project_id,
  domain: row.domain,
  localPart: row.local_part,
  priority: Number(row.priority),
  action: row.action,
  rejectMessage: row.reject_message,
  spamRejectScore: row.spam_reject_score === null ? null : Number(row.spam_reject_score),
  enabled: Boolean(row.enabled),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

/**
 * A route's settings and times under their snake_case names: the table's columns, which the API answers under
 * the same names (toInboundRouteView).
 */
export const snakeCaseSettings = (record: InboundRouteRecord) => ({
  priority: record.priority,
  action: record.action,
  reject_message: record.rejectMessage,
  spam_reject_score: record.spamRejectScore,
  enabled: record.enabled,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** The row an insert writes: toRecord the other way. */
const toRow = (record: InboundRouteRecord): Insertable<Database['inbound_routes']> => ({
  id: record.id,
  project_id: record.projectId,
  domain: record.domain,
  local_part: record.localPart,
  ...snakeCaseSettings(record),
});

export function createInboundRouteRepo(db: Kysely<Database>) {
  return {
    async insert(record: InboundRouteRecord, transaction: Transaction): Promise<void> {
      await transaction.db.insertInto('inbound_routes').values(toRow(record)).execute();
    },

    async list(projectId: string, page: PageRequest): Promise<Page<InboundRouteRecord>> {
      const query = db.selectFrom('inbound_routes').selectAll().where('project_id', '=', projectId);
      return mapPage(await pageOfQuery(query, page), toRecord);
    },

    async find(projectId: string, id: string): Promise<InboundRouteRecord | undefined> {
      const row = await db
        .selectFrom('inbound_routes')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row ? toRecord(row) : undefined;
    },

    async update(
      projectId: string,
      id: string,
      changes: RouteChanges,
      now: string,
      transaction?: Transaction,
    ): Promise<boolean> {
      return updateProjectRow(transaction?.db ?? db, 'inbound_routes', projectId, id, {
        ...(changes.domain !== undefined ? { domain: changes.domain } : {}),
        ...(changes.localPart !== undefined ? { local_part: changes.localPart } : {}),
        ...(changes.priority !== undefined ? { priority: changes.priority } : {}),
        ...(changes.action !== undefined ? { action: changes.action } : {}),
        ...(changes.rejectMessage !== undefined ? { reject_message: changes.rejectMessage } : {}),
        ...(changes.spamRejectScore !== undefined ? { spam_reject_score: changes.spamRejectScore } : {}),
        ...(changes.enabled !== undefined ? { enabled: changes.enabled } : {}),
        updated_at: now,
      });
    },

    async delete(projectId: string, id: string, transaction?: Transaction): Promise<boolean> {
      return deleteProjectRow(transaction?.db ?? db, 'inbound_routes', projectId, id);
    },

    /**
     * The enabled routes for a domain name, in the order they are tried, of the one project that may receive
     * for it: the project holding the name verified, with receiving on and its MX verified. Another project's
     * routes for the same name (it added the domain but never proved control) are never among them.
     */
    async receivingRoutes(domain: string): Promise<InboundRouteRecord[]> {
      const rows = await db
        .selectFrom('inbound_routes as r')
        .innerJoin('domains as d', (join) =>
          join.onRef('d.project_id', '=', 'r.project_id').onRef('d.name', '=', 'r.domain'),
        )
        .selectAll('r')
        .where('r.domain', '=', domain)
        .where('r.enabled', '=', true)
        .where('d.status', '=', 'verified')
        .where('d.receiving', '=', true)
        .where('d.receiving_verified', '=', true)
        .orderBy('r.priority')
        .orderBy('r.id')
        .limit(1000)
        .execute();
      return rows.map(toRecord);
    },
  };
}

export type InboundRouteRepo = ReturnType<typeof createInboundRouteRepo>;
