import { html, useState } from '../html.js';
import { api, ApiError } from '../api.js';
import { ListPage, useListFilters } from '../list.js';
import { loadReputation, percent, rateLine } from './overview.js';
import {
  Chip,
  confirmAction,
  CopyButton,
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
  unloaded,
  useAsync,
} from '../ui.js';

/** GET /v1/domains…; `null` when this server has no domains API (404). */
async function loadDomains(path) {
  try {
    return await api('GET', path);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null;
    throw error;
  }
}
// A domain may come bare (`{ object: 'domain', … }`) or in an envelope (`{ data: … }`).
const unwrap = (body) => (body && body.data && !Array.isArray(body.data) ? body.data : body);

export function DomainsPage({ search }) {
  const { toFirstPage } = useListFilters(search, '/dashboard/domains');
  const [message, setMessage] = useState(null);
  const [version, setVersion] = useState(0);
  const changed = () => setVersion((n) => n + 1);
  return html`<h1>Domains</h1>
    <p class="lead">Verify the domains you send from: publish the DNS records below, then verify.</p>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <${ListPage}
      search=${search}
      base="/dashboard/domains"
      endpoint="/domains"
      limit=${20}
      load=${loadDomains}
      version=${version}
      label="Pages of domains"
      unavailable=${html`<${Empty} title="Sending domains are not available on this server">
        This Postwire version has no <code>/v1/domains</code> API. Mail is signed with the server's
        <code>DKIM_DOMAIN</code> key, if one is configured.
      </${Empty}>`}
      empty=${html`<${Empty} title="No domains yet">Add the domain you send from (<code>acme.example</code>) to get its DKIM and return-path records.</${Empty}>`}
      footer=${({ data }) =>
        data === null
          ? null
          : html`<section class="card">
              <h2>Add a domain</h2>
              <${AddDomain} onAdded=${() => (toFirstPage(), changed())} />
            </section>`}
    >
      ${({ items }) =>
        items.map(
          (domain) =>
            html`<${DomainCard}
              key=${domain.id}
              domain=${domain}
              onChange=${changed}
              onMessage=${setMessage}
            />`,
        )}
    </${ListPage}>`;
}

function DomainCard({ domain: initial, onChange, onMessage, own = false }) {
  const [domain, setDomain] = useState(initial);
  const [busy, setBusy] = useState(false);
  const [rotated, setRotated] = useState(null);
  const verify = async () => {
    setBusy(true);
    onMessage(null);
    try {
      const next = unwrap(await api('POST', `/domains/${domain.id}/verify`));
      setDomain(next);
      onMessage({ text: `${next.name}: ${next.status}.` });
    } catch (failure) {
      onMessage({ error: failure });
    } finally {
      setBusy(false);
    }
  };
  // A new key, after confirming: the answer's `rotation: "next"` record is what to publish; the current key
  // signs until it verifies.
  const rotate = async () => {
    if (
      !(await confirmAction(
        `Rotate the DKIM key of ${domain.name}? A new key and selector are made; publish its record, then verify. The current key keeps signing until the new record verifies.`,
        { confirmLabel: 'Rotate key', danger: false },
      ))
    )
      return;
    setBusy(true);
    onMessage(null);
    try {
      const next = unwrap(await api('POST', `/domains/${domain.id}/dkim/rotate`));
      setDomain(next);
      setRotated(next.records?.find((record) => record.rotation === 'next') ?? null);
    } catch (failure) {
      onMessage({ error: failure });
    } finally {
      setBusy(false);
    }
  };
  const remove = async () => {
    if (
      !(await confirmAction(
        `Delete the domain ${domain.name}? Mail from it is no longer signed with its key.`,
      ))
    )
      return;
    try {
      await api('DELETE', `/domains/${domain.id}`);
      onChange();
    } catch (failure) {
      onMessage({ error: failure });
    }
  };
  return html`<section class="card" data-domain=${domain.name}>
    <div class="section-head">
      ${
        own
          ? html`<h2>DNS records</h2>`
          : html`<h2 class="break"><${Link} href=${`/dashboard/domains/${domain.id}`}>${domain.name}</${Link}></h2>`
      }
      <${Chip} status=${domain.status} />
    </div>
    <p class="small muted">
      ${domain.last_checked_at ? `Last checked ${formatTime(domain.last_checked_at)}` : 'Not checked yet'}
    </p>
    ${
      domain.verified_without_dns
        ? html`<p class="banner banner-info" role="status" data-testid="without-dns">
            Checked without DNS: ${domain.verified_without_dns}.
          </p>`
        : null
    }
    ${
      domain.challenge_required
        ? html`<${Notice}>
          Another project has verified this name (or a domain it is under). Publish the
          <code>challenge</code> record below with the others to prove the name is yours: verifying then
          moves it to this project.
        </${Notice}>`
        : null
    }
    ${
      rotated
        ? html`<div class="banner banner-ok" role="status" data-testid="rotation">
            <p><strong>New DKIM key made.</strong> Publish this ${rotated.type} record, then verify:</p>
            <dl class="facts">
              <dt>Name</dt>
              <dd>
                <code class="break">${rotated.name}</code>
                <${CopyButton} text=${rotated.name} label="Copy name" />
              </dd>
              <dt>Value</dt>
              <dd>
                <code class="break">${rotated.value}</code>
                <${CopyButton} text=${rotated.value} label="Copy value" />
              </dd>
            </dl>
            <p class="small">
              The key of selector <code>${domain.dkim_selector}</code> keeps signing until then.
            </p>
          </div>`
        : null
    }
    <${Table}
      class="records"
      rows=${domain.records ?? []}
      columns=${recordColumns(domain)}
      rowAttributes=${(record) => ({ 'data-purpose': record.purpose })}
    />
    <${Compliance} domain=${domain} />
    ${own ? null : html`<p class="small"><${Link} href=${`/dashboard/domains/${domain.id}`}>Warm-up and sending health of ${domain.name}</${Link}></p>`}
    <div class="actions">
      <button data-writes type="button" class="button-primary" onClick=${verify} disabled=${busy}>
        ${busy ? 'Checking DNS…' : 'Verify'}
      </button>
      <button data-writes type="button" onClick=${rotate} disabled=${busy}>Rotate DKIM key</button>
      <button data-writes type="button" class="button-danger" onClick=${remove}>Delete</button>
    </div>
  </section>`;
}

