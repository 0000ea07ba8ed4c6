import { html, render, useEffect, useRef, useState } from './html.js';
import { api, ApiError, onUnauthorized, session } from './api.js';
import { ErrorBanner, Field, Link, navigate, useLocation } from './ui.js';
import { OverviewPage } from './pages/overview.js';
import { EmailsPage, EmailPage } from './pages/emails.js';
import { WebhooksPage, WebhookPage } from './pages/webhooks.js';
import { TemplatesPage, TemplatePage } from './pages/templates.js';
import { SuppressionsPage } from './pages/suppressions.js';
import { DomainPage, DomainsPage } from './pages/domains.js';
import { EventsPage } from './pages/events.js';
import { InboundPage } from './pages/inbound.js';
import { ReceivedEmailPage, ReceivedPage, RoutesPage } from './pages/received.js';
import { KeysPage } from './pages/keys.js';
import { BroadcastPage, BroadcastsPage } from './pages/broadcasts.js';
import { ContactPage, ContactsPage } from './pages/contacts.js';
import { SegmentsPage, TopicsPage } from './pages/segments.js';
import { AutomationPage, AutomationRunPage, AutomationsPage } from './pages/automations.js';
import { ReadOnlyBanner, unusableKeyMessage, useKeyPermission } from './permission.js';

const NAV = [
  ['/dashboard/', 'Overview'],
  ['/dashboard/emails', 'Emails'],
  ['/dashboard/webhooks', 'Webhooks'],
  ['/dashboard/templates', 'Templates'],
  ['/dashboard/contacts', 'Audience'],
  ['/dashboard/events', 'Events'],
  ['/dashboard/suppressions', 'Suppressions'],
  ['/dashboard/domains', 'Domains'],
  ['/dashboard/received', 'Received'],
  ['/dashboard/inbound', 'Inbound'],
  ['/dashboard/keys', 'Keys'],
];

/** The page for a path: `/dashboard/<section>/<id>`; `/` is the overview. */
function route(path) {
  const parts = path
    .replace(/^\/dashboard\/?/, '')
    .split('/')
    .filter(Boolean)
    .map(decodeURIComponent);
  const [section = '', id, sub, subId] = parts;
  switch (section) {
    case '':
      return { section: '/dashboard/', page: OverviewPage };
    case 'emails':
      return { section: '/dashboard/emails', page: id ? EmailPage : EmailsPage, id };
    case 'webhooks':
      return { section: '/dashboard/webhooks', page: id ? WebhookPage : WebhooksPage, id };
    case 'templates':
      return { section: '/dashboard/templates', page: id ? TemplatePage : TemplatesPage, id };
    // Contacts, segments, topics and broadcasts are one section in the top bar (its tabs lead between them):
    // two more sections would not fit the bar's one line at 1280 px.
    case 'broadcasts':
      return { section: '/dashboard/contacts', page: id ? BroadcastPage : BroadcastsPage, id };
    case 'contacts':
      return { section: '/dashboard/contacts', page: id ? ContactPage : ContactsPage, id };
    case 'segments':
      return { section: '/dashboard/contacts', page: SegmentsPage };
    // An automation mails contacts: it is a tab of Audience too; its run is `/automations/<id>/runs/<run>`.
    case 'automations':
      if (id && sub === 'runs' && subId)
        return { section: '/dashboard/contacts', page: AutomationRunPage, id, runId: subId };
      return { section: '/dashboard/contacts', page: id ? AutomationPage : AutomationsPage, id };
    case 'topics':
      return { section: '/dashboard/contacts', page: TopicsPage };
    case 'events':
      return { section: '/dashboard/events', page: EventsPage };
    case 'suppressions':
      return { section: '/dashboard/suppressions', page: SuppressionsPage };
    case 'domains':
      return { section: '/dashboard/domains', page: id ? DomainPage : DomainsPage, id };
    case 'received':
      return { section: '/dashboard/received', page: id ? ReceivedEmailPage : ReceivedPage, id };
    case 'routes':
      // Reached from the Received page (its link, its crumbs): one section in the top bar for both.
      return { section: '/dashboard/received', page: RoutesPage };
    case 'inbound':
      return { section: '/dashboard/inbound', page: InboundPage };
    case 'keys':
      return { section: '/dashboard/keys', page: KeysPage };
    default:
      return { section: null, page: NotFound };
  }
}

