import { type TSchema, Type } from '@sinclair/typebox';
import { nullable, timestamp } from '../../http/schema-helpers.ts';
import { EVENT_KIND_NAMES, EVENT_KINDS, type EventKind } from './event-kinds.ts';
import { receivedContentFields, receivedSummaryFields } from './received-fields.ts';
import { reputationThresholds } from './reputation-fields.ts';

/**
 * An event kind, as an enum built from the one catalogue: a kind added there is named here (and in the
 * OpenAPI document, and in generated clients) without another edit.
 */
export const EventType = eventKindEnum({
  title: 'EventType',
  description: 'An event kind (GET /v1/event-kinds describes each).',
});

/** The event kinds enum with its own annotations (a default, a description), unnamed unless `title` says. */
export function eventKindEnum(options: { title?: string; description?: string; default?: EventKind }) {
  return Type.Unsafe<EventKind>({ type: 'string', enum: EVENT_KIND_NAMES, ...options });
}

// What every `email.*` event carries (src/modules/emails/event-data.ts builds it).
const emailFields = {
  email_id: Type.String({ description: 'The email (`msg_…`).' }),
  from: Type.String({ description: 'The From address as sent.' }),
  to: Type.Array(Type.String(), { description: 'The To addresses as sent.' }),
  subject: Type.String({ description: 'The subject as sent.' }),
  message_id: Type.Optional(
    Type.String({
      description:
        'The Message-ID header the email was sent with (`<…@…>`); absent from events stored before it was carried.',
    }),
  ),
  template_id: Type.Optional(Type.String({ description: 'The template sent (`tpl_…`), when one was.' })),
  template_version: Type.Optional(Type.Integer({ description: 'Its published version.' })),
  tags: Type.Record(Type.String(), Type.String(), { description: 'The tags given on send.' }),
  recipient: Type.String({ description: 'The recipient this event is about.' }),
  test: Type.Optional(
    Type.Boolean({ description: 'True on events sent by POST /v1/webhooks/{webhook_id}/test.' }),
  ),
};

const smtpResponse = Type.Optional(
  Type.String({ description: "The receiving server's reply (`250 2.0.0 OK`), when there was one." }),
);
const attemptError = Type.Optional(
  Type.String({ description: 'Why the attempt failed when no server replied (a timeout, no MX).' }),
);

const Bounce = Type.Object(
  {
    type: Type.Union(
      ['hard', 'soft', 'policy', 'undetermined'].map((value) => Type.Literal(value)),
      { description: 'Only `hard` bounces suppress the address.' },
    ),
    status: nullable(Type.String({ description: 'The enhanced status code (`5.1.1`).' })),
    diagnostic: nullable(Type.String({ description: "The server's reply or the report's diagnostic." })),
    reporting_mta: nullable(Type.String({ description: 'The server that reported the bounce.' })),
  },
  { title: 'Bounce' },
);

// What a report that came back to the return path said (src/modules/inbound/report-matching.ts): the
// events it causes carry these instead of an SMTP reply.
const inboundMessageId = Type.Optional(
  Type.String({
    description: 'The stored report this event was read from (`inb_…`), when it came from one.',
  }),
);
const reported = {
  status: nullable(Type.String({ description: 'The enhanced status code (`4.2.2`).' })),
  diagnostic: nullable(Type.String({ description: "The reporting server's words." })),
  reporting_mta: nullable(Type.String({ description: 'The server that sent the report.' })),
};

