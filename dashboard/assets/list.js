// The dashboard's lists: one page of an API list (`{ object: "list", data, has_more }`, newest first), asked
// for with `limit` and the API's keyset cursors, and the page's place kept in the URL's query
// (`?status=failed&limit=20&after=wh_…`): a reload, a shared link and back/forward show the same page.
import { html, useEffect, useState } from './html.js';
import { api, query } from './api.js';
import { Empty, ErrorBanner, Link, Loading, navigate, useAsync } from './ui.js';

/** The API's largest page (`limit` is 1–100 on every list). */
const MAX_LIMIT = 100;

/**
 * What a list's URL says: its `filters` (the params named, '' when absent), the page size it asks for
 * (`limit`, only when the URL gives a valid one) and its cursor (`{ after }`, `{ before }` or `{}`).
 */
export function listLocation(search, filterNames = []) {
  const params = new URLSearchParams(search);
  const filters = Object.fromEntries(filterNames.map((name) => [name, params.get(name) ?? '']));
  const asked = Number(params.get('limit'));
  const limit = Number.isInteger(asked) && asked >= 1 && asked <= MAX_LIMIT ? asked : undefined;
  const after = params.get('after');
  const before = params.get('before');
  const cursor = after ? { after } : before ? { before } : {};
  return { filters, limit, cursor };
}

/** The URL of a list at `base`: filters first, then the page size and the cursor (each only when set). */
export const listHref = (base, { filters = {}, limit, cursor = {} }) =>
  `${base}${query({ ...filters, limit, ...cursor })}`;

/**
 * The filters of the list at `base`, read from and written to its URL. Changing one goes back to the first
 * page (a cursor belongs to the list it came from) and replaces the history entry, like a form field would;
 * `toFirstPage()` shows the first page with the same filters.
 */
export function useListFilters(search, base, filterNames = []) {
  const { filters, limit } = listLocation(search, filterNames);
  const setFilters = (changes) =>
    navigate(listHref(base, { filters: { ...filters, ...changes }, limit }), { replace: true });
  const firstPage = listHref(base, { filters, limit });
  // After adding an item: it is the newest, on the first page (a history entry only if the page changes).
  const toFirstPage = () => {
    if (`${window.location.pathname}${window.location.search}` !== firstPage) navigate(firstPage);
  };
  return { filters, setFilters, toFirstPage };
}

/**
 * One page of the list `endpoint` of the API, its place in the URL of `base` (the page's own path).
 *
 * - `filters`: the URL params that filter the list; `toApi(filters)` gives the API's query for them (by
 *   default the same names). The page's controls change them with `useListFilters`.
 * - `limit`: the page size unless the URL asks for another (`?limit=`, 1–100).
 * - `load(path)`: asks the API (default `GET /v1<path>`); `null` means the server has no such list and
 *   `unavailable` is shown instead.
 * - `version`: changed by the page to ask again (after it added or removed an item).
 * - `empty`: what an empty first page says: a function of the filters, or a node (then a filtered list
 *   that finds nothing says "Nothing matches these filters" instead).
 * - `children(context)`: the items; `footer(context)` comes after the pager, whatever the list holds.
 *   `context` is `{ items, data, loading, reload, filters }` (`data` undefined until the first answer).
 *
 * Everything from the API is rendered as text by the page's templates: never as HTML.
 */
