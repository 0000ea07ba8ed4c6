import { html, useEffect, useState } from '../html.js';
import { api, download } from '../api.js';
import { FilterSelect, FilterText, ListPage, useListFilters } from '../list.js';
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
  navigate,
  Notice,
  Table,
  useAsync,
} from '../ui.js';

/** Contacts, segments, topics and broadcasts are one section (Audience): these tabs lead between them. */
export function AudienceTabs({ current }) {
  const tabs = [
    ['/dashboard/contacts', 'Contacts'],
    ['/dashboard/segments', 'Segments'],
    ['/dashboard/topics', 'Topics'],
    ['/dashboard/broadcasts', 'Broadcasts'],
    ['/dashboard/automations', 'Automations'],
  ];
  return html`<nav class="actions audience-tabs" aria-label="Audience">
    ${tabs.map(
      ([href, label]) =>
        html`<${Link} href=${href} aria-current=${current === href ? 'page' : undefined}>${label}</${Link}>`,
    )}
  </nav>`;
}

const FILTERS = ['email_prefix', 'unsubscribed', 'segment_id', 'topic_id'];

/** The segments and topics of the project (the first 100 of each), for the filters and forms. */
const useAudience = () =>
  useAsync(() => Promise.all([api('GET', '/segments?limit=100'), api('GET', '/topics?limit=100')]), []);

export function ContactsPage({ search }) {
  const { filters, setFilters, toFirstPage } = useListFilters(search, '/dashboard/contacts', FILTERS);
  const audience = useAudience();
  const [segments, topics] = audience.data ?? [{ data: [] }, { data: [] }];
  const [version, setVersion] = useState(0);
  const [error, setError] = useState(null);
  const exportCsv = async () => {
    setError(null);
    try {
      await download('/contacts/export', 'contacts.csv');
    } catch (failure) {
      setError(failure);
    }
  };
  return html`<h1>Contacts</h1>
    <${AudienceTabs} current="/dashboard/contacts" />
    <div class="toolbar">
      <p class="lead">The people your broadcasts go to, newest first.</p>
      <button type="button" onClick=${exportCsv}>Export CSV</button>
    </div>
    <${ErrorBanner} error=${error ?? audience.error} />
    <form class="filters" onSubmit=${(event) => event.preventDefault()} aria-label="Filters">
      <div class="field">
        <label for="filter-email">Address starts with</label>
        <${FilterText}
          id="filter-email"
          value=${filters.email_prefix}
          onCommit=${(event) => setFilters({ email_prefix: event.currentTarget.value.trim() })}
          placeholder="ada@"
        />
      </div>
      <div class="field">
        <${FilterSelect} id="filter-unsubscribed" label="Unsubscribed" name="unsubscribed" filters=${filters} setFilters=${setFilters} options=${[
          ['true', 'yes'],
          ['false', 'no'],
        ]} />
      </div>
      <div class="field">
        <${FilterSelect} id="filter-segment" label="Segment" name="segment_id" filters=${filters} setFilters=${setFilters} options=${segments.data.map((segment) => [segment.id, segment.name])} />
      </div>
      <div class="field">
        <${FilterSelect} id="filter-topic" label="Subscribed to" name="topic_id" filters=${filters} setFilters=${setFilters} options=${topics.data.map((topic) => [topic.id, topic.name])} />
      </div>
    </form>
    <${ListPage}
      search=${search}
      base="/dashboard/contacts"
      endpoint="/contacts"
      filters=${FILTERS}
      version=${version}
      label="Pages of contacts"
      empty=${html`<${Empty} title="No contacts yet">Add one below, import a CSV, or create them with the API.</${Empty}>`}
      footer=${() =>
        html`<div class="grid-2">
          <section class="card">
            <h2>Add a contact</h2>
            <${AddContact} onAdded=${() => (toFirstPage(), setVersion((n) => n + 1))} />
          </section>
          <section class="card">
            <h2>Import a CSV</h2>
            <${ImportForm} onDone=${() => setVersion((n) => n + 1)} />
          </section>
        </div>`}
    >
      ${({ items }) =>
        html`<${Table}
          rows=${items}
          rowAttributes=${(contact) => ({ 'data-contact': contact.email })}
          columns=${[
            {
              label: 'Address',
              class: 'break',
              cell: (contact) =>
                html`<${Link} href=${`/dashboard/contacts/${contact.id}`}>${contact.email}</${Link}>`,
            },
            {
              label: 'Name',
              cell: (contact) => [contact.first_name, contact.last_name].filter(Boolean).join(' ') || '—',
            },
            { label: 'Unsubscribed', cell: (contact) => (contact.unsubscribed ? 'yes' : 'no') },
            { label: 'Created', cell: (contact) => formatTime(contact.created_at) },
          ]}
        />`}
    </${ListPage}>`;
}

