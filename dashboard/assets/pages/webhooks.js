import { html, useState } from '../html.js';
import { api } from '../api.js';
import { FilterSelect, ListPage, useListFilters } from '../list.js';
import {
  Chip,
  confirmAction,
  Empty,
  ErrorBanner,
  Field,
  fieldErrors,
  FormError,
  formatTime,
  Link,
  Loading,
  localInputValue,
  navigate,
  Notice,
  Table,
  useAsync,
} from '../ui.js';

const loadKinds = () => api('GET', '/event-kinds').then((list) => list.data);

export function WebhooksPage({ search }) {
  const kinds = useAsync(loadKinds, []);
  const [creating, setCreating] = useState(false);
  return html`<h1>Webhooks</h1>
    <p class="lead">Endpoints that receive signed events about your email, retried until they answer 2xx.</p>
    <${ListPage}
      search=${search}
      base="/dashboard/webhooks"
      endpoint="/webhooks"
      label="Pages of webhooks"
      empty=${html`<${Empty} title="No webhooks yet">
        Add an endpoint below to receive <code>email.delivered</code>, <code>email.bounced</code> and the other
        events as signed POST requests.
      </${Empty}>`}
      footer=${({ items }) =>
        html`<section class="card">
          <h2>Add a webhook</h2>
          ${
            creating || !items.length
              ? html`<${WebhookForm}
                  kinds=${kinds}
                  onSaved=${(webhook) => navigate(`/dashboard/webhooks/${webhook.id}`)}
                  onCancel=${items.length ? () => setCreating(false) : null}
                />`
              : html`<button
                  data-writes
                  type="button"
                  class="button-primary"
                  onClick=${() => setCreating(true)}
                >
                  Add a webhook
                </button>`
          }
        </section>`}
    >
      ${({ items }) => html`<${Table} rows=${items} columns=${WEBHOOK_COLUMNS} />`}
    </${ListPage}>`;
}

const WEBHOOK_COLUMNS = [
  {
    label: 'URL',
    cell: (webhook) => html`<${Link} href=${`/dashboard/webhooks/${webhook.id}`}>${webhook.url}</${Link}>`,
  },
  {
    label: 'Status',
    cell: (webhook) => html`<${WebhookHealth} webhook=${webhook} />`,
  },
  { label: 'Events', cell: (webhook) => webhook.events.join(', ') },
  { label: 'Created', cell: (webhook) => formatTime(webhook.created_at) },
];

/**
 * Whether a webhook's events get through: `enabled` only while its deliveries succeed (or none was tried);
 * "failing since …" while every attempt fails (`failing_since`); disabled with the service's reason.
 */
function WebhookHealth({ webhook }) {
  // Once disabled, its reason says it all (the service's own reason names the streak's start).
  const failing = webhook.enabled ? webhook.failing_since : null;
  return html`<div data-testid="webhook-health">
    ${
      !webhook.enabled
        ? html`<${Chip} status="disabled" />`
        : failing
          ? html`<${Chip} status="failing" />`
          : html`<${Chip} status="enabled" />`
    }
    ${failing ? html`<div class="small">Every delivery has failed since ${formatTime(failing)}.</div>` : null}
    ${webhook.disabled_reason ? html`<div class="small">Disabled: ${webhook.disabled_reason}</div>` : null}
  </div>`;
}

