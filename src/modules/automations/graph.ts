import { DomainError } from '../../lib/errors.ts';
import { EVENT_NAME_PATTERN } from '../custom-events/custom-events.schemas.ts';
import { checkRule, parseWait } from './rules.ts';

// An automation's graph: steps (a key, a type, a config) and connections between them, in Resend's vocabulary.
// Checked whole on every save, before anything is stored: one trigger, every connection between steps that
// exist and of a kind its step may have, every step reachable from the trigger, no cycle that does not wait
// (a delay, or a wait for an event), each step's config of its type. Each refusal names the step at fault.

export const STEP_TYPES = [
  'trigger',
  'delay',
  'send_email',
  'wait_for_event',
  'condition',
  'contact_update',
  'contact_delete',
  'add_to_segment',
  'remove_from_segment',
] as const;
export type StepType = (typeof STEP_TYPES)[number];

export const CONNECTION_TYPES = [
  'default',
  'condition_met',
  'condition_not_met',
  'timeout',
  'event_received',
] as const;
export type ConnectionType = (typeof CONNECTION_TYPES)[number];

export interface Step {
  key: string;
  type: StepType;
  config: Record<string, unknown>;
}

export interface Connection {
  from: string;
  to: string;
  type: ConnectionType;
}

export interface Graph {
  steps: Step[];
  connections: Connection[];
}

/** The connections each step type may leave by. */
const LEAVES_BY: Record<StepType, readonly ConnectionType[]> = {
  trigger: ['default'],
  delay: ['default'],
  send_email: ['default'],
  wait_for_event: ['event_received', 'timeout'],
  condition: ['condition_met', 'condition_not_met'],
  contact_update: ['default'],
  contact_delete: [],
  add_to_segment: ['default'],
  remove_from_segment: ['default'],
};

/** Steps a cycle may pass through without running at once, again and again. */
const WAITS: readonly StepType[] = ['delay', 'wait_for_event'];

/** What a save refers to outside the graph, checked by the service against the project. */
export interface References {
  templates: Array<{ step: string; param: string; id: string }>;
  segments: Array<{ step: string; param: string; id: string }>;
  topics: Array<{ step: string; param: string; id: string }>;
}

const invalid = (param: string, message: string) =>
  new DomainError('validation', 'invalid_automation', message, param);

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * What else than a custom event may start a run (a trigger's `on`, under /v1 only: Resend's triggers are events):
 * a contact created, added to a (list) segment, subscribed to a topic.
 */
export const CONTACT_TRIGGERS = [
  'contact.created',
  'contact.added_to_segment',
  'contact.topic_subscribed',
] as const;
export type ContactTrigger = (typeof CONTACT_TRIGGERS)[number];

/**
 * A trigger as one indexed key (automations.trigger_event): an event's name, or `@` and the contact trigger
 * (`@contact.created`, `@contact.added_to_segment:seg_…`, `@contact.topic_subscribed:top_…`). No event name
 * starts with `@` (EVENT_NAME_PATTERN), so an event sent can never start a contact trigger's automations.
 */
export function contactTriggerKey(on: ContactTrigger, ref?: string): string {
  return ref === undefined ? `@${on}` : `@${on}:${ref}`;
}

/** The trigger's key of a checked graph (contactTriggerKey). */
export function triggerKey(graph: Graph): string {
  const config = graph.steps.find((step) => step.type === 'trigger')!.config;
  if (typeof config.event_name === 'string') return config.event_name;
  const on = config.on as ContactTrigger;
  const ref = on === 'contact.added_to_segment' ? config.segment_id : config.topic_id;
  return contactTriggerKey(on, on === 'contact.created' ? undefined : (ref as string));
}

/** What a trigger step did, as its run's first step records it: the event sent, or the contact change. */
export const triggerOutput = (
  config: Record<string, unknown>,
  sendId: string | null,
  payload: Record<string, unknown>,
): Record<string, unknown> =>
  config.on === undefined ? { event: config.event_name, send_id: sendId } : { on: config.on, ...payload };

/** The step a run goes to from `key` by `type`; undefined where the graph ends. */
export function nextStep(graph: Graph, key: string, type: ConnectionType): Step | undefined {
  const connection = graph.connections.find((each) => each.from === key && each.type === type);
  return connection && graph.steps.find((step) => step.key === connection.to);
}

