import { type PageRequest } from '../../db/pagination.ts';
import type { AutomationStatus } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { insertThenView } from '../../db/project-rows.ts';
import { type Clock, nextUpdatedAt } from '../../lib/clock.ts';
import { DomainError, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { SegmentRepo } from '../segments/segments.repo.ts';
import type { TemplateRepo } from '../templates/templates.repo.ts';
import type { TopicRepo } from '../topics/topics.repo.ts';
import { type AutomationRecord, type AutomationRepo, noRuns, type RunCounts } from './automations.repo.ts';
import type { AutomationView, CreateAutomationInput, UpdateAutomationInput } from './automations.schemas.ts';
import { checkGraph, type Graph, type References, triggerKey } from './graph.ts';
import type { RunRepo } from './runs.repo.ts';

export const toAutomationView = (record: AutomationRecord, runs: RunCounts = noRuns()): AutomationView => ({
  object: 'automation',
  id: record.id,
  name: record.name,
  status: record.status,
  steps: record.graph.steps,
  connections: record.graph.connections,
  runs,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** An update checked before its transaction. */
export interface UpdatePlan {
  projectId: string;
  id: string;
  input: UpdateAutomationInput;
  graph: Graph | undefined;
}

/** Where checkReferences looks up what a graph names outside itself. */
export interface ReferenceLookups {
  templates: Pick<TemplateRepo, 'find' | 'findByAlias'>;
  segments: Pick<SegmentRepo, 'find'>;
  topics: Pick<TopicRepo, 'find'>;
}

export interface AutomationServiceDeps extends ReferenceLookups {
  repo: AutomationRepo;
  runs: Pick<RunRepo, 'cancelLive'>;
  clock: Clock;
}

/** A graph as the API takes it: each connection's type given (`default` when left out). */
const graphOf = (input: {
  steps: Graph['steps'];
  connections: CreateAutomationInput['connections'];
}): Graph => ({
  steps: input.steps.map((step) => ({ key: step.key, type: step.type, config: step.config })),
  connections: input.connections.map((connection) => ({
    from: connection.from,
    to: connection.to,
    type: connection.type ?? 'default',
  })),
});

const refused = (param: string, message: string) =>
  new DomainError('validation', 'invalid_automation', message, param);

/** What the graph names outside itself, each the project's (a template published). */
async function checkReferences(
  { templates, segments, topics }: ReferenceLookups,
  projectId: string,
  refs: References,
): Promise<void> {
  for (const ref of refs.templates) {
    const template = isId('tpl', ref.id)
      ? await templates.find(projectId, ref.id)
      : await templates.findByAlias(projectId, ref.id);
    if (!template) throw refused(ref.param, `Step '${ref.step}' (send_email): no template '${ref.id}'.`);
    if (template.publishedVersion === null) {
      throw refused(ref.param, `Step '${ref.step}' (send_email): template '${ref.id}' is not published.`);
    }
  }
  for (const ref of refs.segments) {
    const segment = isId('seg', ref.id) ? await segments.find(projectId, ref.id) : undefined;
    if (!segment) throw refused(ref.param, `Step '${ref.step}': no segment '${ref.id}'.`);
    // A filter's members are whoever matches it: nobody is added to it (nor removed, nor triggers by it).
    if (segment.filter !== null) {
      throw refused(ref.param, `Step '${ref.step}': the segment '${ref.id}' is a filter, not a list.`);
    }
  }
  for (const ref of refs.topics) {
    if (!isId('top', ref.id) || !(await topics.find(projectId, ref.id))) {
      throw refused(ref.param, `Step '${ref.step}': no topic '${ref.id}'.`);
    }
  }
}

/**
 * Automations: an event-triggered graph of steps, checked whole on every save (graph.ts) and against the
 * project (published templates, its segments and topics). Stopping one (or disabling it) cancels its live runs
 * in the same transaction; a run's worker finds its run cancelled and writes nothing more.
 */
export function createAutomationService({ repo, runs, clock, ...references }: AutomationServiceDeps) {
  async function load(projectId: string, id: string, transaction?: Transaction): Promise<AutomationRecord> {
    const record = isId('aut', id) ? await repo.find(projectId, id, transaction) : undefined;
    if (!record) throw notFound('automation', id);
    return record;
  }

  async function checked(projectId: string, graph: Graph): Promise<Graph> {
    await checkReferences(references, projectId, checkGraph(graph));
    return graph;
  }

  async function views(records: AutomationRecord[], transaction?: Transaction): Promise<AutomationView[]> {
    const counts = await repo.runCounts(
      records.map((record) => record.id),
      transaction,
    );
    return records.map((record) => toAutomationView(record, counts.get(record.id)));
  }

  /** Writes a change of status: to disabled, the live runs are cancelled with it. */
  async function write(transaction: Transaction, next: AutomationRecord, previous: AutomationRecord) {
    if (!(await repo.update(next, previous.graphVersion, transaction))) throw notFound('automation', next.id);
    if (previous.status === 'enabled' && next.status === 'disabled') {
      await runs.cancelLive({ automationId: next.id }, 'automation_stopped', next.updatedAt, transaction);
    }
    return (await views([next], transaction))[0]!;
  }

  return {
    async prepareCreate(projectId: string, input: CreateAutomationInput): Promise<AutomationRecord> {
      const graph = await checked(projectId, graphOf(input));
      const now = clock.now().toISOString();
      return {
        id: newId('aut'),
        projectId,
        name: input.name,
        // Disabled until asked: an automation saved half-way starts no runs.
        status: input.status ?? 'disabled',
        triggerEvent: triggerKey(graph),
        graph,
        graphVersion: 1,
        createdAt: now,
        updatedAt: now,
      };
    },

    create: insertThenView(repo, toAutomationView),

    async get(projectId: string, id: string): Promise<AutomationView> {
      return (await views([await load(projectId, id)]))[0]!;
    },

    async list(projectId: string, page: PageRequest, status: AutomationStatus | undefined) {
      const records = await repo.list(projectId, page, status);
      return { items: await views(records.items), hasMore: records.hasMore };
    },

    /** Checks an update's graph (steps and connections come together) before its transaction. */
    async prepareUpdate(projectId: string, id: string, input: UpdateAutomationInput): Promise<UpdatePlan> {
      if (Object.keys(input).length === 0) {
        throw new DomainError(
          'validation',
          'parameter_missing',
          'Send at least one of name, status, steps, connections.',
        );
      }
      if ((input.steps === undefined) !== (input.connections === undefined)) {
        throw new DomainError(
          'validation',
          'parameter_missing',
          'Send steps and connections together: the graph is replaced whole.',
          input.steps === undefined ? 'steps' : 'connections',
        );
      }
      if (!isId('aut', id)) throw notFound('automation', id);
      const graph =
        input.steps && input.connections
          ? await checked(projectId, graphOf({ steps: input.steps, connections: input.connections }))
          : undefined;
      return { projectId, id, input, graph };
    },

    async update(transaction: Transaction, plan: UpdatePlan): Promise<AutomationView> {
      const current = await load(plan.projectId, plan.id, transaction);
      const graph = plan.graph ?? current.graph;
      const next: AutomationRecord = {
        ...current,
        name: plan.input.name ?? current.name,
        status: plan.input.status ?? current.status,
        graph,
        triggerEvent: triggerKey(graph),
        // A new graph is a new version: runs under way keep following theirs.
        graphVersion: plan.graph ? current.graphVersion + 1 : current.graphVersion,
        updatedAt: nextUpdatedAt(clock, current.updatedAt),
      };
      return write(transaction, next, current);
    },

    /** A copy, disabled, named `<name> (copy)`; its runs are its own. */
    async duplicate(transaction: Transaction, projectId: string, id: string): Promise<AutomationView> {
      const current = await load(projectId, id, transaction);
      const now = clock.now().toISOString();
      const copy: AutomationRecord = {
        ...current,
        id: newId('aut'),
        name: `${current.name} (copy)`.slice(0, 200),
        status: 'disabled',
        graphVersion: 1,
        createdAt: now,
        updatedAt: now,
      };
      await repo.insert(copy, transaction);
      return toAutomationView(copy);
    },

    /** Disables it and cancels its live runs: nothing more is sent. */
    async stop(transaction: Transaction, projectId: string, id: string): Promise<AutomationView> {
      const current = await load(projectId, id, transaction);
      const next = {
        ...current,
        status: 'disabled' as const,
        updatedAt: nextUpdatedAt(clock, current.updatedAt),
      };
      return write(transaction, next, current);
    },

    async delete(transaction: Transaction, projectId: string, id: string) {
      if (!isId('aut', id) || !(await repo.delete(projectId, id, transaction)))
        throw notFound('automation', id);
      return { object: 'automation' as const, id, deleted: true as const };
    },
  };
}

export type AutomationService = ReturnType<typeof createAutomationService>;