/** Create (no `webhook`) or edit. Event kinds are picked from GET /v1/event-kinds. */
function WebhookForm({ webhook, kinds, onSaved, onCancel }) {
  const [url, setUrl] = useState(webhook?.url ?? '');
  const [events, setEvents] = useState(() => new Set(webhook?.events ?? []));
  const [secret, setSecret] = useState('');
  const [removeSecret, setRemoveSecret] = useState(false);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const errors = fieldErrors(error);
  const toggle = (type) => {
    const next = new Set(events);
    if (next.has(type)) next.delete(type);
    else next.add(type);
    setEvents(next);
  };
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    const body = { url: url.trim(), events: [...events] };
    if (secret) body.secret = secret;
    else if (removeSecret) body.secret = null;
    try {
      const saved = webhook
        ? await api('PATCH', `/webhooks/${webhook.id}`, body)
        : await api('POST', '/webhooks', body);
      setSecret('');
      onSaved(saved.data);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  return html`<form onSubmit=${submit} novalidate class="form">
    <${FormError} error=${error} fields=${['url', 'events', 'secret']} />
    <${Field} label="Endpoint URL" name="url" errors=${errors} hint="https://… (http and private hosts only when the server allows them)">
      ${(props) => html`<input ...${props} type="url" required value=${url} onInput=${(e) => setUrl(e.currentTarget.value)} placeholder="https://example.com/postwire" />`}
    </${Field}>
    <fieldset class=${`field${errors.events ? ' field-invalid' : ''}`} aria-describedby=${errors.events ? 'field-events-error' : undefined}>
      <legend>Events</legend>
      ${kinds.error ? html`<${ErrorBanner} error=${kinds.error} />` : null}
      <div class="checks">
        ${(kinds.data ?? []).map(
          (kind) =>
            html`<label class="check" title=${kind.description}>
              <input
                type="checkbox"
                name="events"
                value=${kind.type}
                checked=${events.has(kind.type)}
                onChange=${() => toggle(kind.type)}
              />
              <span>${kind.type}</span>
            </label>`,
        )}
      </div>
      ${errors.events ? html`<p class="field-error" id="field-events-error" data-param="events">${errors.events}</p>` : null}
    </fieldset>
    <${Field}
      label=${webhook?.has_secret ? 'New signing secret (leave empty to keep the current one)' : 'Signing secret (optional)'}
      name="secret"
      errors=${errors}
      hint="whsec_<base64> as Standard Webhooks prescribes, or any string. It is never shown again."
    >
      ${(props) => html`<input ...${props} type="password" autocomplete="new-password" value=${secret} onInput=${(e) => setSecret(e.currentTarget.value)} />`}
    </${Field}>
    ${
      webhook?.has_secret
        ? html`<label class="check"
            ><input
              type="checkbox"
              checked=${removeSecret}
              onChange=${(e) => setRemoveSecret(e.currentTarget.checked)}
            />
            Remove the signing secret</label
          >`
        : null
    }
    <div class="actions">
      <button data-writes type="submit" class="button-primary" disabled=${busy}>${webhook ? 'Save changes' : 'Create webhook'}</button>
      ${onCancel ? html`<button type="button" onClick=${onCancel}>Cancel</button>` : null}
    </div>
  </form>`;
}

export function WebhookPage({ id, search }) {
  const webhook = useAsync(() => api('GET', `/webhooks/${encodeURIComponent(id)}`).then((r) => r.data), [id]);
  const kinds = useAsync(loadKinds, []);
  const [editing, setEditing] = useState(false);
  const [actionError, setActionError] = useState(null);
  const [deliveriesVersion, setDeliveriesVersion] = useState(0);
  const refreshDeliveries = () => setDeliveriesVersion((n) => n + 1);

  if (webhook.error) {
    return html`<h1>Webhook</h1><${ErrorBanner} error=${webhook.error} />
      <p><${Link} href="/dashboard/webhooks">Back to webhooks</${Link}></p>`;
  }
  if (!webhook.data)
    return html`<h1>Webhook</h1>
      <${Loading} />`;
  const hook = webhook.data;

  const setEnabled = async (enabled) => {
    setActionError(null);
    try {
      await api('PATCH', `/webhooks/${hook.id}`, { enabled });
      webhook.reload();
    } catch (failure) {
      setActionError(failure);
    }
  };
  const remove = async () => {
    if (!(await confirmAction(`Delete the webhook ${hook.url}? Its pending deliveries stop.`))) return;
    try {
      await api('DELETE', `/webhooks/${hook.id}`);
      navigate('/dashboard/webhooks');
    } catch (failure) {
      setActionError(failure);
    }
  };

  return html`<p class="crumbs"><${Link} href="/dashboard/webhooks">Webhooks</${Link}> /</p>
    <h1 class="break">${hook.url}</h1>
    <${ErrorBanner} error=${actionError} />
    <section class="card">
      <dl class="facts">
        <dt>Id</dt><dd><code>${hook.id}</code></dd>
        <dt>Status</dt>
        <dd><${WebhookHealth} webhook=${hook} /></dd>
        <dt>Events</dt><dd>${hook.events.join(', ')}</dd>
        <dt>Signing secret</dt><dd>${hook.has_secret ? 'set' : 'none (deliveries are not signed)'}</dd>
        <dt>Updated</dt><dd>${formatTime(hook.updated_at)}</dd>
      </dl>
      <div class="actions">
        ${
          hook.enabled
            ? html`<button data-writes type="button" onClick=${() => setEnabled(false)}>Disable</button>`
            : html`<button data-writes type="button" class="button-primary" onClick=${() => setEnabled(true)}>
                Enable
              </button>`
        }
        <button data-writes type="button" onClick=${() => setEditing(!editing)} aria-expanded=${editing}>Edit</button>
        <button data-writes type="button" class="button-danger" onClick=${remove}>Delete</button>
      </div>
      ${
        editing
          ? html`<${WebhookForm}
              webhook=${hook}
              kinds=${kinds}
              onSaved=${() => (setEditing(false), webhook.reload())}
              onCancel=${() => setEditing(false)}
            />`
          : null
      }
    </section>
    <div class="grid-2">
      <${TestEvent} hook=${hook} kinds=${kinds} onDone=${refreshDeliveries} />
      <${Recover} hook=${hook} onDone=${refreshDeliveries} />
    </div>
    <${Deliveries} hook=${hook} search=${search} version=${deliveriesVersion} />`;
}

function TestEvent({ hook, kinds, onDone }) {
  const [type, setType] = useState(hook.events[0] ?? 'email.sent');
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const send = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    setResult(null);
    try {
      setResult(await api('POST', `/webhooks/${hook.id}/test`, { type }));
      onDone();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  return html`<section class="card">
    <h2>Send a test event</h2>
    <form onSubmit=${send} class="inline-form">
      <label for="test-type">Kind</label>
      <select id="test-type" value=${type} onChange=${(e) => setType(e.currentTarget.value)}>
        ${(kinds.data ?? [{ type }]).map((kind) => html`<option value=${kind.type}>${kind.type}</option>`)}
      </select>
      <button data-writes type="submit" class="button-primary" disabled=${busy}>
        ${busy ? 'Sending…' : 'Send test event'}
      </button>
    </form>
    <${ErrorBanner} error=${error} />
    ${
      result
        ? html`<${Notice} kind=${result.success ? 'ok' : 'error'}>
          <span data-testid="test-result">
            ${result.success ? 'Delivered' : 'Not delivered'}${result.status_code != null ? ` — HTTP ${result.status_code}` : ''}${result.duration_ms != null ? ` in ${result.duration_ms} ms` : ''}.
            ${result.error ? ` ${result.error}` : ''}
          </span>
        </${Notice}>`
        : null
    }
  </section>`;
}

/** datetime-local gives local time without a zone; the API wants ISO 8601 UTC. */
function Recover({ hook, onDone }) {
  const [since, setSince] = useState(() => localInputValue(new Date(Date.now() - 86_400_000)));
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const errors = fieldErrors(error);
  const recover = async (event) => {
    event.preventDefault();
    setError(null);
    setResult(null);
    const when = new Date(since);
    if (Number.isNaN(when.getTime())) return setError({ message: 'Pick a date and time.', param: 'since' });
    if (
      !(await confirmAction(`Re-queue every failed delivery to this webhook since ${when.toISOString()}?`, {
        confirmLabel: 'Recover',
        danger: false,
      }))
    )
      return;
    try {
      setResult(await api('POST', `/webhooks/${hook.id}/recover`, { since: when.toISOString() }));
      onDone();
    } catch (failure) {
      setError(failure);
    }
  };
  return html`<section class="card">
    <h2>Recover failed deliveries</h2>
    <form onSubmit=${recover} novalidate>
      <${Field} label="Failed since (your local time)" name="since" errors=${errors}>
        ${(props) => html`<input ...${props} type="datetime-local" value=${since} onInput=${(e) => setSince(e.currentTarget.value)} />`}
      </${Field}>
      <button data-writes type="submit">Recover since</button>
    </form>
    <${FormError} error=${error} fields=${['since']} />
    ${result ? html`<${Notice} kind="ok">${result.requeued} failed deliveries queued again.</${Notice}>` : null}
  </section>`;
}

const ATTEMPT_COLUMNS = [
  { label: 'Attempted', cell: (attempt) => formatTime(attempt.attempted_at) },
  {
    label: 'Status',
    cell: (attempt) =>
      html`${attempt.status_code ?? '—'}${attempt.error ? html` <span class="muted small">${attempt.error}</span>` : null}`,
  },
  { label: 'Duration', cell: (attempt) => `${attempt.duration_ms} ms` },
  {
    label: 'Response',
    cell: (attempt) => html`<code class="excerpt">${attempt.response_excerpt ?? '—'}</code>`,
  },
];

const DELIVERY_STATUSES = ['pending', 'succeeded', 'failed'];

/** The webhook's deliveries, a list of its own: its filter and page are in the webhook page's URL. */
function Deliveries({ hook, search, version: outerVersion }) {
  const base = `/dashboard/webhooks/${encodeURIComponent(hook.id)}`;
  const { filters, setFilters } = useListFilters(search, base, ['status']);
  const [version, setVersion] = useState(0);
  const refresh = () => setVersion((n) => n + 1);
  const [message, setMessage] = useState(null);
  const redeliver = async (delivery) => {
    setMessage(null);
    try {
      await api('POST', `/events/${delivery.event_id}/redeliver`, { webhook_id: hook.id });
      setMessage({ kind: 'ok', text: `Event ${delivery.event_id} queued for delivery again.` });
      refresh();
    } catch (failure) {
      setMessage({ kind: 'error', error: failure });
    }
  };
  return html`<section class="card">
    <div class="section-head">
      <h2>Deliveries</h2>
      <div class="inline-form">
        <${FilterSelect}
          id="delivery-status"
          label="Status"
          name="status"
          filters=${filters}
          setFilters=${setFilters}
          options=${DELIVERY_STATUSES.map((status) => [status, status])}
          anyText="all"
        />
        <button type="button" onClick=${refresh}>Refresh</button>
      </div>
    </div>
    ${message?.kind === 'ok' ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <${ListPage}
      search=${search}
      base=${base}
      endpoint=${`/webhooks/${encodeURIComponent(hook.id)}/deliveries`}
      filters=${['status']}
      limit=${20}
      version=${`${outerVersion}.${version}`}
      label="Pages of deliveries"
      empty=${({
        status,
      }) => html`<${Empty} title=${status ? `No ${status} deliveries` : 'No deliveries yet'}>
        Send a test event above, or send an email: every event this webhook subscribes to is delivered here.
      </${Empty}>`}
    >
      ${({ items }) =>
        html`<ul class="deliveries">
          ${items.map(
            (delivery) =>
              html`<li class="delivery" data-delivery=${delivery.id}>
                <div class="delivery-head">
                  <${Chip} status=${delivery.status} />
                  <strong>${delivery.event_type}</strong>
                  <code class="small">${delivery.event_id}</code>
                  <span class="muted small">${formatTime(delivery.created_at)}</span>
                  <button data-writes type="button" class="button-small" onClick=${() => redeliver(delivery)}>
                    Redeliver
                  </button>
                </div>
                ${
                  delivery.attempt_log.length === 0
                    ? html`<p class="muted small">
                        No attempt
                        yet${delivery.next_attempt_at ? `; due ${formatTime(delivery.next_attempt_at)}` : ''}.
                      </p>`
                    : html`<${Table}
                        class="attempts"
                        rows=${delivery.attempt_log}
                        columns=${ATTEMPT_COLUMNS}
                        rowAttributes=${() => ({ class: 'attempt' })}
                      />`
                }
              </li>`,
          )}
        </ul>`}
    </${ListPage}>
  </section>`;
}