/** What each compliance check is, in words (GET /v1/domains/{id}'s `compliance`). */
const CHECK_NAMES = {
  spf: 'SPF record',
  spf_lookups: 'SPF DNS lookups',
  spf_sending_host: 'SPF covers the sending host',
  dkim_key: 'DKIM key size',
  dmarc: 'DMARC policy',
  dmarc_reports: 'DMARC reports (rua)',
  reverse_dns: 'Reverse DNS of the sending host',
  helo: 'HELO name',
  tls: 'TLS on the way out',
  list_unsubscribe: 'One-click unsubscribe',
};

/** The compliance checks the last domain check found: each pass, warn or fail, with why. */
function Compliance({ domain }) {
  const checks = domain.compliance;
  return html`<div class="compliance" data-testid="compliance">
    <h3>Compliance checks</h3>
    ${
      checks == null
        ? html`<p class="small muted">
            ${
              domain.verified_without_dns
                ? 'Not checked: this server takes the records as published without DNS.'
                : 'Not checked yet: the next domain check (Verify) runs them.'
            }
          </p>`
        : html`<${Table}
            class="compliance-checks"
            rows=${checks}
            columns=${[
              { label: 'Check', cell: (check) => CHECK_NAMES[check.check] ?? check.check },
              { label: 'Result', cell: (check) => html`<${Chip} status=${check.status} />` },
              { label: 'Why', class: 'small', cell: (check) => check.reason },
            ]}
            rowAttributes=${(check) => ({ 'data-check': check.check, 'data-status': check.status })}
          />`
    }
  </div>`;
}

/** The columns of a domain's DNS records: each name and value with a button that copies it. */
const recordColumns = (domain) => [
  {
    label: 'Type',
    cell: (record) => `${record.type}${record.priority != null ? ` ${record.priority}` : ''}`,
  },
  {
    label: 'Name',
    cell: (record, index) =>
      html`<code class="break" id=${`record-${domain.id}-${index}`}>${record.name}</code>
        <${CopyButton} text=${record.name} label="Copy name" />`,
  },
  {
    label: 'Value',
    cell: (record, index) =>
      html`<code class="break value">${record.value}</code>
        <${CopyButton}
          text=${record.value}
          label="Copy value"
          describedBy=${`record-${domain.id}-${index}`}
        />`,
  },
  {
    label: 'Status',
    cell: (record) =>
      html`<${Chip}
          status=${record.status}
        />${record.required === false ? html` <span class="small muted">optional</span>` : null}${
          record.rotation === 'next'
            ? html` <span class="small muted">· new key, signs once verified</span>`
            : record.rotation === 'retiring'
              ? html` <span class="small muted">· current key, retiring</span>`
              : null
        }`,
  },
  {
    label: 'Found',
    class: 'small',
    cell: (record) =>
      html`${record.found === undefined ? '—' : record.found === null ? 'nothing' : html`<code class="break">${[].concat(record.found).join(', ')}</code>`}${record.error ? html` <span class="muted">${record.error}</span>` : null}`,
  },
];

