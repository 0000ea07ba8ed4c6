import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { filteredListUnderPath, writeUnderPath } from '../../http/path-handlers.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import { invalidParam } from '../../lib/errors.ts';
import type { AutomationRunStatus } from '../../db/schema.ts';
import {
  AutomationListQuery,
  CreateAutomationBody,
  UpdateAutomationBody,
} from '../automations/automations.schemas.ts';
import type { AutomationService } from '../automations/automations.service.ts';
import type { RunService } from '../automations/runs.service.ts';
import {
  CreateCustomEventBody,
  SendCustomEventBody,
  UpdateCustomEventBody,
} from '../custom-events/custom-events.schemas.ts';
import type { CustomEventService } from '../custom-events/custom-events.service.ts';
import { hide, IdParams, translated } from './resend-routing.ts';

// Resend's automations (create, get, list, update, duplicate, stop, remove), their runs (get, list) and its
// custom events (create, get, list, update, remove, send) over the /v1 services. The graph's wire shape is
// Resend's own (steps and connections in snake_case), which /v1 takes as it is; answers are cut to Resend's.
// An event sent with an email Postwire has no contact for creates the contact, as Resend does.

/** Resend's run states: a run waiting for an event is `running` to it. */
const RESEND_RUN_STATUS: Record<AutomationRunStatus, string> = {
  running: 'running',
  waiting: 'running',
  completed: 'completed',
  cancelled: 'cancelled',
  failed: 'failed',
};
const RUN_STATUSES: Record<string, AutomationRunStatus[]> = {
  running: ['running', 'waiting'],
  completed: ['completed'],
  cancelled: ['cancelled'],
  failed: ['failed'],
};

const RunParams = Type.Object({ id: Type.String({ minLength: 1 }), runId: Type.String({ minLength: 1 }) });
const RunQuery = Type.Object({ ...ListQuery.properties, status: Type.Optional(Type.String()) });

/** Resend's `status` filter (`running,completed`) as Postwire's statuses. */
function runStatuses(value: string | undefined): AutomationRunStatus[] | undefined {
  if (value === undefined || value === '') return undefined;
  return value.split(',').flatMap((each) => {
    const statuses = RUN_STATUSES[each.trim()];
    if (!statuses) {
      throw invalidParam(
        'status',
        `status must be running, completed, cancelled or failed (comma-separated).`,
      );
    }
    return statuses;
  });
}

/**
 * Resend's triggers are custom events (`eventName`): a trigger `on` a contact change (created, added to a
 * segment, subscribed to a topic) is Postwire's, taken under /v1 only.
 */
function eventTriggersOnly(
  steps: ReadonlyArray<{ type: string; config: Record<string, unknown> }> | undefined,
) {
  const index = steps?.findIndex((step) => step.type === 'trigger' && step.config.on !== undefined) ?? -1;
  if (index >= 0) {
    throw invalidParam(
      `steps[${index}].config.on`,
      'A trigger here is a custom event (eventName); triggers on contacts are taken at /v1/automations.',
    );
  }
}

const summary = (automation: {
  id: string;
  name: string;
  status: string;
  created_at: string;
  updated_at: string;
}) => ({
  id: automation.id,
  name: automation.name,
  status: automation.status,
  created_at: automation.created_at,
  updated_at: automation.updated_at,
});

const eventOf = (event: {
  id: string;
  name: string;
  schema: unknown;
  created_at: string;
  updated_at: string;
}) => ({
  id: event.id,
  name: event.name,
  schema: event.schema,
  created_at: event.created_at,
  updated_at: event.updated_at,
});

