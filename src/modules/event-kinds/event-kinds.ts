// The one catalogue of event kinds: webhook validation, the API listing and event emission all read it.
export const EVENT_KINDS = {
  'email.sent': 'The message was accepted for delivery by the next hop (the relay or the recipient server).',
  'email.delivered': "The recipient's mail server accepted the message.",
  'email.delivery_delayed': 'A temporary failure; delivery will be retried.',
  'email.bounced': 'The message was permanently rejected.',
  'email.failed': 'Delivery was abandoned after the last retry.',
  'email.complained': 'The recipient marked the message as spam.',
  'email.suppressed': 'The recipient is on the suppression list: the message was not sent to it.',
  'email.opened':
    'The recipient opened the message (its open pixel was fetched); `data.open` says whether it was the first and whether a machine fetched it.',
  'email.clicked':
    'The recipient clicked a tracked link; `data.click` has the URL and whether a machine (a link scanner) followed it.',
  'email.unsubscribed':
    "The recipient unsubscribed with one click (RFC 8058): the address is on the suppression list (reason `unsubscribe`); for a broadcast's copy, the contact is unsubscribed from the broadcast's topic or from all broadcasts instead (with its `contact.*` event).",
  'email.received':
    'A message arrived for an address of an inbound route whose action is `webhook`: its parsed fields, authentication results and bodies (up to 256 KiB; `truncated` says when they were left out). Attachments are listed, never carried: fetch them from the API.',
  'domain.verified':
    "A sending domain's DNS records match: mail from it is signed with its own key. Also emitted when a verified domain's receiving MX starts matching: its inbound routes take mail from then on.",
  'domain.failed':
    "A sending domain's DNS records stopped matching (or hold another value), or another project proved control of the name and took it over: mail from it is no longer signed with its key.",
  'project.warning':
    'A rate of the project, or of one of its sending domains, passed its warning threshold over the reputation window (GET /v1/reputation): `data` has the rates, the counts and the thresholds.',
  'project.sending_paused':
    'A rate of the project, or of one of its sending domains, passed its limit: its new broadcasts (and every send, with `pause_all_sending`) are refused with 403 `sending_paused` until a full_access key resumes it (POST /v1/reputation/resume) or the operator does (`postwire reputation resume`).',
  'project.sending_resumed':
    'A paused project or sending domain was resumed; its rates count again from then.',
  'contact.created': 'A contact was created (POST /v1/contacts, or the Resend SDK).',
  'contact.updated':
    'A contact changed: its names, `unsubscribed` or property values, by the API, an import, a broadcast copy’s unsubscribe or the person on their preference page (`data` is the contact as it is now).',
  'contact.deleted': 'A contact was deleted (`data` is the contact as it was).',
  'contact.topics_updated':
    "A contact's subscription to one or more topics changed (PATCH /v1/contacts/{id}/topics, the Resend SDK, a broadcast copy's unsubscribe, or the person on their preference page): `data.topics` has each topic whose subscription changed, with the subscription before.",
  'broadcast.sent':
    'Every copy of a broadcast was made (its fan-out ended): `data` has the broadcast, the copies made and the contacts excluded. Each copy then has its own `email.*` events.',
  'destination.suspended':
    'Direct delivery: a destination (a provider such as `google`, or a domain\'s own mail servers) answered "slow down" (a 421 or 4.7.x deferral, docs/api/destinations.md): its rate was lowered and its mail waits until `suspended_until`, without using attempts. Sent to every project with mail queued for it.',
  'destination.resumed':
    "Direct delivery: a suspended destination's back-off ended and its mail goes again, at the lowered rate that then creeps back up. Sent to every project with mail queued for it.",
} as const;

export type EventKind = keyof typeof EVENT_KINDS;

export const EVENT_KIND_NAMES = Object.keys(EVENT_KINDS) as EventKind[];

export function isEventKind(value: string): value is EventKind {
  return Object.hasOwn(EVENT_KINDS, value);
}