function AddContact({ onAdded }) {
  const [form, setForm] = useState({ email: '', first_name: '', last_name: '' });
  const [error, setError] = useState(null);
  const [done, setDone] = useState(null);
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    setDone(null);
    const body = Object.fromEntries(Object.entries(form).filter(([, value]) => value.trim() !== ''));
    try {
      const contact = await api('POST', '/contacts', body);
      setForm({ email: '', first_name: '', last_name: '' });
      setDone(`${contact.email} added.`);
      onAdded();
    } catch (failure) {
      setError(failure);
    }
  };
  const errors = fieldErrors(error);
  const input = (name, label, type = 'text') =>
    html`<${Field} label=${label} name=${name} errors=${errors}>
      ${(props) => html`<input ...${props} type=${type} value=${form[name]} onInput=${(event) => setForm({ ...form, [name]: event.currentTarget.value })} />`}
    </${Field}>`;
  return html`<form class="form" onSubmit=${submit} novalidate>
    <${FormError} error=${error} fields=${['email', 'first_name', 'last_name']} />
    ${done ? html`<${Notice} kind="ok">${done}</${Notice}>` : null} ${input('email', 'Address', 'email')}
    ${input('first_name', 'First name')} ${input('last_name', 'Last name')}
    <button data-writes type="submit" class="button-primary" disabled=${!form.email.trim()}>
      Add contact
    </button>
  </form>`;
}

/** An import's numbers, in one line (a string: htm would drop the spaces of a wrapped template). */
const tally = (counts) =>
  `${counts.created} created · ${counts.updated} updated · ${counts.skipped} skipped · ${counts.failed} failed`;

