import { html, useState } from '../html.js';
import { api, query } from '../api.js';
import { Chip, Empty, ErrorBanner, formatTime, Link, Loading, Pager, useAsync } from '../ui.js';

export function InboundPage() {
  const [cursor, setCursor] = useState({});
  const list = useAsync(() => api('GET', `/inbound-messages${query({ limit: 50, ...cursor })}`), [cursor]);
  const items = list.data?.data ?? [];
  return html`<h1>Inbound reports</h1>
    <p class="lead">
      Bounce, delay, delivery and complaint reports mailed back about your email, and what each one did.
    </p>
    <${ErrorBanner} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} />` : null}
    ${
      list.data && items.length === 0
        ? html`<${Empty} title="No reports received">
          Reports arrive when <code>BOUNCE_DOMAIN</code> is set and its MX points at Postwire's inbound SMTP listener.
        </${Empty}>`
        : null
    }
    ${
      items.length
        ? html`<div class="table-wrap">
            <table>
              <thead>
                <tr>
                  <th>Received</th>
                  <th>Kind</th>
                  <th>Status</th>
                  <th>Email</th>
                  <th>Detail</th>
                </tr>
              </thead>
              <tbody>
                ${items.map(
                  (message) =>
                    html`<tr>
                      <td data-label="Received">${formatTime(message.received_at)}</td>
                      <td data-label="Kind">${String(message.kind).replaceAll('_', ' ')}</td>
                      <td data-label="Status"><${Chip} status=${message.status} /></td>
                      <td data-label="Email">
                        ${message.email_id ? html`<${Link} href=${`/dashboard/emails/${message.email_id}`}>${message.recipient ?? message.email_id}</${Link}>` : '—'}
                      </td>
                      <td data-label="Detail" class="small">${message.detail ?? message.subject ?? ''}</td>
                    </tr>`,
                )}
              </tbody>
            </table>
          </div>`
        : null
    }
    <${Pager} items=${items} hasMore=${list.data?.has_more} cursor=${cursor} onCursor=${setCursor} />`;
}
