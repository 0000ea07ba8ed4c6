import { html, useEffect, useState } from '../html.js';
import { api, ApiError } from '../api.js';
import { FilterText, ListPage, useListFilters } from '../list.js';
import { HtmlPreview } from '../preview.js';
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

const STATUSES = [
  'scheduled',
  'queued',
  'delayed',
  'sent',
  'delivered',
  'bounced',
  'failed',
  'complained',
  'cancelled',
  'suppressed',
  'mixed',
];

/** The API's filters for the form's values: whole UTC days for the dates, `name:value` for a tag. */
function apiFilters(filters) {
  return {
    status: filters.status || undefined,
    recipient: filters.recipient || undefined,
    tag: filters.tag || undefined,
    since: filters.from ? `${filters.from}T00:00:00.000Z` : undefined,
    until: filters.to
      ? new Date(Date.parse(`${filters.to}T00:00:00.000Z`) + 86_400_000).toISOString()
      : undefined,
  };
}

const FILTERS = ['status', 'recipient', 'tag', 'from', 'to'];

export function EmailsPage({ search }) {
  const { filters, setFilters } = useListFilters(search, '/dashboard/emails', FILTERS);
  const setFilter = (name) => (event) => setFilters({ [name]: event.currentTarget.value });
  const [sending, setSending] = useState(false);

  return html`<h1>Emails</h1>
    <div class="toolbar">
      <p class="lead">Everything sent with this project's keys, newest first.</p>
      <button data-writes
        type="button"
        class="button-primary"
        aria-expanded=${sending}
        onClick=${() => setSending(!sending)}
      >
        Send an email
      </button>
    </div>
    ${
      sending
        ? html`<section class="card">
            <h2>Send an email</h2>
            <${SendForm} />
          </section>`
        : null
    }
    <form class="filters" onSubmit=${(event) => event.preventDefault()} aria-label="Filters">
      <div class="field">
        <label for="filter-status">Status</label>
        <select id="filter-status" value=${filters.status} onChange=${setFilter('status')}>
          <option value="">any</option>
          ${STATUSES.map((status) => html`<option value=${status}>${status}</option>`)}
        </select>
      </div>
      <div class="field">
        <label for="filter-recipient">Recipient</label>
        <${FilterText}
          id="filter-recipient"
          value=${filters.recipient}
          onCommit=${setFilter('recipient')}
          placeholder="ada@example.org"
        />
      </div>
      <div class="field">
        <label for="filter-tag">Tag</label>
        <${FilterText}
          id="filter-tag"
          value=${filters.tag}
          onCommit=${setFilter('tag')}
          placeholder="kind:receipt"
        />
      </div>
      <div class="field">
        <label for="filter-from">From day</label>
        <input id="filter-from" type="date" value=${filters.from} onChange=${setFilter('from')} />
      </div>
      <div class="field">
        <label for="filter-to">To day</label>
        <input id="filter-to" type="date" value=${filters.to} onChange=${setFilter('to')} />
      </div>
    </form>
    <${ListPage}
      search=${search}
      base="/dashboard/emails"
      endpoint="/emails"
      filters=${FILTERS}
      toApi=${apiFilters}
      limit=${100}
      label="Pages of emails"
      empty=${(applied) =>
        Object.values(applied).some(Boolean)
          ? html`<${Empty} title="No email matches these filters">Change or clear the filters.</${Empty}>`
          : html`<${Empty} title="No emails yet">Send one with <code>POST /v1/emails</code> or the “Send an email” button; without an SMTP relay it is captured, not sent.</${Empty}>`}
    >
      ${({ items }) => html`<${Table} rows=${items} columns=${EMAIL_COLUMNS} />`}
    </${ListPage}>`;
}

const EMAIL_COLUMNS = [
  {
    label: 'To',
    cell: (email) => html`<${Link} href=${`/dashboard/emails/${email.id}`}>${email.to.join(', ')}</${Link}>`,
  },
  { label: 'Subject', cell: (email) => email.subject },
  { label: 'Status', cell: (email) => html`<${Chip} status=${email.status} />` },
  {
    label: 'Tags',
    cell: (email) =>
      Object.entries(email.tags).map(([name, value]) => html`<code class="tag">${name}:${value}</code> `),
  },
  { label: 'Created', cell: (email) => formatTime(email.created_at) },
];