/** Checks one step's config; answers what it refers to. */
function checkConfig(step: Step, index: number, refs: References): void {
  const at = `steps[${index}].config`;
  const name = `Step '${step.key}' (${step.type})`;
  const config = step.config;
  const string = (field: string, required: boolean): string | undefined => {
    const value = config[field];
    if (value === undefined && !required) return undefined;
    if (typeof value !== 'string' || value.length === 0) {
      throw invalid(`${at}.${field}`, `${name}: config.${field} must be a non-empty string.`);
    }
    return value;
  };
  const allowOnly = (...fields: string[]) => {
    for (const field of Object.keys(config)) {
      if (!fields.includes(field)) throw invalid(`${at}.${field}`, `${name}: config.${field} is not known.`);
    }
  };
  const eventName = (field: string) => {
    const value = string(field, true)!;
    if (!new RegExp(EVENT_NAME_PATTERN).test(value) || value.length > 100) {
      throw invalid(`${at}.${field}`, `${name}: config.${field} '${value}' is not an event name.`);
    }
  };
  const wait = (field: string, required: boolean) => {
    const value = string(field, required);
    if (value !== undefined && parseWait(value) === undefined) {
      throw invalid(
        `${at}.${field}`,
        `${name}: config.${field} '${value}' is not a duration such as '30 minutes', '2 days' or '1 week' (up to a year).`,
      );
    }
  };
  switch (step.type) {
    case 'trigger':
      checkTrigger(config, at, name, refs, step.key);
      return;
    case 'delay':
      allowOnly('duration');
      wait('duration', true);
      return;
    case 'send_email': {
      allowOnly('template', 'subject', 'from', 'reply_to', 'topic_id');
      const template = config.template;
      if (!isObject(template) || typeof template.id !== 'string' || template.id.length === 0) {
        throw invalid(`${at}.template.id`, `${name}: config.template.id must name a published template.`);
      }
      if (template.variables !== undefined && !isObject(template.variables)) {
        throw invalid(`${at}.template.variables`, `${name}: config.template.variables must be an object.`);
      }
      string('from', true);
      string('subject', false);
      string('reply_to', false);
      refs.templates.push({ step: step.key, param: `${at}.template.id`, id: template.id });
      const topic = string('topic_id', false);
      if (topic !== undefined) refs.topics.push({ step: step.key, param: `${at}.topic_id`, id: topic });
      return;
    }
    case 'wait_for_event':
      allowOnly('event_name', 'timeout', 'filter_rule');
      eventName('event_name');
      wait('timeout', false);
      if (config.filter_rule !== undefined) checkRule(config.filter_rule, `${at}.filter_rule`, name);
      return;
    case 'condition':
      checkRule(config, at, name);
      return;
    case 'contact_update': {
      allowOnly('first_name', 'last_name', 'unsubscribed', 'properties');
      if (Object.keys(config).length === 0) {
        throw invalid(
          at,
          `${name}: config must change at least one of first_name, last_name, unsubscribed, properties.`,
        );
      }
      if (config.properties !== undefined && !isObject(config.properties)) {
        throw invalid(`${at}.properties`, `${name}: config.properties must be an object.`);
      }
      return;
    }
    case 'contact_delete':
      allowOnly();
      return;
    case 'add_to_segment':
    case 'remove_from_segment':
      allowOnly('segment_id');
      refs.segments.push({ step: step.key, param: `${at}.segment_id`, id: string('segment_id', true)! });
      return;
  }
}

/** A trigger: `event_name` (a custom event), or `on` a contact trigger with the segment or topic it names. */
function checkTrigger(
  config: Record<string, unknown>,
  at: string,
  name: string,
  refs: References,
  key: string,
): void {
  const on = config.on;
  if (on === undefined) {
    for (const field of Object.keys(config)) {
      if (field !== 'event_name') throw invalid(`${at}.${field}`, `${name}: config.${field} is not known.`);
    }
    const value = config.event_name;
    if (typeof value !== 'string' || value.length === 0) {
      throw invalid(
        `${at}.event_name`,
        `${name}: config.event_name must name an event, or config.on one of ${CONTACT_TRIGGERS.map((each) => `'${each}'`).join(', ')}.`,
      );
    }
    if (!new RegExp(EVENT_NAME_PATTERN).test(value) || value.length > 100) {
      throw invalid(`${at}.event_name`, `${name}: config.event_name '${value}' is not an event name.`);
    }
    return;
  }
  if (typeof on !== 'string' || !(CONTACT_TRIGGERS as readonly string[]).includes(on)) {
    throw invalid(
      `${at}.on`,
      `${name}: config.on must be one of ${CONTACT_TRIGGERS.map((each) => `'${each}'`).join(', ')}.`,
    );
  }
  const needs =
    on === 'contact.added_to_segment'
      ? 'segment_id'
      : on === 'contact.topic_subscribed'
        ? 'topic_id'
        : undefined;
  for (const field of Object.keys(config)) {
    if (field !== 'on' && field !== needs) {
      throw invalid(`${at}.${field}`, `${name}: config.${field} is not known with on '${on}'.`);
    }
  }
  if (needs === undefined) return;
  const id = config[needs];
  if (typeof id !== 'string' || id.length === 0) {
    throw invalid(
      `${at}.${needs}`,
      `${name}: config.${needs} must name the ${needs.slice(0, -3)} of on '${on}'.`,
    );
  }
  (needs === 'segment_id' ? refs.segments : refs.topics).push({ step: key, param: `${at}.${needs}`, id });
}