/** Uploads a CSV (POST /v1/contacts/imports) and follows the job until it ends, with its numbers and errors. */
function ImportForm({ onDone }) {
  const [file, setFile] = useState(null);
  const [onConflict, setOnConflict] = useState('update');
  const [job, setJob] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const running = job && (job.status === 'queued' || job.status === 'in_progress');
  useEffect(() => {
    if (!running) return undefined;
    const timer = setTimeout(async () => {
      try {
        const next = await api('GET', `/contacts/imports/${job.id}`);
        setJob(next);
        if (next.status === 'completed' || next.status === 'failed') onDone();
      } catch (failure) {
        setError(failure);
      }
    }, 1000);
    return () => clearTimeout(timer);
  }, [job]);
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    setBusy(true);
    const form = new FormData();
    form.set('on_conflict', onConflict);
    form.set('file', file);
    try {
      setJob(await api('POST', '/contacts/imports', form));
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const counts = job?.counts;
  return html`<form class="form" onSubmit=${submit} novalidate>
    <${FormError} error=${error} fields=${['file', 'on_conflict']} />
    <${Field} label="CSV file (a header row: email, first_name, last_name, unsubscribed, property keys)" name="file" errors=${fieldErrors(error)}>
      ${(props) => html`<input ...${props} type="file" accept=".csv,text/csv" onChange=${(event) => setFile(event.currentTarget.files[0] ?? null)} />`}
    </${Field}>
    <${Field} label="An address already there" name="on_conflict" errors=${fieldErrors(error)}>
      ${(props) =>
        html`<select
          ...${props}
          value=${onConflict}
          onChange=${(event) => setOnConflict(event.currentTarget.value)}
        >
          <option value="update">update it</option>
          <option value="skip">skip the row</option>
        </select>`}
    </${Field}>
    <button data-writes type="submit" class="button-primary" disabled=${!file || busy || running}>Import</button>
    ${
      job
        ? html`<div class="import-progress" data-testid="import-progress">
            <p><${Chip} status=${job.status} /> ${counts.read} of ${counts.total} rows read</p>
            <progress max=${Math.max(counts.total, 1)} value=${counts.read} aria-label="Rows read">
              ${counts.read} of ${counts.total}
            </progress>
            <p class="small">${tally(counts)}</p>
            ${job.failure ? html`<p class="field-error">${job.failure}</p>` : null}
            ${
              job.errors.length
                ? html`<details>
                    <summary>Rows not imported</summary>
                    <ul class="small">
                      ${job.errors.map((row) => html`<li>Row ${row.row}: ${row.reason}</li>`)}
                    </ul>
                  </details>`
                : null
            }
          </div>`
        : null
    }
  </form>`;
}

export function ContactPage({ id }) {
  const contact = useAsync(() => api('GET', `/contacts/${encodeURIComponent(id)}`), [id]);
  const [message, setMessage] = useState(null);
  if (contact.error)
    return html`<h1>Contact</h1>
      <${ErrorBanner} error=${contact.error} />`;
  if (!contact.data)
    return html`<h1>Contact</h1>
      <${Loading} />`;
  const person = contact.data;
  const act = async (work, text) => {
    setMessage(null);
    try {
      await work();
      setMessage({ text });
      contact.reload();
    } catch (failure) {
      setMessage({ error: failure });
    }
  };
  const toggle = () =>
    act(
      () => api('PATCH', `/contacts/${person.id}`, { unsubscribed: !person.unsubscribed }),
      person.unsubscribed ? 'Subscribed to broadcasts again.' : 'Unsubscribed from all broadcasts.',
    );
  const remove = async () => {
    if (
      !(await confirmAction(`Delete the contact ${person.email}? Its segments and topic choices go with it.`))
    )
      return;
    try {
      await api('DELETE', `/contacts/${person.id}`);
      navigate('/dashboard/contacts');
    } catch (failure) {
      setMessage({ error: failure });
    }
  };
  const properties = Object.entries(person.properties);
  return html`<p class="crumbs"><${Link} href="/dashboard/contacts">Contacts</${Link}> /</p>
    <h1 class="break">${person.email}</h1>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <section class="card">
      <dl class="facts">
        <dt>Id</dt><dd><code>${person.id}</code></dd>
        <dt>Name</dt><dd>${[person.first_name, person.last_name].filter(Boolean).join(' ') || '—'}</dd>
        <dt>Broadcasts</dt><dd>${person.unsubscribed ? 'unsubscribed from all' : 'subscribed'}</dd>
        ${properties.map(
          ([key, value]) =>
            html`<dt><code>${key}</code></dt>
              <dd>${String(value)}</dd>`,
        )}
        <dt>Created</dt><dd>${formatTime(person.created_at)}</dd>
        <dt>Updated</dt><dd>${formatTime(person.updated_at)}</dd>
      </dl>
      <div class="actions">
        <button data-writes type="button" onClick=${toggle}>${person.unsubscribed ? 'Subscribe again' : 'Unsubscribe from all'}</button>
        <button data-writes type="button" class="button-danger" onClick=${remove}>Delete contact</button>
      </div>
    </section>
    <div class="grid-2">
      <${ContactTopics} contact=${person} onChanged=${(text) => setMessage({ text })} onFailed=${(error) => setMessage({ error })} />
      <${ContactSegments} contact=${person} onFailed=${(error) => setMessage({ error })} />
    </div>
    <${ContactHistory} contact=${person} />`;
}

function ContactTopics({ contact, onChanged, onFailed }) {
  const topics = useAsync(() => api('GET', `/contacts/${contact.id}/topics?limit=100`), [contact.id]);
  const choose = async (topic, subscription) => {
    try {
      await api('PATCH', `/contacts/${contact.id}/topics`, {
        topics: [{ id: topic.topic_id, subscription }],
      });
      onChanged(`${subscription === 'opt_in' ? 'Subscribed to' : 'Unsubscribed from'} ${topic.name}.`);
      topics.reload();
    } catch (failure) {
      onFailed(failure);
    }
  };
  return html`<section class="card">
    <h2>Topics</h2>
    <${ErrorBanner} error=${topics.error} />
    ${
      !topics.data
        ? html`<${Loading} />`
        : topics.data.data.length === 0
          ? html`<p class="muted">The project has no topics. <${Link} href="/dashboard/topics">Add one</${Link}>.</p>`
          : html`<${Table}
              rows=${topics.data.data}
              rowAttributes=${(topic) => ({ 'data-topic': topic.name })}
              columns=${[
                { label: 'Topic', cell: (topic) => topic.name },
                {
                  label: 'Subscription',
                  cell: (topic) =>
                    html`<span class=${`chip chip-${topic.subscription === 'opt_in' ? 'ok' : 'muted'}`}
                        >${topic.subscription === 'opt_in' ? 'subscribed' : 'not subscribed'}</span
                      >${topic.chosen ? '' : ' (the default)'}`,
                },
                {
                  label: 'Actions',
                  hidden: true,
                  cell: (topic) => {
                    const next = topic.subscription === 'opt_in' ? 'opt_out' : 'opt_in';
                    return html`<button
                      data-writes
                      type="button"
                      class="button-small"
                      onClick=${() => choose(topic, next)}
                      aria-label=${`${next === 'opt_in' ? 'Subscribe to' : 'Unsubscribe from'} ${topic.name}`}
                    >
                      ${next === 'opt_in' ? 'Subscribe' : 'Unsubscribe'}
                    </button>`;
                  },
                },
              ]}
            />`
    }
  </section>`;
}

function ContactSegments({ contact, onFailed }) {
  const segments = useAsync(() => api('GET', `/contacts/${contact.id}/segments?limit=100`), [contact.id]);
  const all = useAsync(() => api('GET', '/segments?limit=100'), []);
  const [chosen, setChosen] = useState('');
  const change = async (method, segmentId) => {
    try {
      await api(method, `/contacts/${contact.id}/segments/${segmentId}`);
      setChosen('');
      segments.reload();
    } catch (failure) {
      onFailed(failure);
    }
  };
  const inThem = new Set((segments.data?.data ?? []).map((segment) => segment.id));
  const others = (all.data?.data ?? []).filter((segment) => !inThem.has(segment.id));
  return html`<section class="card">
    <h2>Segments</h2>
    <${ErrorBanner} error=${segments.error ?? all.error} />
    ${
      !segments.data
        ? html`<${Loading} />`
        : segments.data.data.length === 0
          ? html`<p class="muted">In no segment.</p>`
          : html`<${Table}
              rows=${segments.data.data}
              rowAttributes=${(segment) => ({ 'data-segment': segment.name })}
              columns=${[
                {
                  label: 'Segment',
                  cell: (segment) =>
                    html`<${Link} href=${`/dashboard/contacts?segment_id=${segment.id}`}>${segment.name}</${Link}>`,
                },
                {
                  label: 'Actions',
                  hidden: true,
                  cell: (segment) =>
                    html`<button
                      data-writes
                      type="button"
                      class="button-small"
                      onClick=${() => change('DELETE', segment.id)}
                      aria-label=${`Remove from ${segment.name}`}
                    >
                      Remove
                    </button>`,
                },
              ]}
            />`
    }
    ${
      others.length
        ? html`<form
            class="inline-form actions"
            onSubmit=${(event) => (event.preventDefault(), change('POST', chosen))}
          >
            <label for="add-segment">Add to</label>
            <select
              id="add-segment"
              value=${chosen}
              onChange=${(event) => setChosen(event.currentTarget.value)}
            >
              <option value="">a segment…</option>
              ${others.map((segment) => html`<option value=${segment.id}>${segment.name}</option>`)}
            </select>
            <button data-writes type="submit" disabled=${!chosen}>Add</button>
          </form>`
        : null
    }
  </section>`;
}

/**
 * The contact's activity (GET /v1/contacts/{id}/activity): the email sent to its address, newest first, each
 * with its status there and what happened to it (delivered, opened, clicked, …).
 */
function ContactHistory({ contact }) {
  const activity = useAsync(() => api('GET', `/contacts/${contact.id}/activity?limit=20`), [contact.id]);
  return html`<section class="card">
    <h2>Email to this address</h2>
    <${ErrorBanner} error=${activity.error} />
    ${
      !activity.data
        ? html`<${Loading} />`
        : activity.data.data.length === 0
          ? html`<p class="muted">Nothing sent to ${contact.email} yet.</p>`
          : html`<${Table}
                rows=${activity.data.data}
                columns=${[
                  {
                    label: 'Subject',
                    class: 'break',
                    cell: (email) =>
                      html`<${Link} href=${`/dashboard/emails/${email.id}`}>${email.subject}</${Link}>`,
                  },
                  { label: 'Status', cell: (email) => html`<${Chip} status=${email.status} />` },
                  {
                    label: 'What happened',
                    cell: (email) =>
                      email.events.length === 0
                        ? html`<span class="muted">nothing yet</span>`
                        : email.events.map((event) => event.type.replace(/^email\./, '')).join(', '),
                  },
                  { label: 'Created', cell: (email) => formatTime(email.created_at) },
                ]}
              />
              ${activity.data.has_more ? html`<p class="small"><${Link} href=${`/dashboard/emails?recipient=${encodeURIComponent(contact.email)}`}>All email to this address</${Link}></p>` : null}`
    }
  </section>`;
}
