import { html } from '../html.js';
import { ListPage } from '../list.js';
import { Chip, Empty, formatTime, Link, Table } from '../ui.js';

const REPORT_COLUMNS = [
  { label: 'Received', cell: (message) => formatTime(message.received_at) },
  { label: 'Kind', cell: (message) => String(message.kind).replaceAll('_', ' ') },
  { label: 'Status', cell: (message) => html`<${Chip} status=${message.status} />` },
  {
    label: 'Email',
    cell: (message) =>
      message.email_id
        ? html`<${Link} href=${`/dashboard/emails/${message.email_id}`}>${message.recipient ?? message.email_id}</${Link}>`
        : '—',
  },
  { label: 'Detail', class: 'small', cell: (message) => message.detail ?? message.subject ?? '' },
];

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
      ${({ items }) => html`<${Table} rows=${items} columns=${REPORT_COLUMNS} />`}
    </${ListPage}>`;
}
