import { html, useState } from '../html.js';
import { api, download } from '../api.js';
import { FilterSelect, ListPage, useListFilters } from '../list.js';
import { InertHtml } from '../preview.js';
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
  Notice,
  Table,
  useAsync,
} from '../ui.js';

// Received email (what the project's inbound routes took in) and the routes themselves. Everything in a
// received email is written by whoever sent it: it is rendered as text, and its html only in InertHtml.

/** `Name <address>`, or the address alone. */
const address = (entry) => (entry ? (entry.name ? `${entry.name} <${entry.address}>` : entry.address) : '—');
const addresses = (list) => (list?.length ? list.map(address).join(', ') : '—');

const formatSize = (bytes) =>
  bytes < 1024
    ? `${bytes} B`
    : bytes < 1024 * 1024
      ? `${(bytes / 1024).toFixed(1)} KB`
      : `${(bytes / 1048576).toFixed(1)} MB`;

/** The routes of the project, by id: the list shows a route's match, the filter offers them. */
const useRoutes = () => useAsync(() => api('GET', '/inbound-routes?limit=100'), []);

/** What sets a received email apart in the list: its attachments, unreadable, flagged as spam. */
function Markers({ email }) {
  const count = email.attachment_count;
  return html`<span class="markers">
    ${count ? html`<span class="chip chip-muted">${count} attachment${count === 1 ? '' : 's'}</span>` : null}
    ${email.status === 'unreadable' ? html`<${Chip} status="unreadable" />` : null}
    ${email.spam?.flagged ? html`<span class="chip chip-bad">spam</span>` : null}
  </span>`;
}

const receivedColumns = (routes) => [
  {
    label: 'From',
    cell: (email) =>
      html`<span class="break"
        >${email.from ? address(email.from) : email.mail_from || '<> (null sender)'}</span
      >`,
  },
  { label: 'Recipient', cell: (email) => html`<span class="break">${email.recipient}</span>` },
  {
    label: 'Subject',
    cell: (email) =>
      html`<${Link} href=${`/dashboard/received/${email.id}`}>${email.subject || '(no subject)'}</${Link}>`,
  },
  {
    label: 'Route',
    class: 'small',
    cell: (email) => routes.get(email.route_id)?.match ?? email.route_id ?? '—',
  },
  { label: 'Received', cell: (email) => formatTime(email.received_at) },
  { label: 'Marks', cell: (email) => html`<${Markers} email=${email} />` },
];

export function ReceivedPage({ search }) {
  const { filters, setFilters } = useListFilters(search, '/dashboard/received', ['route_id']);
  const routes = useRoutes();
  const byId = new Map((routes.data?.data ?? []).map((route) => [route.id, route]));
  return html`<h1>Received</h1>
    <div class="toolbar">
      <p class="lead">Email your inbound routes took in, newest first: one per recipient.</p>
      <${Link} href="/dashboard/routes">Inbound routes</${Link}>
    </div>
    <div class="inline-form">
      <${FilterSelect}
        id="filter-route"
        label="Route"
        name="route_id"
        filters=${filters}
        setFilters=${setFilters}
        options=${(routes.data?.data ?? []).map((route) => [route.id, `${route.match} (${route.action})`])}
      />
    </div>
    <${ListPage}
      search=${search}
      base="/dashboard/received"
      endpoint="/received-emails"
      filters=${['route_id']}
      label="Pages of received email"
      empty=${({ route_id: route }) =>
        route
          ? html`<${Empty} title="Nothing received on this route">Pick another route, or any.</${Empty}>`
          : html`<${Empty} title="No email received yet">
              Add a domain with receiving on, publish its MX, then an <${Link} href="/dashboard/routes">inbound route</${Link}> for the addresses to take.
            </${Empty}>`}
    >
      ${({ items }) =>
        html`<${Table}
          rows=${items}
          columns=${receivedColumns(byId)}
          rowAttributes=${(email) => ({ 'data-id': email.id })}
        />`}
    </${ListPage}>`;
}

// ---------------------------------------------------------------------------------------------------------
// One received email.

const RESULT_KINDS = { pass: 'ok', fail: 'bad', softfail: 'warn', temperror: 'warn', permerror: 'warn' };
/** An authentication result as a chip: pass green, fail red, errors amber, the rest (none, neutral) grey. */
const Result = ({ result }) =>
  html`<span class=${`chip chip-${RESULT_KINDS[result] ?? 'muted'}`}>${result}</span>`;

/** A result and what it was about, read as one line ("pass for acme.example"). */
const Verdict = ({ result, detail }) =>
  html`<div>
    <${Result} result=${result} />${detail ? html`<span class="small">${` ${detail}`}</span>` : null}
  </div>`;