export function registerResendAutomationRoutes(
  scope: FastifyInstance,
  {
    automations,
    automationRuns,
    customEvents,
  }: { automations: AutomationService; automationRuns: RunService; customEvents: CustomEventService },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();
  const write = { permission: 'full_access' } as const;
  const read = { permission: 'read_only' } as const;

  app.post(
    '/automations',
    { config: write, schema: { ...hide, body: CreateAutomationBody } },
    async (request, reply) => {
      eventTriggersOnly(request.body.steps);
      const record = await automations.prepareCreate(projectOf(request), request.body);
      return reply.transact(async (transaction) => ({
        object: 'automation',
        id: (await automations.create(transaction, record)).id,
      }));
    },
  );

  app.get(
    '/automations',
    { config: read, schema: { ...hide, querystring: AutomationListQuery } },
    async (request) => {
      const { status, ...query } = request.query;
      const page = await automations.list(projectOf(request), toPageRequest(query, 'aut'), status);
      return list(page.items.map(summary), page.hasMore);
    },
  );

  app.get('/automations/:id', { config: read, schema: { ...hide, params: IdParams } }, async (request) => {
    const { runs: _runs, ...automation } = await automations.get(projectOf(request), request.params.id);
    return automation;
  });

  app.patch(
    '/automations/:id',
    { config: write, schema: { ...hide, params: IdParams, body: UpdateAutomationBody } },
    async (request, reply) => {
      eventTriggersOnly(request.body.steps);
      const plan = await automations.prepareUpdate(projectOf(request), request.params.id, request.body);
      return reply.transact(async (transaction) => ({
        object: 'automation',
        id: (await automations.update(transaction, plan)).id,
      }));
    },
  );

  app.post(
    '/automations/:id/duplicate',
    { config: write, schema: { ...hide, params: IdParams } },
    async (request, reply) =>
      reply.transact(async (transaction) => ({
        object: 'automation',
        id: (await automations.duplicate(transaction, projectOf(request), request.params.id)).id,
      })),
  );

  app.post(
    '/automations/:id/stop',
    { config: write, schema: { ...hide, params: IdParams } },
    async (request, reply) =>
      reply.transact(async (transaction) => {
        const stopped = await automations.stop(transaction, projectOf(request), request.params.id);
        return { object: 'automation', id: stopped.id, status: 'disabled' };
      }),
  );

  app.delete(
    '/automations/:id',
    { config: write, schema: { ...hide, params: IdParams } },
    writeUnderPath(automations.delete),
  );

  app.get(
    '/automations/:id/runs',
    { config: read, schema: { ...hide, params: IdParams, querystring: RunQuery } },
    filteredListUnderPath(
      'arun',
      (projectId, id, page, { status }: { status?: string | undefined }) =>
        automationRuns.list(projectId, id, page, runStatuses(status)),
      (run) => ({
        id: run.id,
        status: RESEND_RUN_STATUS[run.status],
        started_at: run.started_at,
        completed_at: run.completed_at,
        created_at: run.created_at,
      }),
    ),
  );

  app.get(
    '/automations/:id/runs/:runId',
    { config: read, schema: { ...hide, params: RunParams } },
    async (request) => {
      const run = await automationRuns.get(projectOf(request), request.params.id, request.params.runId);
      return {
        object: 'automation_run',
        id: run.id,
        status: RESEND_RUN_STATUS[run.status],
        started_at: run.started_at,
        completed_at: run.completed_at,
        created_at: run.created_at,
        steps: run.steps,
      };
    },
  );

  app.post(
    '/events/send',
    {
      config: write,
      schema: { ...hide, body: SendCustomEventBody },
      preValidation: translated((body) =>
        typeof body === 'object' && body !== null && 'email' in body
          ? { ...body, create_contact: true }
          : body,
      ),
    },
    async (request, reply) => {
      const plan = await customEvents.prepareSend(projectOf(request), request.body);
      return reply.transact(async (transaction) => ({
        object: 'event',
        event: (await customEvents.send(transaction, plan)).event,
      }));
    },
  );

  app.post(
    '/events',
    { config: write, schema: { ...hide, body: CreateCustomEventBody } },
    async (request, reply) => {
      const record = customEvents.prepareCreate(projectOf(request), request.body);
      return reply.transact(async (transaction) => ({
        object: 'event',
        id: (await customEvents.create(transaction, record)).id,
      }));
    },
  );

  app.get('/events', { config: read, schema: { ...hide, querystring: ListQuery } }, async (request) => {
    const page = await customEvents.list(projectOf(request), toPageRequest(request.query, 'cev'));
    return list(page.items.map(eventOf), page.hasMore);
  });

  app.get('/events/:id', { config: read, schema: { ...hide, params: IdParams } }, async (request) => ({
    object: 'event',
    ...eventOf(await customEvents.get(projectOf(request), request.params.id)),
  }));

  app.patch(
    '/events/:id',
    { config: write, schema: { ...hide, params: IdParams, body: UpdateCustomEventBody } },
    async (request, reply) =>
      reply.transact(async (transaction) => ({
        object: 'event',
        id: (await customEvents.update(transaction, projectOf(request), request.params.id, request.body)).id,
      })),
  );

  app.delete(
    '/events/:id',
    { config: write, schema: { ...hide, params: IdParams } },
    async (request, reply) =>
      reply.transact(async (transaction) => {
        const { id } = await customEvents.delete(transaction, projectOf(request), request.params.id);
        return { object: 'event', id, deleted: true };
      }),
  );
}