function SendForm() {
  const [form, setForm] = useState({ from: '', to: '', subject: '', html: '<p>Hello from Postwire</p>' });
  const [error, setError] = useState(null);
  const errors = fieldErrors(error);
  const set = (name) => (event) => setForm({ ...form, [name]: event.currentTarget.value });
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    try {
      const to = form.to
        .split(',')
        .map((address) => address.trim())
        .filter(Boolean);
      const accepted = await api('POST', '/emails', {
        from: form.from.trim(),
        to,
        subject: form.subject,
        html: form.html,
      });
      navigate(`/dashboard/emails/${accepted.id}`);
    } catch (failure) {
      setError(failure);
    }
  };
  return html`<form class="form" onSubmit=${submit} novalidate>
    <${FormError} error=${error} fields=${['from', 'to', 'subject', 'html']} />
    <${Field} label="From" name="from" errors=${errors}>${(props) => html`<input ...${props} value=${form.from} onInput=${set('from')} placeholder="Acme <hello@acme.example>" />`}</${Field}>
    <${Field} label="To (comma-separated)" name="to" errors=${errors}>${(props) => html`<input ...${props} value=${form.to} onInput=${set('to')} placeholder="ada@example.org" />`}</${Field}>
    <${Field} label="Subject" name="subject" errors=${errors}>${(props) => html`<input ...${props} value=${form.subject} onInput=${set('subject')} />`}</${Field}>
    <${Field} label="HTML" name="html" errors=${errors}>${(props) => html`<textarea ...${props} rows="4" class="mono" value=${form.html} onInput=${set('html')}></textarea>`}</${Field}>
    <button data-writes type="submit" class="button-primary">Send</button>
  </form>`;
}

const ENGAGEMENT = new Set(['email.opened', 'email.clicked']);
/**
 * Whether event `index` of a recipient repeats the reply the event before it showed: a final hop's (capture, a
 * direct delivery) 250 is both `email.sent` and `email.delivered`. A retry's reply, even the same, is shown.
 */
const sameReplyAsBefore = (events, index) =>
  index > 0 &&
  events[index].type === 'email.delivered' &&
  events[index - 1].type === 'email.sent' &&
  events[index - 1].smtp_response === events[index].smtp_response;

/** `1234` → `1.2 KB`: an attachment's size as a person reads it (the exact bytes are in its title). */
const formatBytes = (bytes) =>
  bytes < 1024
    ? `${bytes} B`
    : bytes < 1024 * 1024
      ? `${(bytes / 1024).toFixed(1)} KB`
      : `${(bytes / 1024 / 1024).toFixed(1)} MB`;

/**
 * What a scheduled email's page can do before its time: move it to another time (`PATCH /v1/emails/{id}`) or
 * cancel it (after confirming). Each answers the email as it now is, shown at once.
 */
