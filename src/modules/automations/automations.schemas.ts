import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { apiObject, nullable, partialBody, timestamp } from '../../http/schema-helpers.ts';
import { CONNECTION_TYPES, STEP_TYPES } from './graph.ts';

export const MAX_STEPS = 100;
export const MAX_AUTOMATION_NAME = 200;

const literals = <T extends readonly string[]>(values: T, description: string) =>
  Type.Union(
    values.map((value) => Type.Literal<T[number]>(value)),
    { description },
  );

export const StepSchema = Type.Object(
  {
    key: Type.String({
      minLength: 1,
      maxLength: 100,
      description: 'The step’s name in this automation, unique in it; connections name steps by it.',
    }),
    type: literals(
      STEP_TYPES,
      '`trigger`, `delay`, `send_email`, `wait_for_event`, `condition`, `contact_update`, `contact_delete`, `add_to_segment` or `remove_from_segment`.',
    ),
    config: Type.Record(Type.String(), Type.Unknown(), {
      description: 'What the step does; its fields depend on its type (docs/api/automations.md).',
    }),
  },
  { additionalProperties: false, title: 'AutomationStep' },
);

export const ConnectionSchema = Type.Object(
  {
    from: Type.String({ minLength: 1, maxLength: 100, description: 'The step it leaves (its key).' }),
    to: Type.String({ minLength: 1, maxLength: 100, description: 'The step it leads to (its key).' }),
    type: Type.Optional(
      literals(
        CONNECTION_TYPES,
        'When a run takes it: `default` (the step is done; the default), `condition_met` / `condition_not_met` (a condition), `event_received` / `timeout` (a wait for an event).',
      ),
    ),
  },
  { additionalProperties: false, title: 'AutomationConnection' },
);

const AnsweredConnection = Type.Object({
  from: Type.String(),
  to: Type.String(),
  type: literals(CONNECTION_TYPES, 'When a run takes it.'),
});

const status = literals(['enabled', 'disabled'] as const, '`enabled` (events start runs) or `disabled`.');

export const Automation = apiObject(
  'automation',
  'Automation',
  {
    id: 'Automation identifier (`aut_…`).',
    created: 'When it was created.',
    updated: 'When it last changed.',
  },
  {
    name: Type.String(),
    status,
    steps: Type.Array(
      Type.Object({
        key: Type.String(),
        type: Type.String(),
        config: Type.Record(Type.String(), Type.Unknown()),
      }),
    ),
    connections: Type.Array(AnsweredConnection),
    runs: Type.Object(
      {
        running: Type.Integer(),
        waiting: Type.Integer(),
        completed: Type.Integer(),
        cancelled: Type.Integer(),
        failed: Type.Integer(),
      },
      { description: 'How many of its runs are in each state.' },
    ),
  },
);
export type AutomationView = Static<typeof Automation>;
export const AutomationList = listEnvelope(Automation);

const name = Type.String({ minLength: 1, maxLength: MAX_AUTOMATION_NAME, description: 'What it is called.' });
const steps = Type.Array(StepSchema, { minItems: 1, maxItems: MAX_STEPS });
const connections = Type.Array(ConnectionSchema, { maxItems: MAX_STEPS * 2 });

export const CreateAutomationBody = Type.Object(
  { name, status: Type.Optional(status), steps, connections },
  { additionalProperties: false, title: 'CreateAutomationRequest' },
);
export type CreateAutomationInput = Static<typeof CreateAutomationBody>;

export const UpdateAutomationBody = partialBody('UpdateAutomationRequest', {
  name,
  status,
  steps,
  connections,
});
export type UpdateAutomationInput = Static<typeof UpdateAutomationBody>;

export const AutomationListQuery = Type.Object(
  { ...ListQuery.properties, status: Type.Optional(status) },
  { additionalProperties: false },
);

export const AutomationParams = Type.Object({ id: Type.String({ description: 'Automation id (`aut_…`).' }) });

export const DeletedAutomation = Type.Object(
  { object: Type.Literal('automation'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedAutomation' },
);

const runStatus = literals(
  ['running', 'waiting', 'completed', 'cancelled', 'failed'] as const,
  '`running` (due to take its next step), `waiting` (for an event), `completed`, `cancelled` (the automation was stopped, the contact deleted or unsubscribed), `failed`.',
);

export const RunStep = Type.Object(
  {
    key: Type.String(),
    type: Type.String(),
    status: literals(['completed', 'skipped', 'waiting', 'failed'] as const, 'What became of the step.'),
    output: nullable(Type.Record(Type.String(), Type.Unknown()), 'What it did, and why a branch was taken.'),
    error: nullable(Type.Record(Type.String(), Type.Unknown()), 'Why it failed.'),
    started_at: nullable(Type.String()),
    completed_at: nullable(Type.String()),
    created_at: Type.String(),
  },
  { title: 'AutomationRunStep' },
);

const runFields = {
  object: Type.Literal('automation_run'),
  id: Type.String({ description: 'Run identifier (`arun_…`).' }),
  automation_id: Type.String(),
  contact_id: Type.String(),
  contact_email: nullable(Type.String(), 'The contact’s address; null once the contact is deleted.'),
  status: runStatus,
  current_step: Type.String({ description: 'The step it is at (to take next, or waiting in).' }),
  due_at: nullable(Type.String(), 'When it next moves on its own (a delay’s end, a wait’s timeout).'),
  reason: nullable(Type.String(), 'Why it was cancelled or failed.'),
  trigger_payload: Type.Record(Type.String(), Type.Unknown()),
  started_at: nullable(Type.String()),
  completed_at: nullable(Type.String()),
  created_at: timestamp('When the trigger started it.'),
};

export const RunSummary = Type.Object(runFields, { title: 'AutomationRunSummary' });
export type RunSummaryView = Static<typeof RunSummary>;
export const RunList = listEnvelope(RunSummary, 'AutomationRunList');
export const Run = Type.Object({ ...runFields, steps: Type.Array(RunStep) }, { title: 'AutomationRun' });
export type RunView = Static<typeof Run>;

export const RunListQuery = Type.Object(
  { ...ListQuery.properties, status: Type.Optional(runStatus) },
  { additionalProperties: false },
);
export const RunParams = Type.Object({
  id: Type.String({ description: 'Automation id (`aut_…`).' }),
  runId: Type.String({ description: 'Run id (`arun_…`).' }),
});