function AddDomain({ onAdded }) {
  const [name, setName] = useState('');
  const [error, setError] = useState(null);
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    try {
      await api('POST', '/domains', { name: name.trim() });
      setName('');
      onAdded();
    } catch (failure) {
      setError(failure);
    }
  };
  return html`<form class="form" onSubmit=${submit} novalidate>
    <${FormError} error=${error} fields=${['name']} />
    <${Field} label="Domain" name="name" errors=${fieldErrors(error)}>
      ${(props) => html`<input ...${props} value=${name} onInput=${(e) => setName(e.currentTarget.value)} placeholder="acme.example" />`}
    </${Field}>
    <button data-writes type="submit" class="button-primary" disabled=${!name.trim()}>Add domain</button>
  </form>`;
}

/**
 * A domain's own page: its records and compliance checks (the card of the list), its warm-up (the schedule,
 * today's allowance and what each destination took of it) and its sending health (the reputation breaker's
 * state for mail from it, with Resume when paused).
 */
export function DomainPage({ id }) {
  const loaded = useAsync(() => api('GET', `/domains/${id}`).then(unwrap), [id]);
  const [message, setMessage] = useState(null);
  const waiting = unloaded('Domain', loaded);
  if (waiting) return waiting;
  const domain = loaded.data;
  return html`<p class="crumbs"><${Link} href="/dashboard/domains">Domains</${Link}> /</p>
    <h1 class="break">${domain.name}</h1>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <${SendingHealth} domain=${domain} />
    <${Warmup} domain=${domain} />
    <${DomainCard}
      domain=${domain}
      own=${true}
      onChange=${() => navigate('/dashboard/domains')}
      onMessage=${setMessage}
    />`;
}

/** GET /v1/domains/{id}/warmup, with the buttons that turn it on or off and start it over (PUT). */
function Warmup({ domain }) {
  const loaded = useAsync(() => api('GET', `/domains/${domain.id}/warmup`), [domain.id]);
  const [error, setError] = useState(null);
  const warmup = loaded.data;
  const put = async (body) => {
    setError(null);
    try {
      await api('PUT', `/domains/${domain.id}/warmup`, body);
      loaded.reload();
    } catch (failure) {
      setError(failure);
    }
  };
  const restart = async () => {
    if (
      !(await confirmAction(
        `Start the warm-up of ${domain.name} over? Today becomes day 1, with day 1's allowance.`,
        { confirmLabel: 'Start over', danger: false },
      ))
    )
      return;
    await put({ enabled: true, restart: true });
  };
  let state = null;
  if (warmup) {
    // Sentences are built as strings: whitespace next to a line break in a template would be dropped.
    const [chip, sentence] = !warmup.enabled
      ? [
          'off',
          `Off: mail from ${domain.name} is not held. A new domain or IP should warm up: a little mail to each large provider a day, more each day.`,
        ]
      : warmup.day === null
        ? ['completed', `Warm: the schedule ended ${formatTime(warmup.ends_at)}; nothing is held.`]
        : [
            'in_progress',
            `Day ${warmup.day} of ${warmup.schedule.length}: today each large provider takes ${warmup.allowance_per_destination} messages from ${domain.name}; mail over it waits (its recipients show “throttled”) for the next UTC day, transactional mail first. Warm from ${formatTime(warmup.ends_at)}.`,
          ];
    state = html`<p data-testid="warmup-state"><${Chip} status=${chip} />${` ${sentence}`}</p>`;
  }
  return html`<section class="card" aria-labelledby="warmup-title" data-testid="warmup">
    <h2 id="warmup-title">Warm-up</h2>
    <${ErrorBanner} error=${loaded.error ?? error} />
    ${!warmup && !loaded.error ? html`<${Loading} />` : null}
    ${
      warmup
        ? html`${state}
            ${
              warmup.enabled && warmup.day !== null
                ? warmup.used_today.length
                  ? html`<${Table}
                      class="warmup-used"
                      rows=${warmup.used_today}
                      rowAttributes=${(row) => ({ 'data-destination': row.destination })}
                      columns=${[
                        {
                          label: `Destination (${warmup.today})`,
                          class: 'break',
                          cell: (row) => row.destination,
                        },
                        { label: 'Used today', cell: (row) => row.used },
                        {
                          label: 'Left today',
                          cell: (row) => Math.max(0, warmup.allowance_per_destination - row.used),
                        },
                      ]}
                    />`
                  : html`<p class="small muted">
                      Nothing sent from it to a large provider today (${warmup.today}, UTC).
                    </p>`
                : null
            }
            <details>
              <summary>
                ${`The schedule: ${warmup.schedule.length} days${warmup.default_schedule ? " (the server's, WARMUP_SCHEDULE)" : ''}`}
              </summary>
              <ol class="small warmup-schedule">
                ${warmup.schedule.map((allowance, index) => html`<li data-day=${index + 1}>${allowance} a day per provider</li>`)}
              </ol>
            </details>
            <p class="small muted">Direct delivery only: a relay paces its own mail.</p>
            <div class="actions">
              ${
                warmup.enabled
                  ? html`<button data-writes type="button" onClick=${() => put({ enabled: false })}>
                        Turn warm-up off
                      </button>
                      <button data-writes type="button" onClick=${restart}>Start over</button>`
                  : html`<button
                      data-writes
                      type="button"
                      class="button-primary"
                      onClick=${() => put({ enabled: true })}
                    >
                      Turn warm-up on
                    </button>`
              }
            </div>`
        : null
    }
  </section>`;
}