export function ListPage({
  search,
  base,
  endpoint,
  filters: filterNames = [],
  toApi = (filters) => filters,
  limit: defaultLimit = 50,
  load = (path) => api('GET', path),
  version = 0,
  label = 'Pages',
  empty,
  unavailable = null,
  children,
  footer,
}) {
  const render = [].concat(children).find((child) => typeof child === 'function');
  const location = listLocation(search, filterNames);
  const { filters, cursor } = location;
  const limit = location.limit ?? defaultLimit;
  const path = `${endpoint}${query({ ...toApi(filters), limit, ...cursor })}`;
  // The answer remembers what it answers: the previous page stays on screen while the next one loads, but
  // only the page's own answer decides anything about it.
  const list = useAsync(() => Promise.resolve(load(path)).then((body) => ({ path, body })), [path, version]);
  const data = list.data?.body;
  const current = list.data?.path === path && !list.loading;
  const href = (nextCursor) => listHref(base, { filters, limit: location.limit, cursor: nextCursor });
  const firstPage = href({});
  // "Previous" back to the newest page lands on `?before=…` with nothing newer: that is the first page, so
  // its URL becomes the first page's (a reload then shows what is newest by then, not what was).
  const atNewest = Boolean(cursor.before) && current && data?.has_more === false;
  useEffect(() => {
    if (atNewest) navigate(firstPage, { replace: true });
  }, [atNewest, firstPage]);

  const items = data?.data ?? [];
  const filtering = Object.values(filters).some(Boolean);
  const context = { items, data, loading: list.loading, reload: list.reload, filters };
  const firstPageLink = html`<${Link} href=${firstPage}>Go to the first page</${Link}>`;
  let body = null;
  if (list.error) {
    body = html`<${ErrorBanner} error=${list.error}>${cursor.after || cursor.before ? firstPageLink : null}</${ErrorBanner}>`;
  } else if (data === undefined) {
    body = list.loading ? html`<${Loading} />` : null;
  } else if (data === null) {
    body = unavailable;
  } else if (items.length === 0) {
    body =
      cursor.after || cursor.before
        ? html`<${Empty} title="Nothing on this page">The items it held have gone. ${firstPageLink}.</${Empty}>`
        : typeof empty === 'function'
          ? empty(filters)
          : filtering
            ? html`<${Empty} title="Nothing matches these filters">Change or clear the filters.</${Empty}>`
            : empty;
  } else {
    body = html`${render(context)}
      <${Pager} label=${label} items=${items} hasMore=${data.has_more} cursor=${cursor} href=${href} />`;
  }
  return html`${body}${footer ? footer(context) : null}`;
}

/**
 * Keyset pagination, newest first: Next is `after` the last item (older ones), Previous is `before` the
 * first (newer ones). Real links, so the page is in the URL and middle-click or "copy link" work. A list
 * that fits on one page has no pager.
 */
export function Pager({ label, items, hasMore, cursor, href }) {
  if (!items?.length) return null;
  // Newer items exist when this page was reached with `after`, or `before` says more are newer still.
  const hasNewer = Boolean(cursor.after) || (Boolean(cursor.before) && hasMore);
  // Older items exist when `has_more` says so, or this page was reached with `before` (from an older one).
  const hasOlder = cursor.before ? true : hasMore;
  if (!hasNewer && !hasOlder) return null;
  return html`<nav class="pager" aria-label=${label}>
    <${PagerLink} href=${hasNewer ? href({ before: items[0].id }) : null} rel="prev">
      <span aria-hidden="true">← </span>Previous
    </${PagerLink}>
    <${PagerLink} href=${hasOlder ? href({ after: items[items.length - 1].id }) : null} rel="next">
      Next<span aria-hidden="true"> →</span>
    </${PagerLink}>
  </nav>`;
}

/**
 * A pager link, or the same words marked disabled where there is no page that way. It is the same element
 * either way, and the disabled one stays focusable from script (tabindex -1, out of the Tab order): following
 * the last Next leaves the keyboard's focus where it was instead of dropping it to the top of the document.
 */
function PagerLink({ href, rel, children }) {
  const onClick = (event) => {
    if (!href) return event.preventDefault();
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
    event.preventDefault();
    navigate(href);
  };
  return html`<a
    class="pager-link"
    href=${href ?? undefined}
    rel=${href ? rel : undefined}
    role=${href ? undefined : 'link'}
    aria-disabled=${href ? undefined : 'true'}
    tabindex=${href ? undefined : '-1'}
    onClick=${onClick}
    >${children}</a
  >`;
}

/**
 * A list's filter as a select, labelled: `name` is its param (and the element's id), `options` its values as
 * `[value, text]`, and the first option, `anyText`, clears it. Changing it shows the first page
 * (`setFilters`, from useListFilters).
 */
export function FilterSelect({ id, label, name, filters, setFilters, options, anyText = 'any' }) {
  return html`<label for=${id}>${label}</label>
    <select id=${id} value=${filters[name]} onChange=${(e) => setFilters({ [name]: e.currentTarget.value })}>
      <option value="">${anyText}</option>
      ${options.map(([value, text]) => html`<option value=${value}>${text}</option>`)}
    </select>`;
}

/**
 * A text filter applied on Enter or leaving the field. What is typed is the field's own until then: the list
 * re-rendering meanwhile (another filter's answer arriving) must not put the applied value back over it.
 */
export function FilterText({ id, value, placeholder, onCommit }) {
  const [draft, setDraft] = useState(value);
  useEffect(() => setDraft(value), [value]);
  return html`<input
    id=${id}
    type="search"
    value=${draft}
    onInput=${(event) => setDraft(event.currentTarget.value)}
    onChange=${onCommit}
    placeholder=${placeholder}
  />`;
}