/**
 * Checks a graph (throws a 422 `invalid_automation` naming the step) and answers what it refers to outside
 * itself, for the service to check against the project.
 */
export function checkGraph(graph: Graph): References {
  const refs: References = { templates: [], segments: [], topics: [] };
  const byKey = new Map<string, Step>();
  graph.steps.forEach((step, index) => {
    if (byKey.has(step.key)) throw invalid(`steps[${index}].key`, `Two steps have the key '${step.key}'.`);
    byKey.set(step.key, step);
    checkConfig(step, index, refs);
  });
  const triggers = graph.steps.filter((step) => step.type === 'trigger');
  if (triggers.length !== 1) {
    throw invalid('steps', `An automation has exactly one trigger step; this one has ${triggers.length}.`);
  }
  const trigger = triggers[0]!;
  const leaving = new Set<string>();
  graph.connections.forEach((connection, index) => {
    const at = `connections[${index}]`;
    for (const end of ['from', 'to'] as const) {
      if (!byKey.has(connection[end])) {
        throw invalid(
          `${at}.${end}`,
          `Connection ${index} goes ${end} '${connection[end]}', which is no step.`,
        );
      }
    }
    const from = byKey.get(connection.from)!;
    if (connection.to === trigger.key) {
      throw invalid(
        `${at}.to`,
        `Step '${trigger.key}' (trigger) starts the automation; no connection leads to it.`,
      );
    }
    if (!LEAVES_BY[from.type].includes(connection.type)) {
      const allowed = LEAVES_BY[from.type];
      throw invalid(
        `${at}.type`,
        `Step '${from.key}' (${from.type}) cannot be left by a '${connection.type}' connection` +
          (allowed.length === 0
            ? '; it ends the run.'
            : ` (only ${allowed.map((type) => `'${type}'`).join(', ')}).`),
      );
    }
    if (connection.type === 'timeout' && from.config.timeout === undefined) {
      throw invalid(`${at}.type`, `Step '${from.key}' (wait_for_event) has no timeout to leave by.`);
    }
    const way = `${connection.from} ${connection.type}`;
    if (leaving.has(way)) {
      throw invalid(
        `${at}`,
        `Step '${from.key}' has two '${connection.type}' connections; a run takes one way.`,
      );
    }
    leaving.add(way);
  });
  // Every step reachable from the trigger.
  const reached = new Set<string>([trigger.key]);
  const queue = [trigger.key];
  while (queue.length > 0) {
    const key = queue.shift()!;
    for (const connection of graph.connections) {
      if (connection.from === key && !reached.has(connection.to)) {
        reached.add(connection.to);
        queue.push(connection.to);
      }
    }
  }
  graph.steps.forEach((step, index) => {
    if (!reached.has(step.key)) {
      throw invalid(
        `steps[${index}]`,
        `Step '${step.key}' (${step.type}) cannot be reached from the trigger.`,
      );
    }
  });
  checkCycles(graph, byKey);
  return refs;
}

/** A cycle of steps that run at once would loop without end: every cycle must pass a step that waits. */
function checkCycles(graph: Graph, byKey: Map<string, Step>): void {
  // Depth-first over the steps that do not wait: a back edge among them is a cycle without a wait.
  const state = new Map<string, 'open' | 'done'>();
  const visit = (key: string): void => {
    state.set(key, 'open');
    for (const connection of graph.connections) {
      if (connection.from !== key) continue;
      const to = byKey.get(connection.to)!;
      if (WAITS.includes(to.type)) continue;
      const seen = state.get(to.key);
      if (seen === 'open') {
        const index = graph.steps.indexOf(to);
        throw invalid(
          `steps[${index}]`,
          `Step '${to.key}' (${to.type}) is on a cycle without a delay or a wait for an event; it would run without end.`,
        );
      }
      if (seen === undefined) visit(to.key);
    }
    state.set(key, 'done');
  };
  for (const step of graph.steps) if (!WAITS.includes(step.type) && !state.has(step.key)) visit(step.key);
}
