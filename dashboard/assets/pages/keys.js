import { html, useState } from '../html.js';
import { api } from '../api.js';
import {
  confirmAction,
  CopyButton,
  Empty,
  ErrorBanner,
  Field,
  fieldErrors,
  formatTime,
  Loading,
  Notice,
  Table,
  useAsync,
} from '../ui.js';

const PERMISSIONS = [
  ['full_access', 'Full access: everything, keys included'],
  ['sending_access', 'Sending: only sends (API and SMTP)'],
  ['read_only', 'Read only: every read, no change'],
];

// The project's API keys (GET /v1/api-keys is not paginated: a project has a handful). The list never has a
// key's value: the one place it shows is just after creating it, once.
export function KeysPage() {
  const keys = useAsync(() => api('GET', '/api-keys'), []);
  const domains = useAsync(() => api('GET', '/domains?limit=100').catch(() => ({ data: [] })), []);
  const [message, setMessage] = useState(null);
  const [created, setCreated] = useState(null);
  const domainName = (id) => domains.data?.data.find((domain) => domain.id === id)?.name ?? id;

  const revoke = async (key) => {
    if (
      !(await confirmAction(
        `Revoke the key "${key.name ?? key.key_prefix}"? Every request with it is refused from now on; this cannot be undone.`,
        { confirmLabel: 'Revoke' },
      ))
    )
      return;
    setMessage(null);
    try {
      await api('DELETE', `/api-keys/${key.id}`);
      setMessage({ text: `Key "${key.name ?? key.key_prefix}" revoked.` });
      keys.reload();
    } catch (failure) {
      setMessage({ error: failure });
    }
  };

  // The API refuses to revoke the project's last working full_access key (409): no button for it.
  const working = (keys.data?.data ?? []).filter((key) => !key.revoked_at);
  const lastFullAccess = (key) =>
    key.permission === 'full_access' &&
    working.filter((other) => other.permission === 'full_access').length === 1;

  const columns = [
    { label: 'Name', cell: (key) => key.name ?? html`<span class="muted">(no name)</span>` },
    { label: 'Key', cell: (key) => html`<code>${key.key_prefix}…</code>` },
    { label: 'Permission', cell: (key) => key.permission.replace('_', ' ') },
    { label: 'Domain', cell: (key) => (key.domain_id ? domainName(key.domain_id) : 'any') },
    { label: 'Created', cell: (key) => formatTime(key.created_at) },
    {
      label: 'Revoked',
      cell: (key) => (key.revoked_at ? formatTime(key.revoked_at) : html`<span class="muted">—</span>`),
    },
    {
      label: 'Actions',
      hidden: true,
      cell: (key) =>
        key.revoked_at || lastFullAccess(key)
          ? null
          : html`<button
              data-writes
              type="button"
              class="button-small button-danger"
              onClick=${() => revoke(key)}
              aria-label=${`Revoke ${key.name ?? key.key_prefix}`}
            >
              Revoke
            </button>`,
    },
  ];

  return html`<h1>API keys</h1>
    <p class="lead">
      Each key belongs to this project and has a permission. Give each application the least it needs: a
      sending key for an app that only sends, a read-only key for reporting.
    </p>
    ${created ? html`<${CreatedKey} created=${created} onDone=${() => setCreated(null)} />` : null}
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error ?? keys.error} />
    ${
      keys.loading && !keys.data
        ? html`<${Loading} />`
        : keys.data?.data.length
          ? html`<${Table}
              rows=${keys.data.data}
              columns=${columns}
              rowAttributes=${(key) => ({ 'data-key': key.id })}
            />`
          : keys.data
            ? html`<${Empty} title="No keys">Create one below.</${Empty}>`
            : null
    }
    <section class="card">
      <h2>Create a key</h2>
      <${CreateKey}
        domains=${domains.data?.data ?? []}
        onCreated=${(key) => (setMessage(null), setCreated(key), keys.reload())}
      />
    </section>`;
}

/** The new key's value, shown this once. */
function CreatedKey({ created, onDone }) {
  return html`<section class="card created-key" aria-labelledby="created-key-title">
    <h2 id="created-key-title">Key "${created.name}" created</h2>
    <p class="banner banner-info" role="status">
      Copy it now: it will not be shown again. Only its hash is kept, so nobody, you included, can read it
      later.
    </p>
    <p><code class="token" data-token>${created.token}</code></p>
    <p>
      <${CopyButton} text=${created.token} label="Copy the key" />
      <button type="button" class="button-small" onClick=${onDone}>I have stored it</button>
    </p>
  </section>`;
}

function CreateKey({ domains, onCreated }) {
  const [name, setName] = useState('');
  const [permission, setPermission] = useState('sending_access');
  const [domainId, setDomainId] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body = { name: name.trim(), permission };
      if (permission === 'sending_access' && domainId) body.domain_id = domainId;
      const key = await api('POST', '/api-keys', body);
      setName('');
      setDomainId('');
      onCreated(key);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const errors = fieldErrors(error);
  return html`<form class="form" onSubmit=${submit} novalidate>
    ${error && !error.param ? html`<${ErrorBanner} error=${error} />` : null}
    <${Field} label="Name" name="name" errors=${errors} hint="What the key is for: the application or person using it.">
      ${(props) =>
        html`<input
          ...${props}
          value=${name}
          maxlength="100"
          onInput=${(e) => setName(e.currentTarget.value)}
        />`}
    </${Field}>
    <${Field} label="Permission" name="permission" errors=${errors}>
      ${(props) =>
        html`<select ...${props} value=${permission} onChange=${(e) => setPermission(e.currentTarget.value)}>
          ${PERMISSIONS.map(([value, label]) => html`<option value=${value}>${label}</option>`)}
        </select>`}
    </${Field}>
    ${
      permission === 'sending_access'
        ? html`<${Field}
            label="Domain"
            name="domain_id"
            errors=${errors}
            hint="Limit the key to one domain: it may then send only from that domain (or its subdomains)."
          >
            ${(props) =>
              html`<select
                ...${props}
                value=${domainId}
                onChange=${(e) => setDomainId(e.currentTarget.value)}
              >
                <option value="">Any domain</option>
                ${domains.map((domain) => html`<option value=${domain.id}>${domain.name}</option>`)}
              </select>`}
          </${Field}>`
        : null
    }
    <button data-writes type="submit" class="button-primary" disabled=${busy || !name.trim()}>Create key</button>
  </form>`;
}