function ScheduledActions({ message, onChanged }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [when, setWhen] = useState(() => localInputValue(new Date(message.scheduled_at)));
  const reschedule = async (event) => {
    event.preventDefault();
    setError(null);
    const at = new Date(when);
    if (Number.isNaN(at.getTime()))
      return setError({ message: 'Pick a date and time to send it at.', param: 'scheduled_at' });
    setBusy(true);
    try {
      const next = await api('PATCH', `/emails/${encodeURIComponent(message.id)}`, {
        scheduled_at: at.toISOString(),
      });
      onChanged(next, `Rescheduled: it will be sent at ${formatTime(next.scheduled_at)}.`);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const cancel = async () => {
    const due = formatTime(message.scheduled_at);
    if (
      !(await confirmAction(`Cancel this email? It will not be sent at ${due}; this cannot be undone.`, {
        confirmLabel: 'Cancel email',
      }))
    )
      return;
    setBusy(true);
    setError(null);
    try {
      onChanged(
        await api('POST', `/emails/${encodeURIComponent(message.id)}/cancel`),
        'Cancelled: it will not be sent.',
      );
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  return html`<section class="card" aria-labelledby="schedule-title">
    <h2 id="schedule-title">Scheduled for ${formatTime(message.scheduled_at)}</h2>
    <${FormError} error=${error} fields=${['scheduled_at']} />
    <form onSubmit=${reschedule} novalidate>
      <${Field} label="Send at (your local time)" name="scheduled_at" errors=${fieldErrors(error)} hint="Up to 30 days ahead.">
        ${(props) => html`<input ...${props} class="input-when" type="datetime-local" value=${when} onInput=${(e) => setWhen(e.currentTarget.value)} />`}
      </${Field}>
      <div class="actions">
        <button data-writes type="submit" class="button-primary" disabled=${busy}>Reschedule</button>
        <button data-writes type="button" class="button-danger" disabled=${busy} onClick=${cancel}>Cancel email</button>
      </div>
    </form>
  </section>`;
}

/** How the email is signed and whether that passes DMARC for its From domain. */
function Authentication({ authentication }) {
  if (!authentication) return null;
  const { dkim_domain: dkim, return_path_domain: returnPath, dmarc_aligned: aligned } = authentication;
  return html`<dt>DKIM</dt>
    <dd data-testid="dkim">${dkim ? html`signed as <code>${dkim}</code>` : 'not signed'}</dd>
    <dt>DMARC</dt>
    <dd data-testid="dmarc">
      ${
        aligned
          ? html`<span class="chip chip-ok">aligned</span> the DKIM domain is the From's (relaxed): DMARC
              passes on DKIM`
          : html`<span class="chip chip-warn">not aligned</span>
              ${dkim ? " the DKIM domain is not the From's" : ' not signed'}: DMARC cannot pass on DKIM`
      }
    </dd>
    ${
      returnPath
        ? html`<dt>Return path</dt>
            <dd><code>${returnPath}</code></dd>`
        : null
    }`;
}

export function EmailPage({ id }) {
  const email = useAsync(() => api('GET', `/emails/${encodeURIComponent(id)}`), [id]);
  const [tab, setTab] = useState('html');
  // What an action on the page answered: the email as it now is, and what to say about it.
  const [changed, setChanged] = useState(null);
  useEffect(() => setChanged(null), [email.data]);
  if (email.error) {
    return html`<h1>Email</h1><${ErrorBanner} error=${email.error} /><p><${Link} href="/dashboard/emails">Back to emails</${Link}></p>`;
  }
  if (!email.data)
    return html`<h1>Email</h1>
      <${Loading} />`;
  const message = changed?.email ?? email.data;
  const tracking = message.tracking;
  const tabs = [
    ['html', 'HTML'],
    ['text', 'Text'],
    ['raw', 'Raw MIME'],
  ];
  // The tab pattern: one tab in the Tab order, arrow keys (and Home/End) move between them.
  const onTabKey = (event) => {
    const index = tabs.findIndex(([value]) => value === tab);
    const next = {
      ArrowRight: (index + 1) % tabs.length,
      ArrowLeft: (index + tabs.length - 1) % tabs.length,
      Home: 0,
      End: tabs.length - 1,
    }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    setTab(tabs[next][0]);
    document.getElementById(`tab-${tabs[next][0]}`)?.focus();
  };
  return html`<p class="crumbs"><${Link} href="/dashboard/emails">Emails</${Link}> /</p>
    <h1 class="break">${message.subject}</h1>
    <div class="toolbar"><${Chip} status=${message.status} /><button type="button" onClick=${email.reload}>Refresh</button></div>
    ${changed?.text ? html`<${Notice} kind="ok">${changed.text}</${Notice}>` : null}
    ${
      message.status === 'scheduled'
        ? html`<${ScheduledActions}
            message=${message}
            onChanged=${(next, text) => setChanged({ email: next, text })}
          />`
        : null
    }
    <section class="card">
      <dl class="facts">
        <dt>Id</dt><dd><code>${message.id}</code></dd>
        <dt>From</dt><dd>${message.from}</dd>
        <dt>To</dt><dd>${message.to.join(', ')}</dd>
        ${
          message.cc.length
            ? html`<dt>Cc</dt>
                <dd>${message.cc.join(', ')}</dd>`
            : null
        }
        ${
          message.reply_to?.length
            ? html`<dt>Reply-To</dt>
                <dd>${message.reply_to.join(', ')}</dd>`
            : null
        }
        <dt>Message-ID</dt><dd><code class="break">${message.message_id}</code></dd>
        <dt>Sent with</dt><dd>${message.source === 'smtp' ? html`SMTP submission, as <code>${message.smtp_username}</code>` : 'the API'}</dd>
        ${message.template_id ? html`<dt>Template</dt><dd><${Link} href=${`/dashboard/templates/${message.template_id}`}>${message.template_id}</${Link}> v${message.template_version}</dd>` : null}
        ${
          Object.keys(message.tags).length
            ? html`<dt>Tags</dt>
                <dd>
                  ${Object.entries(message.tags).map(([name, value]) => html`<code class="tag">${name}:${value}</code> `)}
                </dd>`
            : null
        }
        <dt>Created</dt><dd>${formatTime(message.created_at)}</dd>
        ${
          message.scheduled_at
            ? html`<dt>Scheduled</dt>
                <dd>${formatTime(message.scheduled_at)}</dd>`
            : null
        }
        <${Authentication} authentication=${message.authentication} />
        ${
          tracking
            ? html`<dt>Tracking</dt>
                <dd data-testid="tracking">
                  ${
                    [
                      tracking.opens && 'opens',
                      tracking.clicks && 'clicks',
                      tracking.unsubscribe && 'one-click unsubscribe',
                    ]
                      .filter(Boolean)
                      .join(', ') || 'off'
                  }
                </dd>`
            : null
        }
      </dl>
    </section>
    ${
      message.attachments?.length
        ? html`<section class="card" aria-labelledby="attachments-title">
            <h2 id="attachments-title">Attachments (${message.attachments.length})</h2>
            <ul class="attachments" data-testid="attachments">
              ${message.attachments.map(
                (attachment) =>
                  html`<li>
                    <strong class="break">${attachment.filename}</strong>
                    <code class="small">${attachment.content_type}</code>
                    <span class="muted small" title=${`${attachment.size} bytes`}
                      >${formatBytes(attachment.size)}</span
                    >
                    ${attachment.content_id ? html`<span class="muted small">inline, cid:${attachment.content_id}</span>` : null}
                  </li>`,
              )}
            </ul>
          </section>`
        : null
    }
    <h2>Recipients</h2>
    <div class="recipients">
      ${message.recipients.map((recipient) => {
        const events = message.events.filter((event) => event.recipient === recipient.address);
        // Opens and clicks: the recipient's own engagement fields when the API has them (open_count,
        // first_opened_at, clicks[]), else counted from its email.opened / email.clicked events.
        const opens =
          typeof recipient.open_count === 'number'
            ? recipient.open_count
            : events.filter((event) => event.type === 'email.opened').length;
        const clicks = Array.isArray(recipient.clicks) ? recipient.clicks : null;
        const clickCount = clicks
          ? clicks.length
          : events.filter((event) => event.type === 'email.clicked').length;
        // Counts only for what was tracked: an untracked email's 0 would read as "nobody opened it".
        const engagement = !tracking
          ? `opens ${opens} · clicks ${clickCount}`
          : !tracking.opens && !tracking.clicks
            ? 'tracking off'
            : [tracking.opens && `opens ${opens}`, tracking.clicks && `clicks ${clickCount}`]
                .filter(Boolean)
                .join(' · ');
        // The transport's reply is shown once: in the timeline when an event carries it, else here.
        const replyInTimeline = events.some((event) => event.smtp_response === recipient.last_response);
        // A suppressed recipient has no reply: why it was not sent to is its email.suppressed event's reason.
        const suppressedFor = events.find((event) => event.type === 'email.suppressed')?.suppression_reason;
        return html`<section class="card recipient" data-recipient=${recipient.address}>
          <div class="section-head">
            <h3 class="break">${recipient.address} <span class="muted small">(${recipient.type})</span></h3>
            <${Chip} status=${recipient.status} />
          </div>
          ${
            recipient.status === 'suppressed'
              ? html`<p data-testid="suppression-reason">
                  ${'Not sent: the address is on the '}
                  <${Link} href="/dashboard/suppressions">suppression list</${Link}>
                  ${suppressedFor ? ` (${suppressedFor.replace('_', ' ')}).` : '.'}
                </p>`
              : null
          }
          <p class="small muted">
            ${recipient.attempts} attempt${recipient.attempts === 1 ? '' : 's'}
            ${recipient.last_response && !replyInTimeline ? html`<span> · last reply <code>${recipient.last_response}</code></span>` : null}
            <span data-testid="engagement"> · ${engagement}</span>
            ${recipient.first_opened_at ? html`<span> · first opened ${formatTime(recipient.first_opened_at)}</span>` : null}
            ${recipient.unsubscribed_at ? html`<span> · unsubscribed ${formatTime(recipient.unsubscribed_at)}</span>` : null}
          </p>
          ${
            clicks?.length
              ? html`<details class="clicks">
                  <summary>Clicks (${clicks.length})</summary>
                  <ul>
                    ${clicks.map(
                      (click) =>
                        html`<li>
                          <span class="muted small">${formatTime(click.clicked_at)}</span>
                          <code class="break">${click.url}</code>
                          ${click.automated ? html`<span class="chip chip-muted">automated</span>` : null}
                        </li>`,
                    )}
                  </ul>
                </details>`
              : null
          }
          ${
            events.length === 0
              ? html`<p class="muted">
                  No events
                  yet${recipient.next_attempt_at ? `; next attempt ${formatTime(recipient.next_attempt_at)}` : ''}.
                </p>`
              : html`<ol class="timeline">
                  ${events.map(
                    (event, index) =>
                      html`<li class=${ENGAGEMENT.has(event.type) ? 'engagement' : ''}>
                        <span class="when">${formatTime(event.created_at)}</span>
                        <${Chip} status=${event.type} />
                        ${
                          // One reply can be two events' (sent and delivered): shown once.
                          event.smtp_response && !sameReplyAsBefore(events, index)
                            ? html`<code class="small">${event.smtp_response}</code>`
                            : null
                        }
                      </li>`,
                  )}
                </ol>`
          }
        </section>`;
      })}
    </div>
    <h2>Content</h2>
    <div class="tabs" role="tablist" aria-label="Content" onKeyDown=${onTabKey}>
      ${tabs.map(
        ([value, label]) =>
          html`<button
            type="button"
            role="tab"
            id=${`tab-${value}`}
            aria-selected=${tab === value}
            tabindex=${tab === value ? 0 : -1}
            aria-controls="content-panel"
            onClick=${() => setTab(value)}
          >
            ${label}
          </button>`,
      )}
    </div>
    <div id="content-panel" role="tabpanel" aria-labelledby=${`tab-${tab}`} class="card">
      ${tab === 'html' ? (message.html ? html`<${HtmlPreview} html=${message.html} />` : html`<p class="muted">This email has no html part.</p>`) : null}
      ${tab === 'text' ? html`<pre class="code">${message.text ?? '(no text part)'}</pre>` : null}
      ${tab === 'raw' ? html`<${RawMime} id=${message.id} />` : null}
    </div>`;
}

function RawMime({ id }) {
  const raw = useAsync(() => api('GET', `/emails/${encodeURIComponent(id)}/raw`), [id]);
  if (raw.loading) return html`<${Loading} />`;
  if (raw.error instanceof ApiError && raw.error.status === 404) {
    return html`<p class="muted">${raw.error.message} The raw message is kept in capture mode only.</p>`;
  }
  if (raw.error) return html`<${ErrorBanner} error=${raw.error} />`;
  return html`<pre class="code raw" data-testid="raw-mime">${raw.data.raw}</pre>`;
}
