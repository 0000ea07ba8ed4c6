import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import type { AutomationRunStatus } from '../../db/schema.ts';
import {
  callUnderPath,
  callUnderPathAt,
  filteredListUnderPath,
  writeUnderPath,
} from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { list, toPageRequest } from '../../http/list.ts';
import {
  Automation,
  AutomationList,
  AutomationListQuery,
  AutomationParams,
  CreateAutomationBody,
  DeletedAutomation,
  Run,
  RunList,
  RunListQuery,
  RunParams,
  UpdateAutomationBody,
} from './automations.schemas.ts';
import type { AutomationService } from './automations.service.ts';
import type { RunService } from './runs.service.ts';

// Automations and their runs. Writes need a full_access key; read_only keys read.
export function registerAutomationRoutes(
  server: FastifyInstance,
  { automations, automationRuns }: { automations: AutomationService; automationRuns: RunService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  const routes = routeOptions(['Automations']);
  const action = (operationId: string, summary: string, description: string, status: 200 | 201) =>
    routes.fullAccess({
      operationId,
      summary,
      description,
      params: AutomationParams,
      response: { [status]: Automation, ...errorResponses() },
    });

  app.post(
    '/v1/automations',
    routes.fullAccess({
      operationId: 'createAutomation',
      summary: 'Create an automation',
      description:
        'A graph of steps and connections, checked whole: one trigger, every step reachable, no cycle without a delay or a wait, every template published. A refusal (422 `invalid_automation`) names the step at fault. `status` defaults to `disabled`.',
      body: CreateAutomationBody,
      response: { 201: Automation, ...errorResponses() },
    }),
    async (request, reply) => {
      const record = await automations.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact((transaction) => automations.create(transaction, record));
    },
  );

  app.get(
    '/v1/automations',
    routes.readOnly({
      operationId: 'listAutomations',
      summary: 'List automations, newest first',
      querystring: AutomationListQuery,
      response: { 200: AutomationList, ...errorResponses() },
    }),
    async (request) => {
      const { status, ...query } = request.query;
      const page = await automations.list(projectOf(request), toPageRequest(query, 'aut'), status);
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/automations/:id',
    routes.readOnly({
      operationId: 'getAutomation',
      summary: 'Retrieve an automation with its runs’ counts',
      params: AutomationParams,
      response: { 200: Automation, ...errorResponses() },
    }),
    callUnderPath(automations.get),
  );

  app.patch(
    '/v1/automations/:id',
    routes.fullAccess({
      operationId: 'updateAutomation',
      summary: 'Update an automation',
      description:
        'Any of name, status, and the graph (steps and connections together, checked as on create). Live runs go on from the step they are at, on the new graph; a run whose step is gone fails. Disabling it stops it (its live runs are cancelled).',
      params: AutomationParams,
      body: UpdateAutomationBody,
      response: { 200: Automation, ...errorResponses() },
    }),
    async (request, reply) => {
      const plan = await automations.prepareUpdate(projectOf(request), request.params.id, request.body);
      return reply.transact((transaction) => automations.update(transaction, plan));
    },
  );

  app.post(
    '/v1/automations/:id/duplicate',
    action('duplicateAutomation', 'Duplicate an automation', 'A disabled copy named `<name> (copy)`.', 201),
    async (request, reply) => {
      reply.code(201);
      return reply.transact((transaction) =>
        automations.duplicate(transaction, projectOf(request), request.params.id),
      );
    },
  );

  app.post(
    '/v1/automations/:id/stop',
    action(
      'stopAutomation',
      'Stop an automation',
      'Disables it and cancels its live runs in one transaction: no step is taken after the answer, nothing more is sent.',
      200,
    ),
    writeUnderPath(automations.stop),
  );

  app.delete(
    '/v1/automations/:id',
    routes.fullAccess({
      operationId: 'deleteAutomation',
      summary: 'Delete an automation and its runs',
      params: AutomationParams,
      response: { 200: DeletedAutomation, ...errorResponses() },
    }),
    writeUnderPath(automations.delete),
  );

  app.get(
    '/v1/automations/:id/runs',
    routes.readOnly({
      operationId: 'listAutomationRuns',
      summary: 'List an automation’s runs, newest first',
      params: AutomationParams,
      querystring: RunListQuery,
      response: { 200: RunList, ...errorResponses() },
    }),
    filteredListUnderPath(
      'arun',
      (projectId, id, page, { status }: { status?: AutomationRunStatus | undefined }) =>
        automationRuns.list(projectId, id, page, status === undefined ? undefined : [status]),
    ),
  );

  app.get(
    '/v1/automations/:id/runs/:runId',
    routes.readOnly({
      operationId: 'getAutomationRun',
      summary: 'Retrieve a run with its steps',
      description: 'Each step the run took: when, what it did, and why a branch was taken.',
      params: RunParams,
      response: { 200: Run, ...errorResponses() },
    }),
    callUnderPathAt('runId', automationRuns.get),
  );
}
