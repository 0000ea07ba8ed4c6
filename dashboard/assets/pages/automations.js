import { html, useState } from '../html.js';
import { api } from '../api.js';
import { FilterSelect, ListPage, useListFilters } from '../list.js';
import { AudienceTabs } from './contacts.js';
import {
  Chip,
  confirmAction,
  Empty,
  ErrorBanner,
  formatTime,
  Json,
  Link,
  Notice,
  Table,
  unloaded,
  useAsync,
} from '../ui.js';

// Automations (issue 40): the list with each one's state and its runs' counts, an automation's graph drawn
// read-only as an ordered list of its steps (a branch is a nested list under the step it leaves, named by
// when a run takes it), its runs, and a run's timeline: each step taken, when, what it did and why a branch
// was taken. Enable and stop are the only changes made here (the graph is written through the API).

/** A run's states, in the order a run goes through them (GET /v1/automations/{id}'s `runs`). */
const RUN_STATES = [
  ['running', 'Running'],
  ['waiting', 'Waiting'],
  ['completed', 'Completed'],
  ['cancelled', 'Cancelled'],
  ['failed', 'Failed'],
];

/** When a run takes a connection, in words (a branch's heading). */
const BRANCHES = {
  default: 'Then',
  condition_met: 'If the condition is met',
  condition_not_met: 'If the condition is not met',
  event_received: 'When the event arrives',
  timeout: 'If it times out',
};

const OPERATORS = {
  eq: 'is',
  neq: 'is not',
  gt: 'is greater than',
  gte: 'is at least',
  lt: 'is less than',
  lte: 'is at most',
  contains: 'contains',
  starts_with: 'starts with',
  ends_with: 'ends with',
  exists: 'exists',
  is_empty: 'is empty',
};

const value = (raw) => JSON.stringify(raw);

/** A condition's rule in words: `contact.plan is "pro"`, nested `and`/`or` in brackets. */
export function ruleText(rule) {
  if (!rule || typeof rule !== 'object') return '—';
  if (rule.type === 'and' || rule.type === 'or') {
    const parts = (rule.rules ?? []).map(ruleText);
    return parts.length > 1 ? `(${parts.join(` ${rule.type} `)})` : (parts[0] ?? '—');
  }
  const operator = OPERATORS[rule.operator] ?? rule.operator;
  const unary = rule.operator === 'exists' || rule.operator === 'is_empty';
  return `${rule.field} ${operator}${unary ? '' : ` ${value(rule.value)}`}`;
}

/** The trigger's event (or what it is), for the list. */
const triggerOf = (automation) => {
  const trigger = automation.steps.find((step) => step.type === 'trigger');
  return trigger ? (trigger.config.event_name ?? triggerText(trigger.config)) : '—';
};

const triggerText = (config) =>
  config.event_name ? `the event ${config.event_name}` : Object.keys(config).length ? value(config) : '—';

/** What a step does, in one sentence (its config in words). */
function stepText(step) {
  const config = step.config ?? {};
  switch (step.type) {
    case 'trigger':
      return `Starts on ${triggerText(config)}`;
    case 'delay':
      return `Waits ${config.duration}`;
    case 'send_email': {
      const subject = config.subject ? `, subject “${config.subject}”` : '';
      const topic = config.topic_id ? ` (topic ${config.topic_id})` : '';
      return `Sends template ${config.template?.id ?? '—'} from ${config.from ?? '—'}${subject}${topic}`;
    }
    case 'wait_for_event':
      return `Waits for the event ${config.event_name}${config.timeout ? ` for up to ${config.timeout}` : ''}${
        config.filter_rule ? `, where ${ruleText(config.filter_rule)}` : ''
      }`;
    case 'condition':
      return `Checks whether ${ruleText(config)}`;
    case 'contact_update':
      return `Updates the contact: ${value(config)}`;
    case 'contact_delete':
      return 'Deletes the contact';
    case 'add_to_segment':
      return `Adds the contact to segment ${config.segment_id}`;
    case 'remove_from_segment':
      return `Removes the contact from segment ${config.segment_id}`;
    default:
      return `${step.type} ${value(config)}`;
  }
}