function Authentication({ authentication }) {
  if (!authentication)
    return html`<p class="muted">Not checked: the message could not be authenticated when it was read.</p>`;
  const { spf, dkim, dmarc, arc } = authentication;
  const dmarcDetail = dmarc
    ? [dmarc.domain ? `for ${dmarc.domain}` : '', dmarc.policy ? `policy ${dmarc.policy}` : '']
        .filter(Boolean)
        .join(', ')
    : '';
  return html`<dl class="facts" data-testid="authentication">
      <dt>SPF</dt>
      <dd><${Verdict} result=${spf.result} detail=${spf.domain ? `for ${spf.domain}` : ''} /></dd>
      <dt>DKIM</dt>
      <dd>
        ${
          dkim.length === 0
            ? html`<${Verdict} result="none" detail="not signed" />`
            : dkim.map(
                (signature) =>
                  html`<${Verdict}
                    result=${signature.result}
                    detail=${`${signature.domain}${signature.selector ? ` (selector ${signature.selector})` : ''}, ${signature.aligned ? 'aligned' : 'not aligned'} with From`}
                  />`,
              )
        }
      </dd>
      <dt>DMARC</dt>
      <dd><${Verdict} result=${dmarc?.result ?? 'none'} detail=${dmarcDetail} /></dd>
      <dt>ARC</dt>
      <dd><${Verdict} result=${arc?.result ?? 'none'} /></dd>
    </dl>
    <details>
      <summary>Authentication-Results</summary>
      <pre class="code">${authentication.header}</pre>
    </details>`;
}

function Spam({ spam }) {
  if (!spam) return html`<p class="muted">Not scored (spamd is not configured, or was not reached).</p>`;
  return html`<p data-testid="spam">
    <span class=${`chip chip-${spam.flagged ? 'bad' : 'ok'}`}
      >${spam.flagged ? 'flagged as spam' : 'not spam'}</span
    >
    <span class="small"> score ${spam.score} (threshold ${spam.threshold})</span>
  </p>`;
}