// What each kind adds to the email fields. Additional properties stay allowed: a receiver must ignore
// fields it does not know, so adding one is not a breaking change.
const EXTRA_FIELDS: Partial<Record<EventKind, Record<string, TSchema>>> = {
  'email.sent': { smtp_response: smtpResponse, error: attemptError },
  'email.delivered': {
    smtp_response: smtpResponse,
    error: attemptError,
    delivery: Type.Optional(
      Type.Object(
        {
          ...reported,
          remote_mta: nullable(Type.String({ description: 'The server that took the message.' })),
        },
        { description: 'What a delivery report said, when one reported the delivery.' },
      ),
    ),
    inbound_message_id: inboundMessageId,
  },
  'email.delivery_delayed': {
    smtp_response: smtpResponse,
    error: attemptError,
    delay: Type.Optional(
      Type.Object(reported, { description: 'What a delay report said, when one reported the delay.' }),
    ),
    inbound_message_id: inboundMessageId,
  },
  'email.bounced': {
    smtp_response: smtpResponse,
    error: attemptError,
    bounce: Bounce,
    inbound_message_id: inboundMessageId,
  },
  'email.failed': { smtp_response: smtpResponse, error: attemptError },
  'email.complained': {
    smtp_response: smtpResponse,
    complaint: Type.Optional(
      Type.Object(
        {
          feedback_type: Type.String({ description: "The report's Feedback-Type (`abuse`)." }),
          user_agent: nullable(Type.String({ description: 'What produced the report.' })),
        },
        { description: 'The complaint report (ARF), when one reported the complaint.' },
      ),
    ),
    inbound_message_id: inboundMessageId,
  },
  'email.suppressed': {
    suppression: Type.Object({
      reason: Type.String({ description: 'Why the address is suppressed (`hard_bounce`, `complaint`…).' }),
      created_at: timestamp('When it was suppressed.'),
    }),
  },
  'email.opened': {
    open: Type.Object(
      {
        first: Type.Boolean({ description: "The recipient's first open of this email." }),
        user_agent: nullable(Type.String({ description: "The fetching client's User-Agent." })),
        automated: Type.Boolean({
          description:
            'A machine fetched it (a privacy proxy such as Apple Mail Privacy Protection, a scanner).',
        }),
      },
      { description: 'The open: the tracking pixel was fetched.' },
    ),
  },
  'email.clicked': {
    click: Type.Object(
      {
        url: Type.String({ description: 'The link that was clicked, exactly as sent.' }),
        user_agent: nullable(Type.String({ description: "The clicking client's User-Agent." })),
        automated: Type.Boolean({ description: 'A machine followed it (a link scanner).' }),
      },
      { description: 'The click on a tracked link.' },
    ),
  },
  'email.unsubscribed': {
    unsubscribe: Type.Object(
      {
        method: Type.Union([Type.Literal('one_click'), Type.Literal('mailto')], {
          description: '`one_click` (RFC 8058 POST) or `mailto` (a mail to the List-Unsubscribe address).',
        }),
      },
      { description: 'How the recipient unsubscribed.' },
    ),
  },
};

const domainStatus = Type.Union(
  ['pending', 'verified', 'failed'].map((value) => Type.Literal(value)),
  { description: '`pending`, `verified` or `failed`.' },
);

// What `domain.*` events carry (domainEventData in src/modules/domains/domains.service.ts).
const domainFields = {
  domain_id: Type.String({ description: 'The domain (`dom_…`).' }),
  name: Type.String({ description: 'The domain name, `acme.example`.' }),
  status: domainStatus,
  previous_status: domainStatus,
  challenge_required: Type.Boolean({
    description:
      'Another project holds the name, or a domain it is under, verified: this domain needs its `challenge` record to verify (true in the `domain.failed` of a domain another project took over).',
  }),
  receiving: Type.Boolean({ description: 'Whether it receives mail (inbound routes).' }),
  receiving_verified: Type.Boolean({
    description:
      'Whether its MX points at the inbound listener: with the domain verified, its routes take mail. A `domain.verified` is also emitted when this becomes true for a domain verified already.',
  }),
  records: Type.Array(
    Type.Object(
      {
        purpose: Type.String({
          description: '`challenge`, `dkim`, `return_path`, `receiving` or `dmarc`.',
        }),
        type: Type.String({ description: '`TXT` or `MX`.' }),
        name: Type.String({ description: 'Where the record is published.' }),
        value: Type.String({ description: 'What it must hold.' }),
        status: domainStatus,
        found: nullable(Type.Array(Type.String()), 'What the last lookup found; null: nothing.'),
      },
      { title: 'DomainEventRecord' },
    ),
    { description: 'The DNS records and what the check found for each.' },
  ),
  test: emailFields.test,
};

