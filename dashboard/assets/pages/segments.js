import { html, useState } from '../html.js';
import { api } from '../api.js';
import { ListPage } from '../list.js';
import { AudienceTabs } from './contacts.js';
import {
  confirmAction,
  Empty,
  ErrorBanner,
  Field,
  fieldErrors,
  FormError,
  formatTime,
  Link,
  Notice,
  Table,
} from '../ui.js';

/** A list of the project's segments or topics, a form to add one, a Delete on each row. */
function NamedList({ search, kind, plural, lead, empty, columns, form: Form }) {
  const base = `/dashboard/${plural}`;
  const [version, setVersion] = useState(0);
  const [message, setMessage] = useState(null);
  const remove = async (item) => {
    if (!(await confirmAction(`Delete the ${kind} "${item.name}"? Its contacts stay.`))) return;
    setMessage(null);
    try {
      await api('DELETE', `/${plural}/${item.id}`);
      setMessage({ text: `${item.name} deleted.` });
      setVersion((n) => n + 1);
    } catch (failure) {
      setMessage({ error: failure });
    }
  };
  const title = plural[0].toUpperCase() + plural.slice(1);
  return html`<h1>${title}</h1>
    <${AudienceTabs} current=${base} />
    <p class="lead">${lead}</p>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <${ListPage}
      search=${search}
      base=${base}
      endpoint=${`/${plural}`}
      version=${version}
      label=${`Pages of ${plural}`}
      empty=${html`<${Empty} title=${`No ${plural} yet`}>${empty}</${Empty}>`}
      footer=${() =>
        html`<section class="card">
          <h2>Add a ${kind}</h2>
          <${Form} onAdded=${(name) => (setMessage({ text: `${name} added.` }), setVersion((n) => n + 1))} />
        </section>`}
    >
      ${({ items }) =>
        html`<${Table}
          rows=${items}
          rowAttributes=${(item) => ({ [`data-${kind}`]: item.name })}
          columns=${[
            ...columns,
            { label: 'Created', cell: (item) => formatTime(item.created_at) },
            {
              label: 'Actions',
              hidden: true,
              cell: (item) =>
                html`<button
                  data-writes
                  type="button"
                  class="button-small button-danger"
                  onClick=${() => remove(item)}
                  aria-label=${`Delete ${item.name}`}
                >
                  Delete
                </button>`,
            },
          ]}
        />`}
    </${ListPage}>`;
}

/** A create form's state: its fields, posted to `/v1/<plural>` (empty ones left out). */
function useCreate(plural, initial, onAdded) {
  const [form, setForm] = useState(initial);
  const [error, setError] = useState(null);
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    const body = Object.fromEntries(Object.entries(form).filter(([, value]) => value !== ''));
    try {
      const created = await api('POST', `/${plural}`, body);
      setForm(initial);
      onAdded(created.name);
    } catch (failure) {
      setError(failure);
    }
  };
  const set = (name) => (event) => setForm({ ...form, [name]: event.currentTarget.value });
  return { form, set, submit, error, errors: fieldErrors(error) };
}

const nameField = ({ form, set, errors }) =>
  html`<${Field} label="Name" name="name" errors=${errors}>
    ${(props) => html`<input ...${props} value=${form.name} onInput=${set('name')} />`}
  </${Field}>`;

function SegmentForm({ onAdded }) {
  const create = useCreate('segments', { name: '' }, onAdded);
  return html`<form class="form" onSubmit=${create.submit} novalidate>
    <${FormError} error=${create.error} fields=${['name']} />
    ${nameField(create)}
    <button data-writes type="submit" class="button-primary" disabled=${!create.form.name.trim()}>
      Add segment
    </button>
  </form>`;
}

function TopicForm({ onAdded }) {
  const create = useCreate('topics', { name: '', description: '', default_subscription: 'opt_in' }, onAdded);
  const { form, set, errors } = create;
  return html`<form class="form" onSubmit=${create.submit} novalidate>
    <${FormError} error=${create.error} fields=${['name', 'description', 'default_subscription']} />
    ${nameField(create)}
    <${Field} label="Description (shown on the preference page)" name="description" errors=${errors}>
      ${(props) => html`<input ...${props} value=${form.description} onInput=${set('description')} />`}
    </${Field}>
    <${Field} label="A contact that has not chosen" name="default_subscription" errors=${errors} hint="Fixed once the topic is created.">
      ${(props) =>
        html`<select ...${props} value=${form.default_subscription} onChange=${set('default_subscription')}>
          <option value="opt_in">gets it until they opt out</option>
          <option value="opt_out">does not get it until they opt in</option>
        </select>`}
    </${Field}>
    <button data-writes type="submit" class="button-primary" disabled=${!form.name.trim()}>Add topic</button>
  </form>`;
}

export function SegmentsPage({ search }) {
  return html`<${NamedList}
    search=${search}
    kind="segment"
    plural="segments"
    lead="Named lists of contacts: a broadcast goes to one."
    empty="Add one below, then add contacts to it from their pages, an import or the API."
    form=${SegmentForm}
    columns=${[
      {
        label: 'Name',
        cell: (segment) =>
          html`<${Link} href=${`/dashboard/contacts?segment_id=${segment.id}`}>${segment.name}</${Link}>`,
      },
    ]}
  />`;
}

export function TopicsPage({ search }) {
  return html`<${NamedList}
    search=${search}
    kind="topic"
    plural="topics"
    lead="What contacts subscribe to: each sees them on their preference page."
    empty="Add one below: a broadcast with a topic leaves out the contacts opted out of it."
    form=${TopicForm}
    columns=${[
      {
        label: 'Name',
        cell: (topic) =>
          html`<${Link} href=${`/dashboard/contacts?topic_id=${topic.id}`}>${topic.name}</${Link}>`,
      },
      { label: 'Description', class: 'break', cell: (topic) => topic.description ?? '—' },
      { label: 'Default', cell: (topic) => (topic.default_subscription === 'opt_in' ? 'opt in' : 'opt out') },
    ]}
  />`;
}