export function ReceivedEmailPage({ id }) {
  const email = useAsync(() => api('GET', `/received-emails/${encodeURIComponent(id)}`), [id]);
  const routes = useRoutes();
  const [failure, setFailure] = useState(null);
  const crumbs = html`<p class="crumbs"><${Link} href="/dashboard/received">Received</${Link}> /</p>`;
  if (email.error)
    return html`${crumbs}
      <h1>Received email</h1>
      <${ErrorBanner} error=${email.error} />`;
  if (!email.data)
    return html`${crumbs}
      <h1>Received email</h1>
      <${Loading} />`;
  const message = email.data;
  const route = (routes.data?.data ?? []).find((entry) => entry.id === message.route_id);
  const save = (path, filename) => {
    setFailure(null);
    download(path, filename).catch(setFailure);
  };
  const base = `/received-emails/${encodeURIComponent(message.id)}`;
  return html`${crumbs}
    <h1 class="break">${message.subject || '(no subject)'}</h1>
    <div class="toolbar">
      <span>
        <${Chip} status=${message.status} />
        ${message.spam?.flagged ? html` <span class="chip chip-bad">spam</span>` : null}
      </span>
      <button type="button" onClick=${() => save(`${base}/raw`, `${message.id}.eml`)}>Download .eml</button>
    </div>
    <${ErrorBanner} error=${failure} />
    ${
      message.status === 'unreadable'
        ? html`<${Notice} kind="warn">
          Its MIME could not be read${message.unreadable_reason ? `: ${message.unreadable_reason}` : ''}. The
          message is kept whole: download the .eml to see it.
        </${Notice}>`
        : null
    }
    <section class="card">
      <dl class="facts">
        <dt>From</dt>
        <dd class="break">${address(message.from)}</dd>
        <dt>To</dt>
        <dd class="break">${addresses(message.to)}</dd>
        ${
          message.cc.length
            ? html`<dt>Cc</dt>
                <dd class="break">${addresses(message.cc)}</dd>`
            : null
        }
        ${
          message.reply_to.length
            ? html`<dt>Reply-To</dt>
                <dd class="break">${addresses(message.reply_to)}</dd>`
            : null
        }
        <dt>Date</dt>
        <dd>${formatTime(message.date)}</dd>
        <dt>Subject</dt>
        <dd class="break">${message.subject ?? '—'}</dd>
        <dt>Recipient</dt>
        <dd class="break">
          ${message.recipient}${message.mailbox_hash ? html` <span class="muted small">(tag ${message.mailbox_hash})</span>` : null}
        </dd>
        <dt>Envelope sender</dt>
        <dd class="break">${message.mail_from || '<> (null sender)'}</dd>
        <dt>Route</dt>
        <dd>${route ? `${route.match} (${route.action})` : (message.route_id ?? '—')}</dd>
        <dt>Received</dt>
        <dd>
          ${formatTime(message.received_at)} <span class="muted small">· ${formatSize(message.size)}</span>
        </dd>
        ${
          message.message_id
            ? html`<dt>Message-ID</dt>
                <dd><code class="break">${message.message_id}</code></dd>`
            : null
        }
        ${
          message.in_reply_to_email_id
            ? html`<dt>In reply to</dt>
              <dd data-testid="thread">
                <${Link} href=${`/dashboard/emails/${message.in_reply_to_email_id}`}>${message.in_reply_to_email_id}</${Link}>
                ${message.in_reply_to_recipient ? html`<span class="muted small"> sent to ${message.in_reply_to_recipient}</span>` : null}
              </dd>`
            : message.in_reply_to
              ? html`<dt>In reply to</dt>
                  <dd>
                    <code class="break">${message.in_reply_to}</code>
                    <span class="muted small">(not an email of this project)</span>
                  </dd>`
              : null
        }
      </dl>
    </section>
    <div class="grid-2">
      <section class="card">
        <h2>Authentication</h2>
        <${Authentication} authentication=${message.authentication} />
      </section>
      <section class="card">
        <h2>Spam</h2>
        <${Spam} spam=${message.spam} />
      </section>
    </div>
    ${
      message.attachments.length
        ? html`<section class="card">
            <h2>Attachments</h2>
            <ul class="attachments">
              ${message.attachments.map((attachment) => {
                const name = attachment.filename ?? `attachment-${attachment.index}`;
                return html`<li>
                  <button
                    type="button"
                    class="button-small"
                    onClick=${() => save(`${base}/attachments/${attachment.index}`, name)}
                  >
                    Download <span class="break">${name}</span>
                  </button>
                  <span class="muted small">
                    ${attachment.content_type} ·
                    ${formatSize(attachment.size)}${attachment.disposition === 'inline' ? ' · inline' : ''}
                  </span>
                </li>`;
              })}
            </ul>
          </section>`
        : null
    }
    <h2>HTML</h2>
    ${
      message.html
        ? html`<p class="muted small">
              Shown inert: its scripts never run, nothing is loaded from the network (no remote images, no
              tracking) and its own styles are not applied.
            </p>
            <${InertHtml} html=${message.html} title="Received email html" />`
        : html`<p class="muted">This email has no html part.</p>`
    }
    <h2>Text</h2>
    ${
      message.text !== null
        ? html`<pre class="code" data-testid="received-text">${message.text}</pre>`
        : html`<p class="muted">This email has no text.</p>`
    }
    ${
      message.reply_text && message.reply_text !== message.text
        ? html`<details>
            <summary>The reply alone (without the quoted history)</summary>
            <pre class="code">${message.reply_text}</pre>
          </details>`
        : null
    }
    ${
      message.headers.length
        ? html`<details>
            <summary>All headers (${message.headers.length})</summary>
            <pre class="code">
${message.headers.map((header) => `${header.name}: ${header.value}`).join('\n')}</pre>
          </details>`
        : null
    }`;
}

// ---------------------------------------------------------------------------------------------------------
// Inbound routes.

const ACTIONS = [
  ['webhook', 'webhook: store it and send email.received'],
  ['store', 'store: store it, send nothing'],
  ['reject', 'reject: refuse it with a 550'],
];

export function RoutesPage({ search }) {
  const [version, setVersion] = useState(0);
  const [editing, setEditing] = useState(null);
  const [message, setMessage] = useState(null);
  const remove = async (route) => {
    if (!(await confirmAction(`Delete the route for ${route.match}? Mail to it is then refused.`))) return;
    setMessage(null);
    try {
      await api('DELETE', `/inbound-routes/${encodeURIComponent(route.id)}`);
      setMessage({ text: `The route for ${route.match} was deleted.` });
      if (editing?.id === route.id) setEditing(null);
      setVersion((n) => n + 1);
    } catch (failure) {
      setMessage({ error: failure });
    }
  };
  const saved = (route, created) => {
    setEditing(null);
    setMessage({ text: `The route for ${route.match} was ${created ? 'created' : 'saved'}.` });
    setVersion((n) => n + 1);
  };
  return html`<p class="crumbs"><${Link} href="/dashboard/received">Received</${Link}> /</p>
    <h1>Inbound routes</h1>
    <p class="lead">
      Which recipients of your receiving domains are taken in, and what happens to their mail. The lowest
      priority that matches decides.
    </p>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <${ListPage}
      search=${search}
      base="/dashboard/routes"
      endpoint="/inbound-routes"
      version=${version}
      label="Pages of routes"
      empty=${html`<${Empty} title="No inbound routes">
        Mail to your domains is refused until a route takes it. Add one below (the domain must have receiving on).
      </${Empty}>`}
      footer=${() =>
        html`<section class="card">
          <h2>${editing ? `Edit the route for ${editing.match}` : 'Add a route'}</h2>
          <${RouteForm}
            key=${editing?.id ?? 'new'}
            route=${editing}
            onSaved=${saved}
            onCancel=${editing ? () => setEditing(null) : null}
          />
        </section>`}
    >
      ${({ items }) =>
        html`<${Table}
          rows=${items}
          columns=${routeColumns(setEditing, remove)}
          rowAttributes=${(route) => ({ 'data-id': route.id })}
        />`}
    </${ListPage}>`;
}