// What `project.*` events carry (eventData in src/modules/reputation/reputation.service.ts).
const reputationLevel = (description: string) =>
  Type.Union(
    ['ok', 'warning', 'paused'].map((value) => Type.Literal(value)),
    { description },
  );
const reputationFields = {
  project_id: Type.String({ description: 'The project.' }),
  domain: nullable(Type.String(), 'The From domain judged; null: the project as a whole.'),
  state: reputationLevel('Its state now.'),
  previous_state: reputationLevel('Its state before.'),
  reason: nullable(
    Type.Union([Type.Literal('hard_bounce_rate'), Type.Literal('complaint_rate')]),
    'The rate that moved it (for a resume: the one that had paused it).',
  ),
  hard_bounce_rate: nullable(
    Type.Number(),
    'Hard bounces per sent or bounced message over the window; null below the minimum volume.',
  ),
  complaint_rate: nullable(
    Type.Number(),
    'Complaints per sent message over the window; null below the minimum volume.',
  ),
  sent: Type.Integer({ description: 'Messages sent over the window (since the last resume).' }),
  bounced: Type.Integer({ description: 'Messages bounced, of any type.' }),
  bounced_hard: Type.Integer({ description: 'Hard bounces.' }),
  complained: Type.Integer({ description: 'Complaints.' }),
  holds: Type.Union(
    ['nothing', 'broadcasts', 'all'].map((value) => Type.Literal(value)),
    { description: 'What a send from it meets now: nothing refused, broadcasts refused, or every send.' },
  ),
  thresholds: reputationThresholds({
    title: 'ReputationThresholds',
    description: 'The configured window, thresholds and minimum volumes.',
  }),
  resumed_by: Type.Optional(
    Type.Union([Type.Literal('api'), Type.Literal('operator')], {
      description: 'In `project.sending_resumed`: a full_access key (`api`) or the CLI (`operator`).',
    }),
  ),
  test: emailFields.test,
};

// What `destination.*` events carry (src/modules/destinations/destination-events.ts).
const destinationFields = {
  destination: Type.String({
    description:
      "The destination's key: a provider's name (`google`), or its MX hosts sorted and joined with commas.",
  }),
  source: Type.String({ description: 'The sending source (`default`: every worker of the machine).' }),
  provider: nullable(Type.String(), "The built-in provider it rolls up to; null: a domain's own servers."),
  suspended_until: nullable(timestamp('Until when its mail waits; null in `destination.resumed`.')),
  rate_per_minute: nullable(Type.Integer({ description: 'Messages a minute it takes now; null: no limit.' })),
  connections: Type.Integer({ description: 'Connections at once it takes now.' }),
  last_deferral: nullable(
    Type.String(),
    'The reply that slowed it (in `destination.resumed`: the last one).',
  ),
  test: emailFields.test,
};

// What `contact.*` events carry (contactEventData in src/modules/contacts/contacts.service.ts): the fields of
// Resend's contact events, and the contact's properties.
const contactFields = {
  id: Type.String({ description: 'The contact (`con_…`).' }),
  email: Type.String({ description: 'Its address, lowercased.' }),
  first_name: nullable(Type.String()),
  last_name: nullable(Type.String()),
  unsubscribed: Type.Boolean({ description: 'True when it receives no broadcast.' }),
  properties: Type.Record(Type.String(), Type.Union([Type.String(), Type.Number()]), {
    description: 'Its property values, by key.',
  }),
  segment_ids: Type.Array(Type.String(), { description: 'The segments it is in (Resend’s field).' }),
  created_at: timestamp('When the contact was created.'),
  updated_at: timestamp('When the contact last changed.'),
  test: emailFields.test,
};

// What `contact.topics_updated` carries (the topics service's choose): the contact, and what changed.
const topicSubscription = (description: string) =>
  Type.Union([Type.Literal('opt_in'), Type.Literal('opt_out')], { description });
