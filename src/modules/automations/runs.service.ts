import type { PageRequest } from '../../db/pagination.ts';
import type { AutomationRunStatus } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { Notifier } from '../../queue/notifier.ts';
import type { EventTriggers } from '../custom-events/custom-events.service.ts';
import type { AutomationRepo } from './automations.repo.ts';
import type { RunSummaryView, RunView } from './automations.schemas.ts';
import type { RunRecord, RunRepo, RunStepRecord } from './runs.repo.ts';

const toSummary = (run: RunRecord): RunSummaryView => ({
  object: 'automation_run',
  id: run.id,
  automation_id: run.automationId,
  contact_id: run.contactId,
  status: run.status,
  current_step: run.currentStep,
  due_at: run.dueAt,
  reason: run.reason,
  trigger_payload: run.triggerPayload,
  started_at: run.startedAt,
  completed_at: run.completedAt,
  created_at: run.createdAt,
});

const toStepView = (step: RunStepRecord) => ({
  key: step.key,
  type: step.type,
  status: step.status,
  output: step.output,
  error: step.error,
  started_at: step.startedAt,
  completed_at: step.completedAt,
  created_at: step.createdAt,
});

export interface RunServiceDeps {
  automations: Pick<AutomationRepo, 'find' | 'triggeredBy'>;
  repo: RunRepo;
  clock: Clock;
  /** Wakes this process's runs worker once runs are due. */
  notifier: Notifier;
}

/**
 * The runs' side of the API: what an event sent for a contact starts and resumes (in the send's transaction),
 * and the runs as the API shows them (each step: when, what it did, why a branch was taken).
 */
export function createRunService({ automations, repo, clock, notifier }: RunServiceDeps) {
  async function loadAutomation(projectId: string, id: string) {
    const record = isId('aut', id) ? await automations.find(projectId, id) : undefined;
    if (!record) throw notFound('automation', id);
    return record;
  }

  const triggers: EventTriggers = {
    async eventSentIn(transaction: Transaction, sent) {
      const now = clock.now().toISOString();
      const triggered = await automations.triggeredBy(sent.projectId, sent.eventName, transaction);
      // One live run per contact and automation: a second sign-up does not start the series twice.
      const live = await repo.liveFor(
        triggered.map((automation) => automation.id),
        sent.contact.id,
        transaction,
      );
      const runs: RunRecord[] = triggered
        .filter((automation) => !live.has(automation.id))
        .map((automation) => ({
          id: newId('arun'),
          projectId: sent.projectId,
          automationId: automation.id,
          contactId: sent.contact.id,
          triggerSendId: sent.sendId,
          triggerPayload: sent.payload,
          eventPayload: null,
          status: 'running',
          currentStep: automation.graph.steps.find((step) => step.type === 'trigger')!.key,
          resumedBy: null,
          waitingEvent: null,
          stepCount: 0,
          dueAt: now,
          reason: null,
          startedAt: now,
          completedAt: null,
          createdAt: now,
          updatedAt: now,
        }));
      await repo.insertMany(runs, transaction);
      const resumed = await repo.resume(
        sent.projectId,
        sent.contact.id,
        { event: sent.eventName, payload: sent.payload },
        now,
        transaction,
      );
      if (runs.length + resumed > 0) transaction.afterCommit(() => notifier.notify());
      return { started: runs.length, resumed };
    },
  };

  return {
    triggers,

    /** An automation's runs, newest first, of these statuses (any when undefined). */
    async list(
      projectId: string,
      automationId: string,
      page: PageRequest,
      statuses: readonly AutomationRunStatus[] | undefined,
    ) {
      await loadAutomation(projectId, automationId);
      const runs = await repo.list(projectId, automationId, page, statuses);
      return { items: runs.items.map(toSummary), hasMore: runs.hasMore };
    },

    async get(projectId: string, automationId: string, runId: string): Promise<RunView> {
      const run = isId('arun', runId) ? await repo.find(projectId, automationId, runId) : undefined;
      if (!run) throw notFound('automation run', runId);
      return { ...toSummary(run), steps: (await repo.steps(run.id)).map(toStepView) };
    },
  };
}

export type RunService = ReturnType<typeof createRunService>;
