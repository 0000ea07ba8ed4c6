import type { Kysely } from 'kysely';
import { type Page, type PageRequest, pageOfQuery, mapPage } from '../../db/pagination.ts';
import type { AutomationRunStatus, AutomationRunStepsTable, Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';

// The runs and their steps: the rows the trigger inserts, the API's reads and stops, a waiting run resumed by its
// event, and a step's record with the run's move past it (`advance`). The runs' queue statements (claim,
// release, when the next is due) are runs.queue.ts's.

export interface RunRecord {
  id: string;
  projectId: string;
  automationId: string;
  contactId: string;
  triggerSendId: string | null;
  /** The automation's graph version the run follows, whatever updates came after it started. */
  graphVersion: number;
  triggerPayload: Record<string, unknown>;
  /** The latest awaited event's payload (null until a wait receives one). */
  eventPayload: Record<string, unknown> | null;
  status: AutomationRunStatus;
  currentStep: string;
  resumedBy: { event: string; payload: Record<string, unknown> } | null;
  waitingEvent: string | null;
  stepCount: number;
  dueAt: string | null;
  reason: string | null;
  startedAt: string | null;
  completedAt: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface RunStepRecord {
  key: string;
  type: string;
  status: AutomationRunStepsTable['status'];
  output: Record<string, unknown> | null;
  error: Record<string, unknown> | null;
  startedAt: string | null;
  completedAt: string | null;
  createdAt: string;
}

/** Where a run goes after a step: its next step, state and due time. */
export interface RunMove {
  status: AutomationRunStatus;
  currentStep: string;
  waitingEvent: string | null;
  dueAt: string | null;
  reason: string | null;
  completedAt: string | null;
  /** A wait received its event: what `event.*` reads from now on. */
  eventPayload?: Record<string, unknown> | undefined;
}

const parse = <T>(text: string | null): T | null => (text === null ? null : (JSON.parse(text) as T));

const toRecord = (row: Row<'automation_runs'>): RunRecord => ({
  id: row.id,
  projectId: row.project_id,
  automationId: row.automation_id,
  contactId: row.contact_id,
  triggerSendId: row.trigger_send_id,
  graphVersion: Number(row.graph_version),
  triggerPayload: JSON.parse(row.trigger_payload) as Record<string, unknown>,
  eventPayload: parse(row.event_payload),
  status: row.status,
  currentStep: row.current_step,
  resumedBy: parse(row.resumed_by),
  waitingEvent: row.waiting_event,
  stepCount: Number(row.step_count),
  dueAt: row.due_at,
  reason: row.reason,
  startedAt: row.started_at,
  completedAt: row.completed_at,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

/** A run as the API shows it: with its contact's address, null once the contact is deleted. */
export interface RunWithContact extends RunRecord {
  contactEmail: string | null;
}

const toRunWithContact = ({
  contact_email,
  ...row
}: Row<'automation_runs'> & { contact_email: string | null }): RunWithContact => ({
  ...toRecord(row),
  contactEmail: contact_email,
});

const toStep = (row: Row<'automation_run_steps'>): RunStepRecord => ({
  key: row.key,
  type: row.type,
  status: row.status,
  output: parse(row.output),
  error: parse(row.error),
  startedAt: row.started_at,
  completedAt: row.completed_at,
  createdAt: row.created_at,
});

const LIVE: AutomationRunStatus[] = ['running', 'waiting'];

const stepRow = (runId: string, seq: number, step: RunStepRecord) => ({
  run_id: runId,
  seq,
  key: step.key,
  type: step.type,
  status: step.status,
  output: step.output === null ? null : JSON.stringify(step.output),
  error: step.error === null ? null : JSON.stringify(step.error),
  started_at: step.startedAt,
  completed_at: step.completedAt,
  created_at: step.createdAt,
});

/** The row a new run's insert writes. */
const runRow = (run: RunRecord) => ({
  id: run.id,
  project_id: run.projectId,
  automation_id: run.automationId,
  contact_id: run.contactId,
  trigger_send_id: run.triggerSendId,
  graph_version: run.graphVersion,
  trigger_payload: JSON.stringify(run.triggerPayload),
  event_payload: null,
  status: run.status,
  current_step: run.currentStep,
  resumed_by: null,
  waiting_event: null,
  step_count: run.stepCount,
  due_at: run.dueAt,
  reason: null,
  started_at: run.startedAt,
  completed_at: null,
  created_at: run.createdAt,
  updated_at: run.updatedAt,
});

/** Rows of runs to one insert: 19 parameters each, under SQLite's 32 766. */
const INSERT_ROWS = 500;

async function insertRows(runs: readonly RunRecord[], transaction: Transaction): Promise<void> {
  await transaction.db.insertInto('automation_runs').values(runs.map(runRow)).execute();
}

export function createRunRepo(db: Kysely<Database>) {
  /** Runs with their contact's address, read by the same statement (a page of runs: one query, not one a run). */
  const runsWithContacts = () =>
    db
      .selectFrom('automation_runs')
      .leftJoin('contacts', 'contacts.id', 'automation_runs.contact_id')
      .selectAll('automation_runs')
      .select('contacts.email as contact_email');

  return {
    /**
     * Inserts runs started, each with its first step's record (its trigger, seq 0), INSERT_ROWS to a statement
     * (within both engines' limits on a statement's parameters).
     */
    async insertStarted(
      started: ReadonlyArray<{ run: RunRecord; trigger: RunStepRecord }>,
      transaction: Transaction,
    ): Promise<void> {
      for (let at = 0; at < started.length; at += INSERT_ROWS) {
        const slice = started.slice(at, at + INSERT_ROWS);
        await insertRows(
          slice.map(({ run }) => run),
          transaction,
        );
        await transaction.db
          .insertInto('automation_run_steps')
          .values(slice.map(({ run, trigger }) => stepRow(run.id, 0, trigger)))
          .execute();
      }
    },

    /** Of these automations and contacts, the pairs with a live run (a second trigger starts none): `aut con`. */
    async liveFor(
      automationIds: readonly string[],
      contactIds: readonly string[],
      transaction: Transaction,
    ): Promise<Set<string>> {
      if (automationIds.length === 0 || contactIds.length === 0) return new Set();
      const rows = await transaction.db
        .selectFrom('automation_runs')
        .select(['automation_id', 'contact_id'])
        .where('automation_id', 'in', [...automationIds])
        .where('contact_id', 'in', [...contactIds])
        .where('status', 'in', LIVE)
        .execute();
      return new Set(rows.map((row) => `${row.automation_id} ${row.contact_id}`));
    },

    /**
     * Resumes the contact's runs waiting for `eventName` (due now, by `event_received`); answers how many. A run
     * whose timeout is being taken meanwhile is guarded by its status: whichever writes first wins.
     */
    async resume(
      projectId: string,
      contactId: string,
      resumedBy: { event: string; payload: Record<string, unknown> },
      now: string,
      transaction: Transaction,
    ): Promise<number> {
      const result = await transaction.db
        .updateTable('automation_runs')
        .set({ status: 'running', due_at: now, resumed_by: JSON.stringify(resumedBy), updated_at: now })
        .where('project_id', '=', projectId)
        .where('contact_id', '=', contactId)
        .where('status', '=', 'waiting')
        .where('waiting_event', '=', resumedBy.event)
        .executeTakeFirst();
      return Number(result.numUpdatedRows);
    },

    /** Cancels an automation's live runs (stopped), or these contacts'; answers how many. */
    async cancelLive(
      of: { automationId: string } | { projectId: string; contactIds: readonly string[] },
      reason: string,
      now: string,
      transaction: Transaction,
    ): Promise<number> {
      let query = transaction.db
        .updateTable('automation_runs')
        .set({ status: 'cancelled', reason, due_at: null, completed_at: now, updated_at: now })
        .where('status', 'in', LIVE);
      query =
        'automationId' in of
          ? query.where('automation_id', '=', of.automationId)
          : query.where('project_id', '=', of.projectId).where('contact_id', 'in', [...of.contactIds]);
      if ('contactIds' in of && of.contactIds.length === 0) return 0;
      return Number((await query.executeTakeFirst()).numUpdatedRows);
    },

    /**
     * Records the run's step `seq` (its step_count before) and moves the run as `move` says, if the run is still
     * as it was read (`expect`: this worker's lease, the step count, the status): false otherwise (stopped,
     * resumed or taken by another worker meanwhile), and the caller's transaction must roll back.
     */
    async advance(
      runId: string,
      expect: { workerId: string; stepCount: number; status: AutomationRunStatus },
      step: RunStepRecord | undefined,
      move: RunMove,
      now: string,
      transaction: Transaction,
    ): Promise<boolean> {
      const result = await transaction.db
        .updateTable('automation_runs')
        .set({
          status: move.status,
          current_step: move.currentStep,
          waiting_event: move.waitingEvent,
          due_at: move.dueAt,
          reason: move.reason,
          completed_at: move.completedAt,
          resumed_by: null,
          ...(move.eventPayload === undefined ? {} : { event_payload: JSON.stringify(move.eventPayload) }),
          step_count: expect.stepCount + (step ? 1 : 0),
          updated_at: now,
        })
        .where('id', '=', runId)
        .where('locked_by', '=', expect.workerId)
        .where('step_count', '=', expect.stepCount)
        .where('status', '=', expect.status)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) return false;
      if (step) {
        await transaction.db
          .insertInto('automation_run_steps')
          .values(stepRow(runId, expect.stepCount, step))
          .execute();
      }
      return true;
    },

    async findById(id: string): Promise<RunRecord | undefined> {
      const row = await db.selectFrom('automation_runs').selectAll().where('id', '=', id).executeTakeFirst();
      return row && toRecord(row);
    },

    async find(projectId: string, automationId: string, id: string): Promise<RunWithContact | undefined> {
      const row = await runsWithContacts()
        .where('automation_runs.project_id', '=', projectId)
        .where('automation_runs.automation_id', '=', automationId)
        .where('automation_runs.id', '=', id)
        .executeTakeFirst();
      return row && toRunWithContact(row);
    },

    async list(
      projectId: string,
      automationId: string,
      page: PageRequest,
      statuses: readonly AutomationRunStatus[] | undefined,
    ): Promise<Page<RunWithContact>> {
      let query = runsWithContacts()
        .where('automation_runs.project_id', '=', projectId)
        .where('automation_runs.automation_id', '=', automationId);
      if (statuses !== undefined) query = query.where('automation_runs.status', 'in', [...statuses]);
      return mapPage(await pageOfQuery(query, page, 'automation_runs.id'), toRunWithContact);
    },

    async steps(runId: string): Promise<RunStepRecord[]> {
      const rows = await db
        .selectFrom('automation_run_steps')
        .selectAll()
        .where('run_id', '=', runId)
        .orderBy('seq')
        .execute();
      return rows.map(toStep);
    },
  };
}

export type RunRepo = ReturnType<typeof createRunRepo>;