/**
 * The reputation breaker for mail from the domain (GET /v1/reputation: its scope, when it sent in the window)
 * and for the project as a whole, with Resume when the domain is paused (a full_access key).
 */
function SendingHealth({ domain }) {
  const loaded = useAsync(loadReputation, [domain.name]);
  const [error, setError] = useState(null);
  const [resumed, setResumed] = useState(false);
  const body = loaded.data;
  if (body === null) return null;
  const resume = async () => {
    setError(null);
    try {
      await api('POST', '/reputation/resume', { domain: domain.name });
      setResumed(true);
      loaded.reload();
    } catch (failure) {
      setError(failure);
    }
  };
  const scope = body?.domains.find((each) => each.domain === domain.name);
  const line = (label, each) => {
    const since = each.changed_at ? `; ${each.state} since ${formatTime(each.changed_at)}` : '';
    const volume = `(${each.sent} sent, ${count(each.bounced_hard, 'hard bounce')}, ${count(each.complained, 'complaint')}${since})`;
    return html`<li data-scope=${each.domain ?? 'project'}>
      <strong>${label}</strong> <${Chip} status=${each.state} />${`: ${rateLine(each, body.thresholds)} `}
      <span class="small muted">${volume}</span>
    </li>`;
  };
  return html`<section class="card" aria-labelledby="health-title" data-testid="sending-health">
    <h2 id="health-title">Sending health</h2>
    <${ErrorBanner} error=${loaded.error ?? error} />
    ${resumed ? html`<${Notice} kind="ok">Resumed: mail from ${domain.name} goes again.</${Notice}>` : null}
    ${
      body
        ? html`<ul class="health">
              ${scope ? line(domain.name, scope) : html`<li data-scope=${domain.name}><strong>${domain.name}</strong>: no mail from it in the last ${body.thresholds.window_days} days, so no rates yet.</li>`}
              ${line('This project', body.project)}
            </ul>
            <p class="small muted">${thresholdsLine(body.thresholds)}</p>
            ${
              scope?.state === 'paused'
                ? html`<p>${pausedLine(scope)}</p>
                    <button data-writes type="button" onClick=${resume}>
                      Resume sending from ${domain.name}
                    </button>`
                : null
            }`
        : html`<${Loading} />`
    }
  </section>`;
}

/** When the breaker warns and pauses, in one sentence. */
const thresholdsLine = (thresholds) =>
  `Warning from ${percent(thresholds.hard_bounce_warning)} hard bounces or ${percent(thresholds.complaint_warning)} complaints; paused past the limits (judged from ${thresholds.min_bounce_volume} messages for bounces, ${thresholds.min_complaint_volume} for complaints; "—" below that).`;

/** What a paused domain's pause holds, and what to do first. */
const pausedLine = (scope) =>
  `${scope.holds === 'all' ? 'Every send from it is refused' : 'Its broadcasts are refused'} until it is resumed. Find out why (the bounced and complained emails, the list they went to) first.`;

/** `1 complaint`, `2 complaints`. */
const count = (n, noun) => `${n} ${noun}${n === 1 ? '' : 's'}`;
