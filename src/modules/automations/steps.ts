import type { Transaction } from '../../db/transaction.ts';
import { DomainError } from '../../lib/errors.ts';
import type { ContactPropertyRecord } from '../contacts/contact-properties.repo.ts';
import type { ContactRecord } from '../contacts/contacts.repo.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import type { EmailService } from '../emails/emails.service.ts';
import type { SegmentService } from '../segments/segments.service.ts';
import { type SuppressionRepo, suppressionKey } from '../suppressions/suppressions.repo.ts';
import type { TopicRepo } from '../topics/topics.repo.ts';
import type { TrackingRepo } from '../emails/tracking.repo.ts';
import type { AutomationRecord } from './automations.repo.ts';
import { type ConnectionType, nextStep, type Step, triggerOutput } from './graph.ts';
import { evaluateRule, parseWait, readsField, type Rule, valueAt } from './rules.ts';
import type { RunMove, RunRecord, RunStepRecord } from './runs.repo.ts';

// What each step type does for one run: decided before the step's transaction (reads, rendering), written in
// it (`write`, after the run's guarded move), so the step and its effect commit together or not at all.

export interface StepContext {
  run: RunRecord;
  automation: AutomationRecord;
  contact: ContactRecord;
  declared: ContactPropertyRecord[];
  now: Date;
  /** The steps recorded for the run so far, oldest first (a wait's own record; the last email sent). */
  steps: () => Promise<RunStepRecord[]>;
}

export interface StepPlan {
  step: RunStepRecord | undefined;
  move: RunMove;
  write?: ((transaction: Transaction) => Promise<void>) | undefined;
}

export interface StepDeps {
  contacts: Pick<ContactService, 'prepareUpdate' | 'update' | 'prepareDelete' | 'delete'>;
  segments: Pick<SegmentService, 'addContact' | 'removeContact'>;
  topics: Pick<TopicRepo, 'find' | 'choicesFor'>;
  suppressions: Pick<SuppressionRepo, 'matchingIn'>;
  emails: Pick<EmailService, 'prepareSend' | 'writeSend'>;
  /** What came of an email sent (opens, clicks), for conditions on `email.opened` and `email.clicked`. */
  engagement: Pick<TrackingRepo, 'recipientEngagement'>;
}

/** What a run's fields are, for conditions and variables: the contact (and its properties) and the event. */
export function fieldsOf(
  contact: ContactRecord,
  declared: ContactPropertyRecord[],
  payload: Record<string, unknown>,
) {
  const properties: Record<string, unknown> = {};
  for (const property of declared)
    properties[property.key] = contact.values[property.id] ?? property.fallbackValue;
  const view = {
    id: contact.id,
    email: contact.email,
    first_name: contact.firstName,
    last_name: contact.lastName,
    unsubscribed: contact.unsubscribed,
    properties,
  };
  return {
    view,
    valueOf(field: string): unknown {
      const [root, ...rest] = field.split('.');
      const path = rest.join('.');
      if (root === 'event') return valueAt(payload, path);
      if (root !== 'contact') return undefined;
      // `contact.plan` is the property `plan` unless a field of the contact has that name.
      return Object.hasOwn(view, rest[0]!) ? valueAt(view, path) : valueAt(properties, path);
    },
  };
}

/** A value of a step's config: as given, or `{ "var": "contact.first_name" }` read from the run. */
const resolve = (value: unknown, valueOf: (field: string) => unknown): unknown =>
  typeof value === 'object' && value !== null && typeof (value as { var?: unknown }).var === 'string'
    ? (valueOf((value as { var: string }).var) ?? null)
    : value;

