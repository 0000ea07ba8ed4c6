import { html, useState } from '../html.js';
import { api } from '../api.js';
import { FilterSelect, ListPage, useListFilters } from '../list.js';
import { HtmlPreview } from '../preview.js';
import { AudienceTabs } from './contacts.js';
import { PreviewAndTest } from './broadcast-preview.js';
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
  unloaded,
  useAsync,
} from '../ui.js';

/** The results' numbers, in the order a broadcast goes out and comes back (GET /v1/broadcasts/{id}). */
const COUNTS = [
  ['copies', 'Copies'],
  ['excluded', 'Excluded'],
  ['queued', 'Queued'],
  ['sent', 'Sent'],
  ['delivered', 'Delivered'],
  ['opened', 'Opened'],
  ['clicked', 'Clicked'],
  ['bounced', 'Bounced'],
  ['complained', 'Complained'],
  ['unsubscribed', 'Unsubscribed'],
  ['failed', 'Failed'],
];

/** What the recipients list can be narrowed to (the API's `status`): each count a copy can have. */
const RECIPIENT_FILTERS = COUNTS.map(([key]) => key).filter((key) => key !== 'copies' && key !== 'excluded');

const when = (broadcast) =>
  broadcast.sent_at
    ? `sent ${formatTime(broadcast.sent_at)}`
    : broadcast.scheduled_at
      ? `for ${formatTime(broadcast.scheduled_at)}`
      : '—';

export function BroadcastsPage({ search }) {
  const [composing, setComposing] = useState(false);
  return html`<h1>Broadcasts</h1>
    <${AudienceTabs} current="/dashboard/broadcasts" />
    <div class="toolbar">
      <p class="lead">Email to a segment's contacts: drafts, scheduled, sending and sent, newest first.</p>
      <button data-writes type="button" class="button-primary" aria-expanded=${composing} onClick=${() => setComposing(!composing)}>
        New broadcast
      </button>
    </div>
    ${
      composing
        ? html`<section class="card">
            <h2>New broadcast</h2>
            <${ComposeForm} />
          </section>`
        : null
    }
    <${ListPage}
      search=${search}
      base="/dashboard/broadcasts"
      endpoint="/broadcasts"
      label="Pages of broadcasts"
      empty=${html`<${Empty} title="No broadcasts yet">Write one with New broadcast: it is a draft until you send or schedule it.</${Empty}>`}
    >
      ${({ items }) =>
        html`<${Table}
          rows=${items}
          rowAttributes=${(broadcast) => ({ 'data-broadcast': broadcast.id })}
          columns=${[
            {
              label: 'Name',
              cell: (broadcast) =>
                html`<${Link} href=${`/dashboard/broadcasts/${broadcast.id}`}>${broadcast.name}</${Link}>`,
            },
            { label: 'Status', cell: (broadcast) => html`<${Chip} status=${broadcast.status} />` },
            { label: 'Subject', class: 'break', cell: (broadcast) => broadcast.subject ?? '—' },
            { label: 'When', cell: when },
            { label: 'Created', cell: (broadcast) => formatTime(broadcast.created_at) },
          ]}
        />`}
    </${ListPage}>`;
}

/** The segments and topics a broadcast can name (the first 100 of each). */
function useAudience() {
  return useAsync(
    () => Promise.all([api('GET', '/segments?limit=100'), api('GET', '/topics?limit=100')]),
    [],
  );
}

