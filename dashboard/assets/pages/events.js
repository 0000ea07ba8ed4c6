import { html, useState } from '../html.js';
import { api, query } from '../api.js';
import { Chip, Empty, ErrorBanner, formatTime, Json, Link, Loading, Notice, Pager, useAsync } from '../ui.js';

export function EventsPage() {
  const [type, setType] = useState('');
  const [cursor, setCursor] = useState({});
  const kinds = useAsync(() => api('GET', '/event-kinds'), []);
  const events = useAsync(
    () => api('GET', `/events${query({ limit: 50, type, ...cursor })}`),
    [type, cursor],
  );
  const [message, setMessage] = useState(null);
  const items = events.data?.data ?? [];
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
    <${ErrorBanner} error=${message?.error ?? events.error} />
    <div class="inline-form">
      <label for="event-type">Kind</label>
      <select
        id="event-type"
        value=${type}
        onChange=${(e) => (setType(e.currentTarget.value), setCursor({}))}
      >
        <option value="">any</option>
        ${(kinds.data?.data ?? []).map((kind) => html`<option value=${kind.type}>${kind.type}</option>`)}
      </select>
    </div>
    ${events.loading && !events.data ? html`<${Loading} />` : null}
    ${events.data && items.length === 0 ? html`<${Empty} title="No events yet">Send an email (or a webhook test event) and its events appear here.</${Empty}>` : null}
    <ul class="event-list">
      ${items.map(
        (event) =>
          html`<li class="card">
            <div class="section-head">
              <div>
                <${Chip} status=${event.type} />
                <span class="muted small">${formatTime(event.created_at)}</span>
              </div>
              <button type="button" class="button-small" onClick=${() => redeliver(event)}>Redeliver</button>
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
    </ul>
    <${Pager} items=${items} hasMore=${events.data?.has_more} cursor=${cursor} onCursor=${setCursor} />`;
}