export function createStepPlanner(deps: StepDeps) {
  /** The run's move to the step `type` leads to (due at `dueAt`), or its end where the graph ends. */
  function onward(context: StepContext, key: string, type: ConnectionType, dueAt = context.now): RunMove {
    const next = nextStep(context.automation.graph, key, type);
    const now = context.now.toISOString();
    return next
      ? {
          status: 'running',
          currentStep: next.key,
          waitingEvent: null,
          dueAt: dueAt.toISOString(),
          reason: null,
          completedAt: null,
        }
      : {
          status: 'completed',
          currentStep: key,
          waitingEvent: null,
          dueAt: null,
          reason: null,
          completedAt: now,
        };
  }

  const record = (
    context: StepContext,
    step: Step,
    status: RunStepRecord['status'],
    output: Record<string, unknown> | null,
  ): RunStepRecord => {
    const now = context.now.toISOString();
    return {
      key: step.key,
      type: step.type,
      status,
      output,
      error: null,
      startedAt: now,
      completedAt: status === 'waiting' ? null : now,
      createdAt: now,
    };
  };

  async function sendEmail(
    context: StepContext,
    step: Step,
    valueOf: (field: string) => unknown,
    contactView: unknown,
  ) {
    const { run, contact } = context;
    const config = step.config as {
      template: { id: string; variables?: Record<string, unknown> };
      from: string;
      subject?: string;
      reply_to?: string;
      topic_id?: string;
    };
    let skipped: string | undefined;
    if (config.topic_id !== undefined) {
      const topic = await deps.topics.find(run.projectId, config.topic_id);
      const choice = (await deps.topics.choicesFor(config.topic_id, [contact.id])).get(contact.id);
      // A topic deleted since: nobody is opted in any more.
      if ((choice ?? topic?.defaultSubscription ?? 'opt_out') === 'opt_out') skipped = 'topic_opt_out';
    }
    const suppressed = await deps.suppressions.matchingIn([run.projectId], [contact.email]);
    if (suppressed.has(suppressionKey(run.projectId, contact.email))) skipped = 'suppressed';
    if (skipped !== undefined) {
      return {
        step: record(context, step, 'skipped', { reason: skipped, to: contact.email }),
        move: onward(context, step.key, 'default'),
      };
    }
    const variables: Record<string, unknown> = {
      contact: contactView,
      event: run.eventPayload ?? run.triggerPayload,
    };
    for (const [name, value] of Object.entries(config.template.variables ?? {}))
      variables[name] = resolve(value, valueOf);
    const plan = await deps.emails.prepareSend(
      run.projectId,
      {
        from: config.from,
        to: [contact.email],
        ...(config.subject === undefined ? {} : { subject: config.subject }),
        ...(config.reply_to === undefined ? {} : { reply_to: [config.reply_to] }),
        template: { id: config.template.id, variables },
      },
      { domainId: null },
    );
    const email = plan.emails[0]!;
    return {
      step: record(context, step, 'completed', {
        email_id: email.id,
        to: contact.email,
        subject: email.subject,
      }),
      move: onward(context, step.key, 'default'),
      write: (transaction: Transaction) => deps.emails.writeSend(transaction, plan),
    };
  }

  async function waitForEvent(
    context: StepContext,
    step: Step,
    valueOf: (field: string) => unknown,
  ): Promise<StepPlan> {
    const { run } = context;
    const config = step.config as { event_name: string; timeout?: string; filter_rule?: Rule };
    if (run.status === 'waiting') {
      // Claimed while waiting: its timeout has come.
      return {
        step: record(context, step, 'completed', { timed_out: true, branch: 'timeout' }),
        move: onward(context, step.key, 'timeout'),
      };
    }
    const resumed = run.resumedBy?.event === config.event_name ? run.resumedBy : undefined;
    if (resumed) {
      const payload = resumed.payload;
      const matches =
        config.filter_rule === undefined ||
        evaluateRule(config.filter_rule, (field) =>
          field.startsWith('event.') ? valueAt(payload, field.slice('event.'.length)) : valueOf(field),
        );
      if (matches) {
        return {
          step: record(context, step, 'completed', {
            event_received: config.event_name,
            payload,
            branch: 'event_received',
          }),
          move: { ...onward(context, step.key, 'event_received'), eventPayload: payload },
        };
      }
    }
    // Waiting (again, after an event its filter did not pass): until the timeout set when it began.
    const began = resumed
      ? ((await context.steps()).at(-1)?.output?.timeout_at as string | null | undefined)
      : undefined;
    const ms = config.timeout === undefined ? undefined : parseWait(config.timeout);
    const timeoutAt = began ?? (ms === undefined ? null : new Date(context.now.getTime() + ms).toISOString());
    return {
      step: record(context, step, 'waiting', {
        event_name: config.event_name,
        timeout_at: timeoutAt,
        ...(resumed ? { ignored: resumed.payload, because: 'filter_rule not met' } : {}),
      }),
      move: {
        status: 'waiting',
        currentStep: step.key,
        waitingEvent: config.event_name,
        dueAt: timeoutAt,
        reason: null,
        completedAt: null,
      },
    };
  }

  /**
   * `valueOf` with `email.opened` and `email.clicked`: whether the run's last email sent was opened or clicked
   * (false when it sent none, or did not track them).
   */
  async function withEngagement(context: StepContext, valueOf: (field: string) => unknown) {
    const sent = (await context.steps()).findLast(
      (each) => each.type === 'send_email' && each.status === 'completed',
    );
    const emailId = sent?.output?.email_id;
    const counters =
      typeof emailId === 'string'
        ? [...(await deps.engagement.recipientEngagement(context.run.projectId, emailId)).values()]
        : [];
    const opened = counters.some((each) => each.openCount > 0);
    const clicked = counters.some((each) => each.clickCount > 0);
    return (field: string): unknown =>
      field === 'email.opened' ? opened : field === 'email.clicked' ? clicked : valueOf(field);
  }

  return {
    async plan(context: StepContext, step: Step): Promise<StepPlan> {
      const { run, contact, declared, now } = context;
      const fields = fieldsOf(contact, declared, run.eventPayload ?? run.triggerPayload);
      const { valueOf } = fields;
      switch (step.type) {
        case 'trigger':
          return {
            // A run started before its trigger was recorded with it (runs.service.ts start).
            step: record(
              context,
              step,
              'completed',
              triggerOutput(step.config, run.triggerSendId, run.triggerPayload),
            ),
            move: onward(context, step.key, 'default'),
          };
        case 'delay': {
          const until = new Date(now.getTime() + parseWait(step.config.duration as string)!);
          return {
            step: record(context, step, 'completed', { until: until.toISOString() }),
            move: onward(context, step.key, 'default', until),
          };
        }
        case 'send_email':
          return sendEmail(context, step, valueOf, fields.view);
        case 'wait_for_event':
          return waitForEvent(context, step, valueOf);
        case 'condition': {
          const rule = step.config as unknown as Rule;
          const read = readsField(rule, 'email.') ? await withEngagement(context, valueOf) : valueOf;
          const met = evaluateRule(rule, read);
          const branch = met ? 'condition_met' : 'condition_not_met';
          return {
            step: record(context, step, 'completed', {
              result: met,
              branch,
              values: valuesOf(rule, read),
            }),
            move: onward(context, step.key, branch),
          };
        }
        case 'contact_update': {
          const config = step.config;
          const input: Record<string, unknown> = {};
          for (const field of ['first_name', 'last_name', 'unsubscribed'] as const) {
            if (config[field] !== undefined) input[field] = resolve(config[field], valueOf);
          }
          if (config.properties !== undefined) {
            input.properties = Object.fromEntries(
              Object.entries(config.properties as Record<string, unknown>).map(([key, value]) => [
                key,
                resolve(value, valueOf),
              ]),
            );
          }
          const plan = await deps.contacts.prepareUpdate(run.projectId, contact.id, input);
          return {
            step: record(context, step, 'completed', { changed: input }),
            move: onward(context, step.key, 'default'),
            write: async (transaction) => void (await deps.contacts.update(transaction, plan)),
          };
        }
        case 'contact_delete': {
          const plan = await deps.contacts.prepareDelete(run.projectId, contact.id);
          return {
            step: record(context, step, 'completed', { deleted: contact.id }),
            move: onward(context, step.key, 'default'),
            write: async (transaction) => void (await deps.contacts.delete(transaction, plan)),
          };
        }
        case 'add_to_segment':
        case 'remove_from_segment': {
          const segmentId = step.config.segment_id as string;
          return {
            step: record(context, step, 'completed', { segment_id: segmentId }),
            move: onward(context, step.key, 'default'),
            write: async (transaction) => {
              if (step.type === 'add_to_segment') {
                await deps.segments.addContact(transaction, run.projectId, contact.id, segmentId);
                return;
              }
              try {
                await deps.segments.removeContact(transaction, run.projectId, contact.id, segmentId);
              } catch (error) {
                // Not in it: nothing to remove (nothing was written, the transaction goes on).
                if (!(error instanceof DomainError && error.param === 'segment_id')) throw error;
              }
            },
          };
        }
      }
    },
  };
}

/** The values a rule read, by field: why a branch was taken. */
function valuesOf(rule: Rule, valueOf: (field: string) => unknown, into: Record<string, unknown> = {}) {
  if (rule.type === 'rule') into[rule.field] = valueOf(rule.field) ?? null;
  else for (const each of rule.rules) valuesOf(each, valueOf, into);
  return into;
}

export type StepPlanner = ReturnType<typeof createStepPlanner>;
