import { html } from '../html.js';
import { ListPage } from '../list.js';
import { Chip, Empty, formatTime, Link } from '../ui.js';

export function InboundPage({ search }) {
  return html`<h1>Inbound reports</h1>
    <p class="lead">
      Bounce, delay, delivery and complaint reports mailed back about your email, and what each one did.
    </p>
    <${ListPage}
      search=${search}
      base="/dashboard/inbound"
      endpoint="/inbound-messages"
      label="Pages of reports"
      empty=${html`<${Empty} title="No reports received">
        Reports arrive when <code>BOUNCE_DOMAIN</code> is set and its MX points at Postwire's inbound SMTP listener.
      </${Empty}>`}
    >
      ${({ items }) =>
        html`<div class="table-wrap">
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
        </div>`}
    </${ListPage}>`;
}
