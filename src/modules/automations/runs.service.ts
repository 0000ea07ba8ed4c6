import type { PageRequest } from '../../db/pagination.ts';
import type { AutomationRunStatus } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { Notifier } from '../../queue/notifier.ts';
import type { EventTriggers } from '../custom-events/custom-events.service.ts';
import type { ContactTriggers } from '../contacts/contact-triggers.ts';
import type { AutomationRecord, AutomationRepo } from './automations.repo.ts';
import { contactTriggerKey, nextStep, triggerOutput } from './graph.ts';
import type { RunSummaryView, RunView } from './automations.schemas.ts';
import type { RunRecord, RunRepo, RunStepRecord, RunWithContact } from './runs.repo.ts';

const toSummary = (run: RunWithContact): RunSummaryView => ({
  object: 'automation_run',
  id: run.id,
  automation_id: run.automationId,
  contact_id: run.contactId,
  contact_email: run.contactEmail,
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

/** Contacts whose runs are written in one insert (its parameters stay within both engines' limits). */
const START_SLICE = 500;

/**
 * A run of `automation` for a contact, started now with its trigger step taken (the trigger happened: recorded
 * with the run, where the worker would spend a transaction on it): at the step after it, due at once, or
 * completed where the graph ends there.
 */
function newRun(
  projectId: string,
  automation: AutomationRecord,
  contactId: string,
  from: { sendId: string | null; payload: Record<string, unknown> },
  now: string,
): { run: RunRecord; trigger: RunStepRecord } {
  const trigger = automation.graph.steps.find((step) => step.type === 'trigger')!;
  const next = nextStep(automation.graph, trigger.key, 'default');
  return {
    run: {
      id: newId('arun'),
      projectId,
      automationId: automation.id,
      contactId,
      triggerSendId: from.sendId,
      graphVersion: automation.graphVersion,
      triggerPayload: from.payload,
      eventPayload: null,
      status: next ? 'running' : 'completed',
      currentStep: next?.key ?? trigger.key,
      resumedBy: null,
      waitingEvent: null,
      stepCount: 1,
      dueAt: next ? now : null,
      reason: null,
      startedAt: now,
      completedAt: next ? null : now,
      createdAt: now,
      updatedAt: now,
    },
    trigger: {
      key: trigger.key,
      type: 'trigger',
      status: 'completed',
      output: triggerOutput(trigger.config, from.sendId, from.payload),
      error: null,
      startedAt: now,
      completedAt: now,
      createdAt: now,
    },
  };
}

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

  /**
   * Starts a run of each automation in `triggered` for each contact that has no live run of it (a second
   * sign-up does not start the series twice), in `transaction`, a slice of contacts at a time; answers how many.
   */
  async function start(
    transaction: Transaction,
    projectId: string,
    triggered: readonly AutomationRecord[],
    contactIds: readonly string[],
    from: { sendId: string | null; payload: Record<string, unknown> },
  ): Promise<number> {
    if (triggered.length === 0) return 0;
    const now = clock.now().toISOString();
    let started = 0;
    for (let at = 0; at < contactIds.length; at += START_SLICE) {
      const slice = contactIds.slice(at, at + START_SLICE);
      const live = await repo.liveFor(
        triggered.map((automation) => automation.id),
        slice,
        transaction,
      );
      const runs: Array<ReturnType<typeof newRun>> = [];
      for (const automation of triggered) {
        for (const contactId of slice) {
          if (live.has(`${automation.id} ${contactId}`)) continue;
          runs.push(newRun(projectId, automation, contactId, from, now));
        }
      }
      await repo.insertStarted(runs, transaction);
      started += runs.length;
    }
    if (started > 0) transaction.afterCommit(() => notifier.notify());
    return started;
  }

  const triggers: EventTriggers = {
    async eventSentIn(transaction: Transaction, sent) {
      const triggered = await automations.triggeredBy(sent.projectId, sent.eventName, transaction);
      const started = await start(transaction, sent.projectId, triggered, [sent.contact.id], {
        sendId: sent.sendId,
        payload: sent.payload,
      });
      const resumed = await repo.resume(
        sent.projectId,
        sent.contact.id,
        { event: sent.eventName, payload: sent.payload },
        clock.now().toISOString(),
        transaction,
      );
      if (resumed > 0) transaction.afterCommit(() => notifier.notify());
      return { started, resumed };
    },
  };

  /** Contacts created, added to a segment, subscribed to a topic start runs; deleted or unsubscribed, theirs end. */
  const contactTriggers: ContactTriggers = {
    async changedIn(transaction, projectId, change, contactIds) {
      if (contactIds.length === 0) return;
      if (change.kind === 'deleted' || change.kind === 'unsubscribed') {
        // Ended now, a run waiting for an event without a timeout included (no claim would ever see it again).
        const reason = change.kind === 'deleted' ? 'contact_deleted' : 'contact_unsubscribed';
        await repo.cancelLive({ projectId, contactIds }, reason, clock.now().toISOString(), transaction);
        return;
      }
      const key =
        change.kind === 'created'
          ? contactTriggerKey('contact.created')
          : change.kind === 'added_to_segment'
            ? contactTriggerKey('contact.added_to_segment', change.segmentId)
            : contactTriggerKey('contact.topic_subscribed', change.topicId);
      const triggered = await automations.triggeredBy(projectId, key, transaction);
      const payload =
        change.kind === 'added_to_segment'
          ? { segment_id: change.segmentId }
          : change.kind === 'topic_subscribed'
            ? { topic_id: change.topicId }
            : {};
      await start(transaction, projectId, triggered, contactIds, { sendId: null, payload });
    },
  };

  return {
    triggers,
    contactTriggers,

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