const routeColumns = (edit, remove) => [
  { label: 'Match', cell: (route) => html`<code class="break">${route.match}</code>` },
  { label: 'Action', cell: (route) => route.action },
  { label: 'Priority', cell: (route) => String(route.priority) },
  { label: 'Enabled', cell: (route) => html`<${Chip} status=${route.enabled ? 'enabled' : 'disabled'} />` },
  { label: 'Reject message', class: 'small', cell: (route) => route.reject_message ?? '—' },
  {
    label: 'Actions',
    hidden: true,
    cell: (route) =>
      html`<button
          data-writes
          type="button"
          class="button-small"
          onClick=${() => edit(route)}
          aria-label=${`Edit the route for ${route.match}`}
        >
          Edit
        </button>
        <button
          data-writes
          type="button"
          class="button-small button-danger"
          onClick=${() => remove(route)}
          aria-label=${`Delete the route for ${route.match}`}
        >
          Delete
        </button>`,
  },
];

function RouteForm({ route, onSaved, onCancel }) {
  const [form, setForm] = useState(() => ({
    match: route?.match ?? '',
    action: route?.action ?? 'webhook',
    priority: String(route?.priority ?? 100),
    reject_message: route?.reject_message ?? '',
    enabled: route?.enabled ?? true,
  }));
  const [error, setError] = useState(null);
  const errors = fieldErrors(error);
  const set = (name) => (event) => setForm({ ...form, [name]: event.currentTarget.value });
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    const body = {
      match: form.match.trim(),
      action: form.action,
      priority: form.priority.trim() === '' ? 100 : Number(form.priority),
      reject_message:
        form.action === 'reject' && form.reject_message.trim() ? form.reject_message.trim() : null,
      enabled: form.enabled,
    };
    try {
      const answer = route
        ? await api('PATCH', `/inbound-routes/${encodeURIComponent(route.id)}`, body)
        : await api('POST', '/inbound-routes', body);
      onSaved(answer, !route);
    } catch (failure) {
      setError(failure);
    }
  };
  return html`<form class="form" onSubmit=${submit} novalidate>
    <${FormError} error=${error} fields=${['match', 'action', 'priority', 'reject_message']} />
    <${Field} label="Match" name="match" errors=${errors} hint="support@acme.example, *@acme.example or reply-*@acme.example">
      ${(props) => html`<input ...${props} value=${form.match} onInput=${set('match')} autocomplete="off" spellcheck="false" />`}
    </${Field}>
    <${Field} label="Action" name="action" errors=${errors}>
      ${(props) =>
        html`<select ...${props} value=${form.action} onChange=${set('action')}>
          ${ACTIONS.map(([value, text]) => html`<option value=${value}>${text}</option>`)}
        </select>`}
    </${Field}>
    <${Field} label="Priority" name="priority" errors=${errors} hint="Lowest first; 0 to 1000000.">
      ${(props) => html`<input ...${props} type="number" min="0" max="1000000" value=${form.priority} onInput=${set('priority')} />`}
    </${Field}>
    ${
      form.action === 'reject'
        ? html`<${Field} label="Reject message" name="reject_message" errors=${errors} hint="The text of the 550 (printable ASCII).">
          ${(props) => html`<input ...${props} value=${form.reject_message} onInput=${set('reject_message')} />`}
        </${Field}>`
        : null
    }
    <div class="field">
      <label class="check">
        <input
          type="checkbox"
          checked=${form.enabled}
          onChange=${(event) => setForm({ ...form, enabled: event.currentTarget.checked })}
        />
        Enabled
      </label>
    </div>
    <div class="actions">
      <button data-writes type="submit" class="button-primary">${route ? 'Save' : 'Add the route'}</button>
      ${onCancel ? html`<button type="button" onClick=${onCancel}>Cancel</button>` : null}
    </div>
  </form>`;
}
