import { html, useState } from '../html.js';
import { api } from '../api.js';
import { FilterSelect, ListPage, useListFilters } from '../list.js';
import { Chip, Empty, ErrorBanner, formatTime, Json, Link, Notice, useAsync } from '../ui.js';

export function EventsPage({ search }) {
  const { filters, setFilters } = useListFilters(search, '/dashboard/events', ['type']);
  const kinds = useAsync(() => api('GET', '/event-kinds'), []);
  const [message, setMessage] = useState(null);
  const redeliver = async (event) => {
    setMessage(null);
    try {
      const result = await api('POST', `/events/${event.id}/redeliver`, {});
      const count = result.delivery_ids?.length;
      setMessage({
        text: `Event ${event.id} queued again${count !== undefined ? ` for ${count} webhook${count === 1 ? '' : 's'}` : ''}.`,
      });
    } catch (failure) {
      setMessage({ error: failure });
    }
  };
  return html`<h1>Events</h1>
    <p class="lead">Everything that happened to your email, as your webhooks receive it.</p>
    ${message?.text ? html`<${Notice} kind="ok">${message.text}</${Notice}>` : null}
    <${ErrorBanner} error=${message?.error} />
    <div class="inline-form">
      <${FilterSelect}
        id="event-type"
        label="Kind"
        name="type"
        filters=${filters}
        setFilters=${setFilters}
        options=${(kinds.data?.data ?? []).map((kind) => [kind.type, kind.type])}
      />
    </div>
    <${ListPage}
      search=${search}
      base="/dashboard/events"
      endpoint="/events"
      filters=${['type']}
      label="Pages of events"
      empty=${({ type }) =>
        type
          ? html`<${Empty} title=${`No ${type} events`}>Pick another kind, or any.</${Empty}>`
          : html`<${Empty} title="No events yet">Send an email (or a webhook test event) and its events appear here.</${Empty}>`}
    >
      ${({ items }) =>
        html`<ul class="event-list">
          ${items.map(
            (event) =>
              html`<li class="card">
                <div class="section-head">
                  <div>
                    <${Chip} status=${event.type} />
                    <span class="muted small">${formatTime(event.created_at)}</span>
                  </div>
                  <button data-writes type="button" class="button-small" onClick=${() => redeliver(event)}>
                    Redeliver
                  </button>
                </div>
                <p class="small">
                  <code>${event.id}</code>
                  ${event.data?.test ? html` · <span class="chip chip-muted">test event</span>` : null}
                  ${
                    // A webhook test event names a made-up email: no link to a page that does not exist.
                    event.data?.email_id && !event.data?.test
                      ? html` · <${Link} href=${`/dashboard/emails/${event.data.email_id}`}>${event.data.email_id}</${Link}>`
                      : null
                  }
                  ${event.data?.recipient ? html` · ${event.data.recipient}` : null}
                </p>
                <details>
                  <summary>Payload</summary>
                  <${Json} value=${event.data} />
                </details>
              </li>`,
          )}
        </ul>`}
    </${ListPage}>`;
}
