import { html, useEffect, useState, useCallback, useRef } from './html.js';
import { ApiError } from './api.js';

// ---------------------------------------------------------------------------------------------------------
// Navigation: real links (keyboard, middle-click and "copy link" work), with history.pushState in between.

const navListeners = new Set();
export function navigate(href, { replace = false } = {}) {
  if (replace) history.replaceState(null, '', href);
  else history.pushState(null, '', href);
  for (const listener of navListeners) listener();
}
export function useLocation() {
  const [location, setLocation] = useState(() => ({
    path: window.location.pathname,
    search: window.location.search,
  }));
  useEffect(() => {
    const update = () => setLocation({ path: window.location.pathname, search: window.location.search });
    navListeners.add(update);
    window.addEventListener('popstate', update);
    return () => {
      navListeners.delete(update);
      window.removeEventListener('popstate', update);
    };
  }, []);
  return location;
}

export function Link({ href, children, ...rest }) {
  const onClick = (event) => {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey)
      return;
    event.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${onClick} ...${rest}>${children}</a>`;
}

// ---------------------------------------------------------------------------------------------------------
// Loading data.

/** Runs `load` when `deps` change; `reload()` runs it again. A failure is kept to be shown, never thrown. */
export function useAsync(load, deps) {
  const [state, setState] = useState({ loading: true, data: undefined, error: null });
  const generation = useRef(0);
  const run = useCallback(() => {
    const mine = ++generation.current;
    setState((previous) => ({ ...previous, loading: true, error: null }));
    Promise.resolve()
      .then(load)
      .then(
        (data) => mine === generation.current && setState({ loading: false, data, error: null }),
        (error) => mine === generation.current && setState({ loading: false, data: undefined, error }),
      );
  }, deps);
  useEffect(run, [run]);
  return { ...state, reload: run };
}

/** The errors of a failed request by form field: `param` `events[2]` or `to.1` belongs to field `events`/`to`. */
export function fieldErrors(error) {
  if (!error?.param) return {};
  const field = fieldOf(error.param);
  return { [field]: error.message, [error.param]: error.message };
}

/** The form field an API error's `param` is about (`events[2]`, `to.1` → `events`, `to`); null without one. */
const fieldOf = (param) => (param ? param.split(/[.[]/)[0] : null);

/**
 * A form's refusal that no field of the form shows: one without a `param`, or whose `param` names a field
 * this form does not have (a tag, a header). Shown as a banner with the API's own words, which name the field
 * ("The field 'tags[0].name' is required."); before, such an error was dropped and the form did nothing.
 */
export function FormError({ error, fields }) {
  if (!error) return null;
  const field = fieldOf(error.param);
  if (field && fields.includes(field)) return null;
  return html`<${ErrorBanner} error=${error} />`;
}

// ---------------------------------------------------------------------------------------------------------
// Pieces every page uses.

export function ErrorBanner({ error, children }) {
  if (!error) return null;
  const requestId = error instanceof ApiError ? error.requestId : null;
  return html`<div class="banner banner-error" role="alert">
    <strong>${error.message || String(error)}</strong>
    ${requestId ? html`<span class="muted"> (request ${requestId})</span>` : null} ${children}
  </div>`;
}

/**
 * A page of one thing while `loaded` (useAsync) has none: its heading `title` with why it failed, or with
 * Loading…; null once the thing is there. `const waiting = unloaded('Broadcast', loaded); if (waiting) return waiting;`
 */
export function unloaded(title, loaded) {
  if (loaded.error)
    return html`<h1>${title}</h1>
      <${ErrorBanner} error=${loaded.error} />`;
  if (!loaded.data)
    return html`<h1>${title}</h1>
      <${Loading} />`;
  return null;
}

export function Notice({ children, kind = 'info' }) {
  return html`<div class=${`banner banner-${kind}`} role="status">${children}</div>`;
}

export function Loading() {
  return html`<p class="muted" aria-busy="true">Loading…</p>`;
}

export function Empty({ title, children }) {
  return html`<div class="empty">
    <p class="empty-title">${title}</p>
    <div class="muted">${children}</div>
  </div>`;
}

/**
 * A labelled field with its error beneath it. `name` is the API's field (`param`), so a 422 lands next to
 * the input it is about; the input is described by the error for screen readers.
 */
export function Field({ label, name, errors = {}, hint, children }) {
  const error = errors[name];
  const id = `field-${name}`;
  return html`<div class=${`field${error ? ' field-invalid' : ''}`}>
    <label for=${id}>${label}</label>
    ${children({ id, name, 'aria-invalid': error ? 'true' : undefined, 'aria-describedby': error ? `${id}-error` : hint ? `${id}-hint` : undefined })}
    ${hint && !error ? html`<p class="hint" id=${`${id}-hint`}>${hint}</p>` : null}
    ${error ? html`<p class="field-error" id=${`${id}-error`} data-param=${name}>${error}</p>` : null}
  </div>`;
}

const CHIP_KINDS = {
  delivered: 'ok',
  succeeded: 'ok',
  sent: 'ok',
  verified: 'ok',
  applied: 'ok',
  enabled: 'ok',
  received: 'ok',
  queued: 'pending',
  pending: 'pending',
  scheduled: 'pending',
  sending: 'pending',
  in_progress: 'pending',
  running: 'pending',
  waiting: 'pending',
  completed: 'ok',
  delayed: 'warn',
  mixed: 'warn',
  disabled: 'warn',
  unreadable: 'warn',
  pass: 'ok',
  ok: 'ok',
  warn: 'warn',
  warning: 'warn',
  fail: 'bad',
  paused: 'bad',
  complained: 'bad',
  bounced: 'bad',
  failed: 'bad',
  failing: 'bad',
  suppressed: 'muted',
  cancelled: 'muted',
  skipped: 'muted',
};
export function Chip({ status }) {
  const kind = CHIP_KINDS[String(status).replace(/^email\./, '')] ?? 'muted';
  return html`<span class=${`chip chip-${kind}`}>${String(status).replaceAll('_', ' ')}</span>`;
}

/** A time as a `<input type="datetime-local">` takes it: the browser's local time, to the minute. */
export const localInputValue = (date) =>
  new Date(date.getTime() - date.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);

export const formatTime = (iso) => {
  if (!iso) return '—';
  const date = new Date(iso);
  return Number.isNaN(date.getTime())
    ? iso
    : date
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, ' UTC');
};

/**
 * Copies `text`. Its accessible name is `label` alone ("Copy value"), never the text: what it copies may be
 * a key or a secret, and a name is read aloud, listed by assistive tools and shown in accessibility trees.
 * `describedBy` may point at an element that says which one it is (a record's name, not its value).
 */
export function CopyButton({ text, label = 'Copy', describedBy }) {
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setCopied(true);
      setTimeout(() => setCopied(false), 1500);
    } catch {
      window.prompt('Copy this value:', text);
    }
  };
  return html`<button
      type="button"
      class="button-small"
      onClick=${copy}
      aria-label=${label}
      aria-describedby=${describedBy}
    >
      ${copied ? 'Copied' : label}</button
    ><span class="visually-hidden" role="status">${copied ? 'Copied' : ''}</span>`;
}

// ---------------------------------------------------------------------------------------------------------
// Confirmation: a modal <dialog> (focus moves into it, Escape cancels, focus returns afterwards).

export function confirmAction(message, { confirmLabel = 'Delete', danger = true } = {}) {
  return new Promise((resolve) => {
    const dialog = document.createElement('dialog');
    dialog.className = 'confirm';
    dialog.setAttribute('aria-labelledby', 'confirm-message');
    const text = document.createElement('p');
    text.id = 'confirm-message';
    text.textContent = message;
    const actions = document.createElement('div');
    actions.className = 'actions';
    const cancel = document.createElement('button');
    cancel.type = 'button';
    cancel.textContent = 'Cancel';
    const ok = document.createElement('button');
    ok.type = 'button';
    ok.textContent = confirmLabel;
    ok.className = danger ? 'button-danger' : 'button-primary';
    actions.append(cancel, ok);
    dialog.append(text, actions);
    const previous = document.activeElement;
    const finish = (answer) => {
      dialog.close();
      dialog.remove();
      if (previous instanceof HTMLElement) previous.focus();
      resolve(answer);
    };
    cancel.addEventListener('click', () => finish(false));
    ok.addEventListener('click', () => finish(true));
    dialog.addEventListener('cancel', (event) => {
      event.preventDefault();
      finish(false);
    });
    document.body.append(dialog);
    dialog.showModal();
    cancel.focus();
  });
}

/** A <pre> of JSON, for payloads. */
export const Json = ({ value }) => html`<pre class="code">${JSON.stringify(value, null, 2)}</pre>`;

/**
 * A table of `rows`, a column for each of `columns`: `{ label, cell(row, index), class }`, and `hidden: true` for a
 * column whose heading is for screen readers only (a row's buttons). Every cell carries its column's label
 * (`data-label`): on a narrow screen the stylesheet stacks a row's cells, each under its label.
 * `label` names a table that may scroll sideways (see below).
 * `rowAttributes(row, index)` gives a row's own attributes (a class, the `data-*` the tests and styles find it by).
 */
export function Table({ columns, rows, class: className, label, rowAttributes = () => ({}) }) {
  // A table that may scroll sideways (`label` given: the numbers table keeps its columns on a phone) is a named
  // region in the Tab order, so it can be scrolled from the keyboard.
  const region = label ? { role: 'region', 'aria-label': label, tabindex: 0 } : {};
  return html`<div class="table-wrap" ...${region}>
    <table class=${className}>
      <thead>
        <tr>
          ${columns.map(
            (column) =>
              html`<th>
                ${column.hidden ? html`<span class="visually-hidden">${column.label}</span>` : column.label}
              </th>`,
          )}
        </tr>
      </thead>
      <tbody>
        ${rows.map(
          (row, index) =>
            html`<tr ...${rowAttributes(row, index)}>
              ${columns.map(
                (column) =>
                  html`<td data-label=${column.hidden ? undefined : column.label} class=${column.class}>
                    ${column.cell(row, index)}
                  </td>`,
              )}
            </tr>`,
        )}
      </tbody>
    </table>
  </div>`;
}