/** A new draft: what it says, who it goes to. Created with POST /v1/broadcasts; sending is on its page. */
function ComposeForm() {
  const audience = useAudience();
  const [form, setForm] = useState({
    name: '',
    from: '',
    subject: '',
    preview_text: '',
    html: '',
    text: '',
    segment_id: '',
    topic_id: '',
  });
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const set = (name) => (event) => setForm({ ...form, [name]: event.currentTarget.value });
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    const body = Object.fromEntries(Object.entries(form).filter(([, value]) => value !== ''));
    try {
      const created = await api('POST', '/broadcasts', body);
      navigate(`/dashboard/broadcasts/${created.id}`);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const errors = fieldErrors(error);
  const [segments, topics] = audience.data ?? [{ data: [] }, { data: [] }];
  const text = (name, label, props = {}) =>
    html`<${Field} label=${label} name=${name} errors=${errors}>
      ${(field) => html`<input ...${field} ...${props} value=${form[name]} onInput=${set(name)} />`}
    </${Field}>`;
  return html`<form class="form" onSubmit=${submit} novalidate>
    <${FormError} error=${error} fields=${Object.keys(form)} />
    <${ErrorBanner} error=${audience.error} />
    ${text('name', 'Name (for you)')}
    ${text('from', 'From', { placeholder: 'Acme <news@acme.example>' })}
    ${text('subject', 'Subject')}
    ${text('preview_text', 'Preview text')}
    <${Field} label="Segment" name="segment_id" errors=${errors}>
      ${(field) =>
        html`<select ...${field} value=${form.segment_id} onChange=${set('segment_id')}>
          <option value="">Choose a segment</option>
          ${segments.data.map((segment) => html`<option value=${segment.id}>${segment.name}</option>`)}
        </select>`}
    </${Field}>
    <${Field} label="Topic (optional)" name="topic_id" errors=${errors} hint="Contacts opted out of it are left out, and its unsubscribe link leaves only it.">
      ${(field) =>
        html`<select ...${field} value=${form.topic_id} onChange=${set('topic_id')}>
          <option value="">No topic</option>
          ${topics.data.map((topic) => html`<option value=${topic.id}>${topic.name}</option>`)}
        </select>`}
    </${Field}>
    <${Field} label="Html" name="html" errors=${errors} hint="Liquid: {{ contact.first_name }}, {{ contact.properties.plan }}, {{ unsubscribe_url }}, {{ preferences_url }}.">
      ${(field) => html`<textarea ...${field} rows="8" value=${form.html} onInput=${set('html')}></textarea>`}
    </${Field}>
    <${Field} label="Text" name="text" errors=${errors}>
      ${(field) => html`<textarea ...${field} rows="4" value=${form.text} onInput=${set('text')}></textarea>`}
    </${Field}>
    <button data-writes type="submit" class="button-primary" disabled=${busy || !form.segment_id}>Save draft</button>
  </form>`;
}

/** A segment's or topic's name, for a broadcast's page (its id while it loads, or if it is gone). */
function NameOf({ kind, id }) {
  const found = useAsync(() => api('GET', `/${kind}/${id}`), [kind, id]);
  return found.data?.name ?? id;
}

export function BroadcastPage({ id, search }) {
  const loaded = useAsync(() => api('GET', `/broadcasts/${id}`), [id]);
  const [message, setMessage] = useState(null);
  const waiting = unloaded('Broadcast', loaded);
  if (waiting) return waiting;
  const broadcast = loaded.data;
  const done = (text) => (setMessage({ text }), loaded.reload());
  const failed = (error) => setMessage({ error });
  return html`<p class="crumbs"><${Link} href="/dashboard/broadcasts">Broadcasts</${Link}> /</p>
    <h1 class="break">${broadcast.name}</h1>
    <div class="toolbar">
      <${Chip} status=${broadcast.status} />
      <button type="button" onClick=${loaded.reload}>Refresh</button>
    </div>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <${Actions} broadcast=${broadcast} onDone=${done} onFailed=${failed} />
    <section class="card">
      <dl class="facts">
        <dt>Id</dt><dd><code>${broadcast.id}</code></dd>
        <dt>From</dt><dd>${broadcast.from ?? '—'}</dd>
        <dt>Subject</dt><dd class="break">${broadcast.subject ?? '—'}</dd>
        <dt>Segment</dt><dd>${broadcast.segment_id ? html`<${Link} href=${`/dashboard/contacts?segment_id=${broadcast.segment_id}`}><${NameOf} kind="segments" id=${broadcast.segment_id} /></${Link}>` : '—'}</dd>
        <dt>Topic</dt><dd>${broadcast.topic_id ? html`<${NameOf} kind="topics" id=${broadcast.topic_id} />` : 'none'}</dd>
        <dt>Tracking</dt><dd>opens ${broadcast.tracking.opens ? 'on' : 'off'}, clicks ${broadcast.tracking.clicks ? 'on' : 'off'}</dd>
        <dt>Created</dt><dd>${formatTime(broadcast.created_at)}</dd>
        ${
          broadcast.scheduled_at
            ? html`<dt>Scheduled</dt>
                <dd>${formatTime(broadcast.scheduled_at)}</dd>`
            : null
        }
        ${
          broadcast.started_at
            ? html`<dt>Started</dt>
                <dd>${formatTime(broadcast.started_at)}</dd>`
            : null
        }
        ${
          broadcast.sent_at
            ? html`<dt>Sent</dt>
                <dd>${formatTime(broadcast.sent_at)}</dd>`
            : null
        }
      </dl>
    </section>
    ${broadcast.status === 'draft' || broadcast.status === 'scheduled' ? html`<${PreviewAndTest} broadcast=${broadcast} />` : null}
    ${
      broadcast.status === 'draft'
        ? broadcast.html
          ? html`<section class="card">
              <h2>Html as written</h2>
              <${HtmlPreview} html=${broadcast.html} title="The broadcast's html" />
            </section>`
          : null
        : html`<${Results} broadcast=${broadcast} search=${search} />`
    }`;
}

/** What can be done with the broadcast in its state: send, schedule, delete (a draft); cancel; duplicate. */
function Actions({ broadcast, onDone, onFailed }) {
  const [at, setAt] = useState(() => localInputValue(new Date(Date.now() + 3_600_000)));
  const run = async (work, text) => {
    try {
      await work();
      onDone(text);
    } catch (failure) {
      onFailed(failure);
    }
  };
  const base = `/broadcasts/${broadcast.id}`;
  const send = async () => {
    if (
      !(await confirmAction(`Send "${broadcast.name}" to its segment now?`, {
        confirmLabel: 'Send now',
        danger: false,
      }))
    )
      return;
    await run(() => api('POST', `${base}/send`, {}), 'Sending: its copies are being made.');
  };
  const schedule = (event) => {
    event.preventDefault();
    const scheduled_at = new Date(at).toISOString();
    return run(
      () => api('POST', `${base}/send`, { scheduled_at }),
      `Scheduled for ${formatTime(scheduled_at)}.`,
    );
  };
  const cancel = async () => {
    if (
      !(await confirmAction(`Cancel "${broadcast.name}"? It will not be sent.`, {
        confirmLabel: 'Cancel broadcast',
      }))
    )
      return;
    await run(() => api('POST', `${base}/cancel`, {}), 'Canceled: it will not be sent.');
  };
  const remove = async () => {
    if (!(await confirmAction(`Delete "${broadcast.name}"?`))) return;
    try {
      await api('DELETE', base);
      navigate('/dashboard/broadcasts');
    } catch (failure) {
      onFailed(failure);
    }
  };
  const duplicate = async () => {
    try {
      const copy = await api('POST', `${base}/duplicate`, {});
      navigate(`/dashboard/broadcasts/${copy.id}`);
    } catch (failure) {
      onFailed(failure);
    }
  };
  const { status } = broadcast;
  return html`<section class="card" aria-label="Actions">
    ${
      status === 'draft'
        ? html`<form class="inline-form" onSubmit=${schedule}>
            <button data-writes type="button" class="button-primary" onClick=${send}>Send now</button>
            <label for="schedule-at">or at</label>
            <input
              id="schedule-at"
              type="datetime-local"
              value=${at}
              onInput=${(event) => setAt(event.currentTarget.value)}
            />
            <button data-writes type="submit">Schedule</button>
          </form>`
        : null
    }
    <div class="actions">
      ${status === 'scheduled' || status === 'draft' ? html`<button data-writes type="button" class="button-danger" onClick=${cancel}>Cancel broadcast</button>` : null}
      ${status === 'draft' || status === 'canceled' ? html`<button data-writes type="button" class="button-danger" onClick=${remove}>Delete</button>` : null}
      <button data-writes type="button" onClick=${duplicate}>Duplicate</button>
    </div>
  </section>`;
}

/** A sent (or sending) broadcast's results: its numbers, the links clicked, the recipients. */
function Results({ broadcast, search }) {
  const links = useAsync(
    () => api('GET', `/broadcasts/${broadcast.id}/clicked-links`),
    [broadcast.id, broadcast.updated_at],
  );
  const { filters, setFilters } = useListFilters(search, `/dashboard/broadcasts/${broadcast.id}`, ['status']);
  return html`<h2>Results</h2>
    <div class="stats" data-testid="broadcast-counts">
      ${COUNTS.map(
        ([key, label]) =>
          html`<div class="stat" data-stat=${key}>
            <span class="stat-label">${label}</span>
            <strong class="stat-value">${broadcast.counts[key]}</strong>
          </div>`,
      )}
    </div>
    <section class="card">
      <h2>Clicked links</h2>
      <${ErrorBanner} error=${links.error} />
      ${
        links.data?.data.length
          ? html`<${Table}
              rows=${links.data.data}
              rowAttributes=${(link) => ({ 'data-link': link.url })}
              columns=${[
                { label: 'Link', class: 'break', cell: (link) => link.url },
                { label: 'Clicks', cell: (link) => link.clicks },
                { label: 'Unique clicks', cell: (link) => link.unique_clicks },
              ]}
            />`
          : links.data
            ? html`<p class="muted">
                No link clicked yet${broadcast.tracking.clicks ? '' : ' (click tracking is off)'}.
              </p>`
            : null
      }
    </section>
    <section class="card">
      <h2>Recipients</h2>
      <div class="inline-form">
        <${FilterSelect}
          id="recipient-status"
          label="What happened"
          name="status"
          filters=${filters}
          setFilters=${setFilters}
          options=${RECIPIENT_FILTERS.map((value) => [value, value])}
        />
      </div>
      <${ListPage}
        search=${search}
        base=${`/dashboard/broadcasts/${broadcast.id}`}
        endpoint=${`/broadcasts/${broadcast.id}/recipients`}
        filters=${['status']}
        label="Pages of recipients"
        load=${(path) =>
          api('GET', path).then((body) => ({
            ...body,
            // The pager's cursor is each copy's email id.
            data: body.data.map((recipient) => ({ ...recipient, id: recipient.email_id })),
          }))}
        empty=${html`<${Empty} title="No recipients yet">Copies appear here as they are made.</${Empty}>`}
      >
        ${({ items }) =>
          html`<${Table}
            rows=${items}
            rowAttributes=${(recipient) => ({ 'data-recipient': recipient.email })}
            columns=${[
              {
                label: 'Address',
                class: 'break',
                cell: (recipient) =>
                  html`<${Link} href=${`/dashboard/emails/${recipient.email_id}`}>${recipient.email}</${Link}>`,
              },
              { label: 'Status', cell: (recipient) => html`<${Chip} status=${recipient.status} />` },
              { label: 'Opens', cell: (recipient) => recipient.opens },
              { label: 'Clicks', cell: (recipient) => recipient.clicks },
              {
                label: 'Unsubscribed',
                cell: (recipient) =>
                  recipient.unsubscribed_at ? formatTime(recipient.unsubscribed_at) : '—',
              },
            ]}
          />`}
      </${ListPage}>
    </section>
    <${Exclusions} broadcast=${broadcast} />`;
}

/** The contacts left out, with why (the first 100). */
function Exclusions({ broadcast }) {
  const excluded = useAsync(
    () =>
      broadcast.counts.excluded
        ? api('GET', `/broadcasts/${broadcast.id}/exclusions?limit=100`)
        : { data: [] },
    [broadcast.id, broadcast.counts.excluded],
  );
  if (!broadcast.counts.excluded) return null;
  return html`<section class="card">
    <h2>Excluded contacts</h2>
    <${ErrorBanner} error=${excluded.error} />
    ${
      excluded.data
        ? html`<${Table}
              rows=${excluded.data.data}
              columns=${[
                {
                  label: 'Contact',
                  class: 'break',
                  cell: (row) =>
                    html`<${Link} href=${`/dashboard/contacts/${row.contact_id}`}>${row.email}</${Link}>`,
                },
                { label: 'Why', cell: (row) => row.reason.replaceAll('_', ' ') },
              ]}
            />
            ${excluded.data.has_more ? html`<p class="muted small">The first 100 of ${broadcast.counts.excluded}.</p>` : null}`
        : html`<${Loading} />`
    }
  </section>`;
}