function NotFound() {
  return html`<h1>Not found</h1>
    <p>There is no such page. <${Link} href="/dashboard/">Go to the overview</${Link}>.</p>`;
}

function SignIn({ reason, onSignedIn }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      // The key and what it may do: a sending_access key cannot read, so it cannot use the dashboard.
      await api('GET', '/api-keys/current', undefined, { key: key.trim() });
      session.signIn(key.trim());
      setKey('');
      onSignedIn();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const errors =
    error instanceof ApiError && (error.status === 401 || error.status === 403)
      ? { key: unusableKeyMessage(error) ?? error.message }
      : {};
  return html`<main class="signin">
    <img src="/dashboard/assets/logo.svg" alt="Postwire" width="160" height="32" />
    <h1>Sign in</h1>
    <p class="muted">
      Use an API key of the project you want to see. It is kept in this tab only (sessionStorage) and
      sent to this server in the Authorization header, never in a URL.
    </p>
    ${reason ? html`<p class="banner banner-info" role="status">${reason}</p>` : null}
    ${error && !errors.key ? html`<${ErrorBanner} error=${error} />` : null}
    <form onSubmit=${submit} novalidate>
      <${Field} label="API key" name="key" errors=${errors}>
        ${(props) =>
          html`<input
            ...${props}
            type="password"
            autocomplete="off"
            spellcheck="false"
            required
            value=${key}
            onInput=${(event) => setKey(event.currentTarget.value)}
          />`}
      </${Field}>
      <button type="submit" class="button-primary" disabled=${busy || !key.trim()}>
        ${busy ? 'Checking…' : 'Sign in'}
      </button>
    </form>
    <p class="muted small">
      No key? <code>npm run postwire -- keys create --project proj_… --name dashboard</code> prints one.
      The API reference is at <a href="/docs">/docs</a>.
    </p>
  </main>`;
}

function Shell({ onSignOut, onUnusable }) {
  const location = useLocation();
  const permission = useKeyPermission(onUnusable);
  const current = route(location.path);
  const Page = current.page;
  // Focus the page heading after navigating, so keyboard and screen-reader users land on the new page (not on
  // the first load: focus then starts at the top, with the skip link).
  const firstRender = useRef(true);
  useEffect(() => {
    const heading = document.querySelector('main h1');
    if (!firstRender.current) {
      heading?.setAttribute('tabindex', '-1');
      heading?.focus({ preventScroll: true });
    }
    firstRender.current = false;
    const title = heading?.textContent;
    document.title = title ? `${title} · Postwire` : 'Postwire';
  }, [location.path]);
  return html`<a class="skip" href="#main">Skip to content</a>
    <header class="topbar">
      <${Link} href="/dashboard/" class="brand"><img src="/dashboard/assets/logo.svg" alt="Postwire" width="128" height="26" /></${Link}>
      <nav class="nav" aria-label="Sections">
        ${NAV.map(
          ([href, label]) =>
            html`<${Link} href=${href} aria-current=${current.section === href ? 'page' : undefined}>${label}</${Link}>`,
        )}
        <a href="/docs">API reference</a>
      </nav>
      <button type="button" class="signout" onClick=${onSignOut}>Sign out</button>
    </header>
    <main id="main" tabindex="-1">
      ${permission === 'read_only' ? html`<${ReadOnlyBanner} />` : null}
      <${Page} id=${current.id} runId=${current.runId} search=${location.search} key=${location.path} />
    </main>`;
}

function App() {
  const [signedIn, setSignedIn] = useState(() => Boolean(session.key));
  const [reason, setReason] = useState(null);
  useEffect(
    () =>
      onUnauthorized(() => {
        session.signOut();
        setReason('The server no longer accepts this API key (revoked or unknown). Sign in with another.');
        setSignedIn(false);
      }),
    [],
  );
  const signOut = () => {
    session.signOut();
    setReason('Signed out. The key was removed from this tab.');
    setSignedIn(false);
    navigate('/dashboard/', { replace: true });
  };
  if (!signedIn)
    return html`<${SignIn} reason=${reason} onSignedIn=${() => (setReason(null), setSignedIn(true))} />`;
  const unusable = (message) => {
    session.signOut();
    setReason(message);
    setSignedIn(false);
  };
  return html`<${Shell} onSignOut=${signOut} onUnusable=${unusable} />`;
}

render(html`<${App} />`, document.getElementById('app'));