const contactTopicsFields = {
  id: contactFields.id,
  email: contactFields.email,
  topics: Type.Array(
    Type.Object({
      id: Type.String({ description: 'The topic (`top_…`).' }),
      subscription: topicSubscription('The subscription now.'),
      previous_subscription: topicSubscription(
        'The subscription before: the contact’s earlier choice, or the topic’s default.',
      ),
    }),
    { description: 'The topics whose subscription changed.' },
  ),
  test: emailFields.test,
};

// What `broadcast.sent` carries (broadcastSentData in src/modules/broadcasts/fan-out.ts).
const broadcastFields = {
  id: Type.String({ description: 'The broadcast (`bc_…`).' }),
  name: Type.String(),
  segment_id: nullable(Type.String()),
  topic_id: nullable(Type.String()),
  copies: Type.Integer({ description: 'Copies made (one email per contact it went to).' }),
  excluded: Type.Integer({ description: 'Contacts of the segment it did not go to.' }),
  sent_at: timestamp('When its last copy was made.'),
  test: emailFields.test,
};

/** The component name of a kind's webhook payload: `email.delivery_delayed` → `EmailDeliveryDelayedEvent`. */
export function eventSchemaName(kind: string): string {
  const words = kind.split(/[._]/).map((word) => word.charAt(0).toUpperCase() + word.slice(1));
  return `${words.join('')}Event`;
}

/** `email.received`: a received email (received-fields.ts), its bodies while they fit, never its attachments. */
function receivedPayloadSchema(): TSchema {
  const { id: _id, ...summary } = receivedSummaryFields;
  return envelope(
    'email.received',
    Type.Object(
      {
        received_email_id: Type.String({ description: 'The received email (`rcv_…`).' }),
        ...summary,
        ...receivedContentFields,
        truncated: Type.Boolean({
          description:
            'True when a body was left out (null) because text, reply text and html together pass 256 KiB: `url` has them whole.',
        }),
        url: Type.String({ description: 'Its path in the API: `/v1/received-emails/{id}`.' }),
        test: emailFields.test,
      },
      { description: 'The received email.' },
    ),
  );
}

/** The body POSTed to a webhook for `kind`: the envelope, with the kind's data. */
export function eventPayloadSchema(kind: EventKind): TSchema {
  // A kind of another family without fields declared here is described as an open object until it is: it
  // still appears, with its envelope, in the document (and the payload checks in the tests say so).
  if (kind === 'email.received') return receivedPayloadSchema();
  const data = kind.startsWith('email.')
    ? Type.Object({ ...emailFields, ...EXTRA_FIELDS[kind] }, { description: 'The email and recipient.' })
    : kind.startsWith('domain.')
      ? Type.Object(
          { ...domainFields, ...EXTRA_FIELDS[kind] },
          { description: 'The domain and its records.' },
        )
      : kind === 'contact.topics_updated'
        ? Type.Object(contactTopicsFields, { description: 'The contact and its changed subscriptions.' })
        : kind.startsWith('contact.')
          ? Type.Object(contactFields, { description: 'The contact.' })
          : kind.startsWith('project.')
            ? Type.Object(reputationFields, { description: 'The project or domain, its rates and state.' })
            : kind === 'broadcast.sent'
              ? Type.Object(broadcastFields, { description: 'The broadcast and what its fan-out made.' })
              : kind.startsWith('destination.')
                ? Type.Object(destinationFields, { description: 'The destination and its limits now.' })
                : Type.Object({ ...EXTRA_FIELDS[kind] }, { description: 'What the event is about.' });
  return envelope(kind, data);
}

const envelope = (kind: EventKind, data: TSchema) =>
  Type.Object(
    {
      id: Type.String({ description: 'The event (`evt_…`); also the `webhook-id` header.' }),
      type: Type.Literal(kind),
      created_at: timestamp('When the event happened.'),
      data,
    },
    { title: eventSchemaName(kind), description: EVENT_KINDS[kind] },
  );
