import { html, useState } from '../html.js';
import { api } from '../api.js';
import { FilterSelect, ListPage, useListFilters } from '../list.js';
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

const REASONS = ['hard_bounce', 'complaint', 'unsubscribe', 'manual'];

export function SuppressionsPage({ search }) {
  const { filters, setFilters, toFirstPage } = useListFilters(search, '/dashboard/suppressions', ['reason']);
  const [version, setVersion] = useState(0);
  const [message, setMessage] = useState(null);
  const remove = async (entry) => {
    if (
      !(await confirmAction(
        `Remove ${entry.address} from the suppression list? Email to it will be sent again.`,
        { confirmLabel: 'Remove' },
      ))
    )
      return;
    setMessage(null);
    try {
      await api('DELETE', `/suppressions/${encodeURIComponent(entry.address)}`);
      setMessage({ text: `${entry.address} removed.` });
      setVersion((n) => n + 1);
    } catch (failure) {
      setMessage({ error: failure });
    }
  };
  return html`<h1>Suppressions</h1>
    <p class="lead">
      Addresses never sent to: hard bounces and complaints land here by themselves; add others by hand.
    </p>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <div class="inline-form">
      <${FilterSelect}
        id="reason"
        label="Reason"
        name="reason"
        filters=${filters}
        setFilters=${setFilters}
        options=${REASONS.map((value) => [value, value.replace('_', ' ')])}
      />
    </div>
    <${ListPage}
      search=${search}
      base="/dashboard/suppressions"
      endpoint="/suppressions"
      filters=${['reason']}
      version=${version}
      label="Pages of suppressions"
      empty=${({
        reason,
      }) => html`<${Empty} title=${reason ? `No ${reason.replace('_', ' ')} suppressions` : 'No suppressed addresses'}>
        Nothing is blocked. Addresses that hard-bounce or complain will appear here; add one below to stop sending to it.
      </${Empty}>`}
      footer=${() =>
        html`<section class="card">
          <h2>Add addresses</h2>
          <${AddForm} onAdded=${() => (toFirstPage(), setVersion((n) => n + 1))} />
        </section>`}
    >
      ${({ items }) =>
        html`<${Table}
          rows=${items}
          columns=${suppressionColumns(remove)}
          rowAttributes=${(entry) => ({ 'data-address': entry.address })}
        />`}
    </${ListPage}>`;
}

/** The list's columns; `remove(entry)` is its row's Remove button. */
const suppressionColumns = (remove) => [
  { label: 'Address', cell: (entry) => entry.address },
  { label: 'Reason', cell: (entry) => entry.reason.replace('_', ' ') },
  {
    label: 'Detail',
    class: 'small',
    cell: (entry) =>
      entry.detail ??
      (entry.email_id
        ? html`<${Link} href=${`/dashboard/emails/${entry.email_id}`}>${entry.email_id}</${Link}>`
        : '—'),
  },
  { label: 'Added', cell: (entry) => formatTime(entry.created_at) },
  {
    label: 'Actions',
    hidden: true,
    cell: (entry) =>
      html`<button
        data-writes
        type="button"
        class="button-small button-danger"
        onClick=${() => remove(entry)}
        aria-label=${`Remove ${entry.address}`}
      >
        Remove
      </button>`,
  },
];

function AddForm({ onAdded }) {
  const [text, setText] = useState('');
  const [error, setError] = useState(null);
  const [done, setDone] = useState(null);
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    setDone(null);
    const addresses = text.split(/[\s,;]+/).filter(Boolean);
    try {
      await api('POST', '/suppressions', { addresses });
      setText('');
      setDone(`${addresses.length} address${addresses.length === 1 ? '' : 'es'} suppressed.`);
      onAdded();
    } catch (failure) {
      setError(failure);
    }
  };
  // `addresses[3]` names one address; show it next to the field with the address it is about.
  const errors = fieldErrors(error);
  if (error?.param?.startsWith('addresses[')) {
    const index = Number(error.param.slice('addresses['.length, -1));
    const bad = text.split(/[\s,;]+/).filter(Boolean)[index];
    errors.addresses = bad ? `${bad}: ${error.message}` : error.message;
  }
  return html`<form class="form" onSubmit=${submit} novalidate>
    <${FormError} error=${error} fields=${['reason', 'addresses']} />
    ${done ? html`<${Notice} kind="ok">${done}</${Notice}>` : null}
    <${Field} label="Addresses (one per line, or separated by commas)" name="addresses" errors=${errors}>
      ${(props) => html`<textarea ...${props} rows="3" value=${text} onInput=${(e) => setText(e.currentTarget.value)} placeholder="ada@example.org"></textarea>`}
    </${Field}>
    <button data-writes type="submit" class="button-primary" disabled=${!text.trim()}>Suppress</button>
  </form>`;
}