export function AutomationsPage({ search }) {
  const { filters, setFilters } = useListFilters(search, '/dashboard/automations', ['status']);
  return html`<h1>Automations</h1>
    <${AudienceTabs} current="/dashboard/automations" />
    <p class="lead">
      Sequences that run by themselves for each contact an event happens to, newest first. They are written
      through the API (<a href="/docs#/Automations">POST /v1/automations</a>); here you follow their runs and
      enable or stop them.
    </p>
    <form class="filters inline-form" onSubmit=${(event) => event.preventDefault()} aria-label="Filters">
      <${FilterSelect}
        id="automation-status"
        label="Status"
        name="status"
        filters=${filters}
        setFilters=${setFilters}
        options=${[
          ['enabled', 'enabled'],
          ['disabled', 'disabled'],
        ]}
      />
    </form>
    <${ListPage}
      search=${search}
      base="/dashboard/automations"
      endpoint="/automations"
      filters=${['status']}
      label="Pages of automations"
      empty=${html`<${Empty} title="No automations yet">Create one with <code>POST /v1/automations</code> (docs/api/automations.md): a trigger, its steps and their connections.</${Empty}>`}
    >
      ${({ items }) =>
        html`<${Table}
          rows=${items}
          rowAttributes=${(automation) => ({ 'data-automation': automation.name })}
          columns=${[
            {
              label: 'Name',
              class: 'break',
              cell: (automation) =>
                html`<${Link} href=${`/dashboard/automations/${automation.id}`}>${automation.name}</${Link}>`,
            },
            { label: 'Status', cell: (automation) => html`<${Chip} status=${automation.status} />` },
            { label: 'Trigger', class: 'break', cell: triggerOf },
            ...RUN_STATES.map(([key, label]) => ({ label, cell: (automation) => automation.runs[key] })),
            { label: 'Updated', cell: (automation) => formatTime(automation.updated_at) },
          ]}
        />`}
    </${ListPage}>`;
}

export function AutomationPage({ id, search }) {
  const loaded = useAsync(() => api('GET', `/automations/${id}`), [id]);
  const [message, setMessage] = useState(null);
  const waiting = unloaded('Automation', loaded);
  if (waiting) return waiting;
  const automation = loaded.data;
  const change = async (work, text) => {
    setMessage(null);
    try {
      await work();
      setMessage({ text });
      loaded.reload();
    } catch (failure) {
      setMessage({ error: failure });
    }
  };
  const enable = () =>
    change(
      () => api('PATCH', `/automations/${id}`, { status: 'enabled' }),
      'Enabled: its trigger starts runs.',
    );
  const stop = async () => {
    if (
      !(await confirmAction(`Stop "${automation.name}"? It is disabled and its live runs are cancelled.`, {
        confirmLabel: 'Stop automation',
      }))
    )
      return;
    await change(
      () => api('POST', `/automations/${id}/stop`, {}),
      'Stopped: disabled, its live runs cancelled.',
    );
  };
  return html`<p class="crumbs"><${Link} href="/dashboard/automations">Automations</${Link}> /</p>
    <h1 class="break">${automation.name}</h1>
    <div class="toolbar">
      <${Chip} status=${automation.status} />
      <button type="button" onClick=${loaded.reload}>Refresh</button>
    </div>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <section class="card" aria-label="Actions">
      <div class="actions">
        ${
          automation.status === 'enabled'
            ? html`<button data-writes type="button" class="button-danger" onClick=${stop}>
                Stop automation
              </button>`
            : html`<button data-writes type="button" class="button-primary" onClick=${enable}>Enable</button>`
        }
      </div>
      <p class="small muted">
        ${
          automation.status === 'enabled'
            ? 'Enabled: each trigger starts a run for its contact. Stopping disables it and cancels its live runs.'
            : 'Disabled: its trigger starts nothing. Enabling it starts runs from the next trigger on.'
        }
      </p>
    </section>
    <h2>Runs</h2>
    <div class="stats" data-testid="automation-runs">
      ${RUN_STATES.map(
        ([key, label]) =>
          html`<div class="stat" data-stat=${key}>
            <span class="stat-label">${label}</span>
            <strong class="stat-value">${automation.runs[key]}</strong>
          </div>`,
      )}
    </div>
    <section class="card">
      <h2 id="graph-title">Steps</h2>
      <p class="small muted">
        In the order a run takes them, from the trigger; a branch is listed under the step it leaves.
      </p>
      <${Graph} automation=${automation} />
    </section>
    <${Runs} automation=${automation} search=${search} />`;
}

/**
 * The graph as nested ordered lists: a straight line of steps is one list; a step a run leaves in more than
 * one way (a condition, a wait with a timeout) ends its list with one item per branch, each with its own list.
 * A step reached a second time (two branches joining, a loop back through a delay) is not drawn again: a link
 * says where the run goes on.
 */
