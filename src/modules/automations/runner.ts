import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { DomainError, RetryLaterError } from '../../lib/errors.ts';
import type { ContactPropertyRepo } from '../contacts/contact-properties.repo.ts';
import type { ContactRecord, ContactRepo } from '../contacts/contacts.repo.ts';
import type { AutomationRecord, AutomationRepo } from './automations.repo.ts';
import type { RunMove, RunRecord, RunRepo, RunStepRecord } from './runs.repo.ts';
import type { StepPlan, StepPlanner } from './steps.ts';

// A run's way through its automation, a step at a time, for the worker that holds its lease. Each step is
// planned outside any transaction (reads, rendering an email) and written in one: the run's move past it,
// guarded by its step count, status and lease (runs.repo.ts advance), then its record and its effect (the
// email, the contact's change). A crash before the COMMIT leaves the run at the step, to be taken again by
// whoever claims it next; after it, the step is done and counted. So no step is done twice or skipped.

/** Steps one attempt takes at most before giving the run back (a long chain of instant steps shares the worker). */
const STEPS_PER_ATTEMPT = 50;

export interface RunnerDeps {
  db: Kysely<Database>;
  runs: RunRepo;
  automations: Pick<AutomationRepo, 'findById' | 'graphOf'>;
  contacts: Pick<ContactRepo, 'find'>;
  properties: Pick<ContactPropertyRepo, 'all'>;
  planner: StepPlanner;
  clock: Clock;
}

/** The run is no longer this worker's as read (stopped, resumed, taken by another): nothing of the step is kept. */
class LostRun extends Error {
  constructor(id: string) {
    super(`automation run ${id} changed under this worker`);
  }
}

const ended = (
  status: 'cancelled' | 'failed',
  currentStep: string,
  reason: string,
  now: string,
): RunMove => ({
  status,
  currentStep,
  waitingEvent: null,
  dueAt: null,
  reason,
  completedAt: now,
});

/**
 * A step refused for good (a template unpublished or gone, a property no longer declared): the run fails,
 * saying why. Anything else is thrown again, to be retried when the lease runs out.
 */
function failure(step: { key: string; type: string }, error: unknown, at: string): StepPlan {
  if (!(error instanceof DomainError) || error instanceof RetryLaterError) throw error;
  const failed: RunStepRecord = {
    key: step.key,
    type: step.type,
    status: 'failed',
    output: null,
    error: { code: error.code, message: error.message },
    startedAt: at,
    completedAt: at,
    createdAt: at,
  };
  return { step: failed, move: ended('failed', step.key, error.code, at) };
}

export function createRunner(deps: RunnerDeps) {
  const { runs, clock } = deps;

  /** Writes a step's plan in one transaction; false when the run changed meanwhile (nothing written). */
  async function write(run: RunRecord, workerId: string, plan: StepPlan): Promise<boolean> {
    try {
      await inTransaction(deps.db, async (transaction) => {
        const moved = await runs.advance(
          run.id,
          { workerId, stepCount: run.stepCount, status: run.status },
          plan.step,
          plan.move,
          clock.now().toISOString(),
          transaction,
        );
        if (!moved) throw new LostRun(run.id);
        await plan.write?.(transaction);
      });
      return true;
    } catch (error) {
      if (error instanceof LostRun) return false;
      throw error;
    }
  }

  /** The run's next step planned, or why it stops here. */
  async function planFor(
    run: RunRecord,
    automation: AutomationRecord | undefined,
    contact: ContactRecord | undefined,
    now: Date,
  ): Promise<StepPlan> {
    const at = now.toISOString();
    if (!automation || automation.status !== 'enabled') {
      return { step: undefined, move: ended('cancelled', run.currentStep, 'automation_stopped', at) };
    }
    if (!contact)
      return { step: undefined, move: ended('cancelled', run.currentStep, 'contact_deleted', at) };
    if (contact.unsubscribed) {
      return { step: undefined, move: ended('cancelled', run.currentStep, 'contact_unsubscribed', at) };
    }
    // The graph the run started with: an update since is for the runs it starts.
    const graph = await deps.automations.graphOf(automation.id, run.graphVersion);
    const step = graph?.steps.find((each) => each.key === run.currentStep);
    if (!graph || !step) {
      return { step: undefined, move: ended('failed', run.currentStep, 'step_removed', at) };
    }
    try {
      return await deps.planner.plan(
        {
          run,
          automation: { ...automation, graph },
          contact,
          declared: await deps.properties.all(run.projectId),
          now,
          steps: () => runs.steps(run.id),
        },
        step,
      );
    } catch (error) {
      return failure(step, error, at);
    }
  }

  return {
    /**
     * Takes the steps of a run this worker holds that are due, until it waits, ends, or has taken
     * STEPS_PER_ATTEMPT (then it is due again at once). Answers when the run is due next as written (epoch ms),
     * or null when nothing will bring it back on its own (ended, waiting for an event without a timeout, or no
     * longer this worker's). Throws on a failure to retry later.
     */
    async run(runId: string, workerId: string, signal?: AbortSignal): Promise<number | null> {
      for (let taken = 0; ; taken++) {
        const run = await runs.findById(runId);
        const now = clock.now();
        if (!run || (run.status !== 'running' && run.status !== 'waiting')) return null;
        if (run.dueAt === null) return null;
        // Not due yet, or this attempt's share is taken: back to the queue, due at its time.
        if (Date.parse(run.dueAt) > now.getTime() || taken >= STEPS_PER_ATTEMPT || signal?.aborted) {
          return Date.parse(run.dueAt);
        }
        const automation = await deps.automations.findById(run.automationId);
        const contact = await deps.contacts.find(run.projectId, 'id', run.contactId);
        const plan = await planFor(run, automation, contact, now);
        let taking = plan;
        let written: boolean;
        try {
          written = await write(run, workerId, plan);
        } catch (error) {
          // The step's write was refused (rolled back): the run fails at it, saying why.
          taking = failure(plan.step ?? { key: run.currentStep, type: 'unknown' }, error, now.toISOString());
          written = await write(run, workerId, taking);
        }
        if (!written) return null;
        // Where the step left it, without reading it back: ended or waiting without a timeout, or due later.
        const next = taking.move.dueAt === null ? null : Date.parse(taking.move.dueAt);
        if (next === null || next > clock.now().getTime()) return next;
      }
    },
  };
}

export type Runner = ReturnType<typeof createRunner>;
