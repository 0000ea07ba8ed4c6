import type { Kysely } from 'kysely';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import { deleteProjectRow, updateProjectRow } from '../../db/project-rows.ts';
import type { AutomationRunStatus, AutomationStatus, Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Graph } from './graph.ts';

export interface AutomationRecord {
  id: string;
  projectId: string;
  name: string;
  status: AutomationStatus;
  triggerEvent: string;
  graph: Graph;
  /** The graph's version (automation_graphs): a new graph saved is the next. */
  graphVersion: number;
  createdAt: string;
  updatedAt: string;
}

export type RunCounts = Record<AutomationRunStatus, number>;

const toRecord = (row: Row<'automations'>): AutomationRecord => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  status: row.status,
  triggerEvent: row.trigger_event,
  graph: JSON.parse(row.graph) as Graph,
  graphVersion: Number(row.graph_version),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

const toRow = (record: AutomationRecord) => ({
  id: record.id,
  project_id: record.projectId,
  name: record.name,
  status: record.status,
  trigger_event: record.triggerEvent,
  graph: JSON.stringify(record.graph),
  graph_version: record.graphVersion,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** Graph versions kept in memory by a process: they never change once written. */
const GRAPHS_KEPT = 1000;

export const noRuns = (): RunCounts => ({ running: 0, waiting: 0, completed: 0, cancelled: 0, failed: 0 });

/** The automations table (the runs are runs.repo.ts's). */
export function createAutomationRepo(db: Kysely<Database>) {
  const select = (projectId: string, via: Kysely<Database> = db) =>
    via.selectFrom('automations').selectAll().where('project_id', '=', projectId);

  const graphs = new Map<string, Graph>();

  /** Writes the record's graph as its version (a new automation's first, an update's next). */
  async function insertGraph(record: AutomationRecord, transaction: Transaction): Promise<void> {
    await transaction.db
      .insertInto('automation_graphs')
      .values({
        automation_id: record.id,
        version: record.graphVersion,
        graph: JSON.stringify(record.graph),
        created_at: record.updatedAt,
      })
      .execute();
  }

  return {
    async insert(record: AutomationRecord, transaction: Transaction): Promise<void> {
      await transaction.db.insertInto('automations').values(toRow(record)).execute();
      await insertGraph(record, transaction);
    },

    /** An automation's graph as it was at `version` (what a run follows), read once per process. */
    async graphOf(automationId: string, version: number): Promise<Graph | undefined> {
      const key = `${automationId} ${version}`;
      const kept = graphs.get(key);
      if (kept) return kept;
      const row = await db
        .selectFrom('automation_graphs')
        .select('graph')
        .where('automation_id', '=', automationId)
        .where('version', '=', version)
        .executeTakeFirst();
      if (!row) return undefined;
      const graph = JSON.parse(row.graph) as Graph;
      if (graphs.size >= GRAPHS_KEPT) graphs.delete(graphs.keys().next().value!);
      graphs.set(key, graph);
      return graph;
    },

    async find(
      projectId: string,
      id: string,
      transaction?: Transaction,
    ): Promise<AutomationRecord | undefined> {
      const row = await select(projectId, transaction?.db).where('id', '=', id).executeTakeFirst();
      return row && toRecord(row);
    },

    /** By id alone: a run's automation, for the runs' worker. */
    async findById(id: string, transaction?: Transaction): Promise<AutomationRecord | undefined> {
      const row = await (transaction?.db ?? db)
        .selectFrom('automations')
        .selectAll()
        .where('id', '=', id)
        .executeTakeFirst();
      return row && toRecord(row);
    },

    async list(
      projectId: string,
      page: PageRequest,
      status: AutomationStatus | undefined,
    ): Promise<Page<AutomationRecord>> {
      let query = select(projectId);
      if (status !== undefined) query = query.where('status', '=', status);
      return mapPage(await pageOfQuery(query, page), toRecord);
    },

    /** The project's enabled automations an event starts. */
    async triggeredBy(
      projectId: string,
      eventName: string,
      transaction: Transaction,
    ): Promise<AutomationRecord[]> {
      const rows = await select(projectId, transaction.db)
        .where('trigger_event', '=', eventName)
        .where('status', '=', 'enabled')
        .orderBy('id')
        .execute();
      return rows.map(toRecord);
    },

    /** Writes the record; its graph too when it is a new version (`graphVersion` moved on). */
    async update(
      record: AutomationRecord,
      previousVersion: number,
      transaction: Transaction,
    ): Promise<boolean> {
      const { id: _id, project_id: _project, created_at: _created, ...changes } = toRow(record);
      if (!(await updateProjectRow(transaction.db, 'automations', record.projectId, record.id, changes))) {
        return false;
      }
      if (record.graphVersion !== previousVersion) await insertGraph(record, transaction);
      return true;
    },

    async delete(projectId: string, id: string, transaction: Transaction): Promise<boolean> {
      return deleteProjectRow(transaction.db, 'automations', projectId, id);
    },

    /** Each automation's runs by state (in `transaction` when given: on SQLite a read beside one waits for it). */
    async runCounts(ids: readonly string[], transaction?: Transaction): Promise<Map<string, RunCounts>> {
      const counts = new Map<string, RunCounts>(ids.map((id) => [id, noRuns()]));
      if (ids.length === 0) return counts;
      const rows = await (transaction?.db ?? db)
        .selectFrom('automation_runs')
        .select((eb) => ['automation_id', 'status', eb.fn.countAll<number | string>().as('count')])
        .where('automation_id', 'in', [...ids])
        .groupBy(['automation_id', 'status'])
        .execute();
      for (const row of rows) counts.get(row.automation_id)![row.status] = Number(row.count);
      return counts;
    },
  };
}

export type AutomationRepo = ReturnType<typeof createAutomationRepo>;