function Graph({ automation }) {
  const steps = new Map(automation.steps.map((step) => [step.key, step]));
  const leaving = new Map();
  for (const connection of automation.connections) {
    leaving.set(connection.from, [...(leaving.get(connection.from) ?? []), connection]);
  }
  const drawn = new Set();
  const anchor = (key) => `step-${encodeURIComponent(key)}`;
  const sequence = (start) => {
    const items = [];
    let key = start;
    while (key !== undefined) {
      if (drawn.has(key)) {
        items.push(html`<li class="graph-jump">Goes on at <a href=${`#${anchor(key)}`}>${key}</a></li>`);
        break;
      }
      drawn.add(key);
      const step = steps.get(key);
      const out = leaving.get(key) ?? [];
      const straight = out.length === 1 && out[0].type === 'default';
      items.push(
        html`<li id=${anchor(key)} data-step=${key}>
          <span class="graph-step"
            ><strong>${key}</strong> <span class="muted">(${step?.type ?? 'unknown'})</span>:</span
          >${' '}
          <span class="graph-text">${step ? stepText(step) : 'No such step.'}</span>
          ${
            !straight && out.length > 0
              ? html`<ul class="graph-branches">
                  ${out.map(
                    (connection) =>
                      html`<li data-branch=${connection.type}>
                        <span class="graph-branch">${BRANCHES[connection.type] ?? connection.type}:</span>
                        <ol class="graph">
                          ${sequence(connection.to)}
                        </ol>
                      </li>`,
                  )}
                </ul>`
              : null
          }
          ${out.length === 0 ? html` <span class="small muted">The run ends here.</span>` : null}
        </li>`,
      );
      key = straight ? out[0].to : undefined;
    }
    return items;
  };
  const trigger = automation.steps.find((step) => step.type === 'trigger');
  if (!trigger) return html`<p class="muted">No trigger.</p>`;
  return html`<ol class="graph" aria-labelledby="graph-title" data-testid="automation-graph">
    ${sequence(trigger.key)}
  </ol>`;
}

const RUN_FILTERS = RUN_STATES.map(([key]) => [key, key]);

/**
 * A run's contact: its address, linking to it; once the contact is deleted (a contact_delete step, or deleted
 * since) the run still shows, by the contact's id.
 */
function RunContact({ run }) {
  return run.contact_email === null
    ? html`<code>${run.contact_id}</code> (deleted)`
    : html`<${Link} href=${`/dashboard/contacts/${run.contact_id}`}>${run.contact_email}</${Link}>`;
}

function Runs({ automation, search }) {
  const base = `/dashboard/automations/${automation.id}`;
  const { filters, setFilters } = useListFilters(search, base, ['status']);
  return html`<section class="card">
    <h2>Runs, newest first</h2>
    <div class="inline-form">
      <${FilterSelect}
        id="run-status"
        label="State"
        name="status"
        filters=${filters}
        setFilters=${setFilters}
        options=${RUN_FILTERS}
      />
    </div>
    <${ListPage}
      search=${search}
      base=${base}
      endpoint=${`/automations/${automation.id}/runs`}
      filters=${['status']}
      limit=${20}
      label="Pages of runs"
      empty=${html`<${Empty} title="No runs yet">A run starts when its trigger happens to a contact while the automation is enabled.</${Empty}>`}
    >
      ${({ items }) =>
        html`<${Table}
          rows=${items}
          rowAttributes=${(run) => ({ 'data-run': run.id })}
          columns=${[
            {
              label: 'Run',
              cell: (run) => html`<${Link} href=${`${base}/runs/${run.id}`}><code>${run.id}</code></${Link}>`,
            },
            { label: 'Contact', class: 'break', cell: (run) => html`<${RunContact} run=${run} />` },
            { label: 'State', cell: (run) => html`<${Chip} status=${run.status} />` },
            { label: 'At step', class: 'break', cell: (run) => run.current_step },
            { label: 'Started', cell: (run) => formatTime(run.started_at ?? run.created_at) },
            {
              label: 'Next or ended',
              cell: (run) =>
                run.completed_at
                  ? formatTime(run.completed_at)
                  : run.due_at
                    ? `next ${formatTime(run.due_at)}`
                    : '—',
            },
          ]}
        />`}
    </${ListPage}>
  </section>`;
}

const SKIPPED = {
  suppressed: 'the address is suppressed',
  topic_opt_out: 'the contact opted out of the topic',
};

/** What a step of a run did, and why (its `output`, `error`), in words. */
function stepOutcome(step) {
  const out = step.output ?? {};
  if (step.status === 'failed') {
    return `Failed: ${step.error?.message ?? value(step.error ?? {})}`;
  }
  switch (step.type) {
    case 'trigger':
      return `Started by the event ${out.event}${out.send_id ? ` (${out.send_id})` : ''}.`;
    case 'delay':
      return `Waited until ${formatTime(out.until)}.`;
    case 'send_email':
      if (step.status === 'skipped')
        return `Not sent to ${out.to}: ${SKIPPED[out.reason] ?? out.reason}. The run went on.`;
      return html`Sent “${out.subject}” to ${out.to}: <${Link} href=${`/dashboard/emails/${out.email_id}`}>${out.email_id}</${Link}>.`;
    case 'wait_for_event':
      if (step.status === 'waiting') {
        const ignored = out.ignored
          ? ` An event ${out.event_name} arrived that its filter did not pass (${value(out.ignored)}).`
          : '';
        return `Waiting for the event ${out.event_name}${out.timeout_at ? ` until ${formatTime(out.timeout_at)}` : ''}.${ignored}`;
      }
      if (out.timed_out) return 'No event before the timeout: took the timeout branch.';
      return `The event ${out.event_received} arrived (${value(out.payload ?? {})}): took the “when the event arrives” branch.`;
    case 'condition': {
      const values = Object.entries(out.values ?? {})
        .map(([field, read]) => `${field} = ${value(read)}`)
        .join(', ');
      return `${out.result ? 'Met' : 'Not met'}${values ? ` (read ${values})` : ''}: took the “${(BRANCHES[out.branch] ?? out.branch ?? '').toLowerCase()}” branch.`;
    }
    case 'contact_update':
      return `Changed the contact: ${value(out.changed ?? {})}.`;
    case 'contact_delete':
      return 'Deleted the contact.';
    case 'add_to_segment':
      return `Added the contact to segment ${out.segment_id}.`;
    case 'remove_from_segment':
      return `Removed the contact from segment ${out.segment_id}.`;
    default:
      return value(out);
  }
}

const REASONS = {
  automation_stopped: 'the automation was stopped',
  contact_deleted: 'the contact was deleted',
  contact_unsubscribed: 'the contact unsubscribed',
  step_removed: 'its step was removed from the graph',
};

export function AutomationRunPage({ id, runId }) {
  const loaded = useAsync(
    () =>
      Promise.all([api('GET', `/automations/${id}`), api('GET', `/automations/${id}/runs/${runId}`)]).then(
        ([automation, run]) => ({ automation, run }),
      ),
    [id, runId],
  );
  const waiting = unloaded('Run', loaded);
  if (waiting) return waiting;
  const { automation, run } = loaded.data;
  const who = run.contact_email ?? run.contact_id;
  return html`<p class="crumbs">
      <${Link} href="/dashboard/automations">Automations</${Link}> /${' '}
      <${Link} href=${`/dashboard/automations/${id}`}>${automation.name}</${Link}> /
    </p>
    <h1 class="break">Run for ${who}</h1>
    <div class="toolbar">
      <${Chip} status=${run.status} />
      <button type="button" onClick=${loaded.reload}>Refresh</button>
    </div>
    <section class="card">
      <dl class="facts">
        <dt>Id</dt><dd><code>${run.id}</code></dd>
        <dt>Contact</dt>
        <dd><${RunContact} run=${run} /></dd>
        <dt>At step</dt><dd>${run.current_step}</dd>
        ${
          run.reason
            ? html`<dt>Why it ended</dt>
                <dd>${REASONS[run.reason] ?? run.reason}</dd>`
            : null
        }
        ${
          run.due_at
            ? html`<dt>Next move</dt>
                <dd>${formatTime(run.due_at)}</dd>`
            : null
        }
        <dt>Started</dt><dd>${formatTime(run.started_at ?? run.created_at)}</dd>
        ${
          run.completed_at
            ? html`<dt>Ended</dt>
                <dd>${formatTime(run.completed_at)}</dd>`
            : null
        }
      </dl>
    </section>
    <section class="card">
      <h2 id="timeline-title">Timeline</h2>
      ${
        run.steps.length === 0
          ? html`<p class="muted">No step taken yet.</p>`
          : html`<ol
              class="timeline run-timeline"
              aria-labelledby="timeline-title"
              data-testid="run-timeline"
            >
              ${run.steps.map(
                (step) =>
                  html`<li data-step=${step.key} data-status=${step.status}>
                    <span class="when"
                      >${formatTime(step.completed_at ?? step.started_at ?? step.created_at)}</span
                    >
                    <strong>${step.key}</strong>
                    <span class="muted">(${step.type})</span>
                    <${Chip} status=${step.status} />
                    <span class="run-outcome">${stepOutcome(step)}</span>
                  </li>`,
              )}
            </ol>`
      }
    </section>
    <section class="card">
      <h2>The trigger's payload</h2>
      <${Json} value=${run.trigger_payload} />
    </section>`;
}
