import { Type } from '@sinclair/typebox';
import { nullable, timestamp } from '../../http/schema-helpers.ts';

// The fields of a received email, defined once: the API's received-email views
// (src/modules/inbound/received.schemas.ts) and the `email.received` payload (event-payloads.ts) are built from
// them.

const Address = Type.Object(
  {
    address: Type.String({ description: 'The address as written.' }),
    name: Type.String({ description: "The display name, decoded ('' when none)." }),
  },
  { title: 'ReceivedAddress' },
);

export const ReceivedAttachment = Type.Object(
  {
    index: Type.Integer({ description: 'Its position: GET …/attachments/{index} answers its bytes.' }),
    filename: nullable(Type.String(), 'Its file name, decoded; null when it has none.'),
    content_type: Type.String({ description: 'Its MIME type.' }),
    size: Type.Integer({ description: 'Its decoded size in bytes.' }),
    content_id: nullable(Type.String(), 'Its Content-ID (for `cid:` references in the html).'),
    disposition: Type.Union([Type.Literal('attachment'), Type.Literal('inline')]),
    sha256: Type.String({ description: 'The SHA-256 of its decoded bytes, in hex.' }),
  },
  // Untitled: the API's responses and the webhooks section render its nullable fields differently, so one
  // named component could not serve both.
  {},
);

const Authentication = Type.Object(
  {
    spf: Type.Object({
      result: Type.String({
        description: '`pass`, `fail`, `softfail`, `neutral`, `none`, `temperror` or `permerror`.',
      }),
      domain: nullable(Type.String(), 'The domain checked (MAIL FROM, or HELO for the null sender).'),
    }),
    dkim: Type.Array(
      Type.Object({
        domain: Type.String({ description: 'Its `d=`.' }),
        selector: nullable(Type.String()),
        result: Type.String({ description: '`pass`, `fail`, `neutral`, `temperror`, `permerror`, …' }),
        aligned: Type.Boolean({ description: 'Whether `d=` is aligned with the From domain (relaxed).' }),
      }),
      { description: 'Each DKIM signature and its result.' },
    ),
    dmarc: nullable(
      Type.Object({
        result: Type.String({ description: '`pass`, `fail`, `none`, …' }),
        policy: nullable(
          Type.String(),
          "The From domain's published policy (`none`, `quarantine`, `reject`).",
        ),
        domain: nullable(Type.String()),
      }),
    ),
    arc: nullable(Type.Object({ result: Type.String() })),
    header: Type.String({ description: 'The Authentication-Results header these make, for people.' }),
  },
  {
    description:
      'SPF (for the connecting address and MAIL FROM), DKIM, DMARC and ARC, computed when the message was read; null when they could not be.',
  },
);

const Spam = Type.Object(
  {
    score: Type.Number(),
    threshold: Type.Number({ description: "spamd's required score." }),
    flagged: Type.Boolean({ description: 'Whether the score reached the threshold.' }),
  },
  {
    title: 'SpamVerdict',
    description: "SpamAssassin's verdict (spamd, with SPAMD_URL set); null when the message was not scored.",
  },
);

/** What every received email shows, in lists, in its own view and in `email.received`. */
export const receivedSummaryFields = {
  id: Type.String({ description: 'Identifier (`rcv_…`).' }),
  route_id: nullable(Type.String(), 'The route that took it (`rte_…`).'),
  recipient: Type.String({ description: 'The envelope recipient it was accepted for (lowercased).' }),
  mailbox_hash: nullable(
    Type.String(),
    'The tag of a sub-address (`1234` of `support+1234@…`); null when there is none.',
  ),
  received_at: timestamp('When the listener stored it, before answering 250.'),
  status: Type.Union([Type.Literal('received'), Type.Literal('unreadable')], {
    description:
      '`received`, or `unreadable`: stored whole (GET …/raw) but its MIME could not be read within the limits; `unreadable_reason` says why.',
  }),
  mail_from: Type.String({ description: 'The envelope sender; empty for the null sender.' }),
  from: nullable(Address, 'The From header.'),
  subject: nullable(Type.String(), 'The subject, decoded.'),
  message_id: nullable(Type.String(), 'Its Message-ID, with its angle brackets.'),
  in_reply_to_email_id: nullable(
    Type.String(),
    "The email of this project it replies to (`msg_…`): its In-Reply-To or References names that email's Message-ID.",
  ),
  in_reply_to_recipient: nullable(Type.String(), 'The recipient of that email the reply comes from.'),
  size: Type.Integer({ description: 'Its size in bytes.' }),
  attachment_count: Type.Integer(),
  authentication: nullable(Authentication),
  spam: nullable(Spam),
};

/** What the message says, in its own view and (bodies up to a size) in `email.received`. */
export const receivedContentFields = {
  unreadable_reason: nullable(Type.String(), 'Why it could not be read; null when it was.'),
  to: Type.Array(Address),
  cc: Type.Array(Address),
  reply_to: Type.Array(Address),
  date: nullable(timestamp('Its Date header.')),
  in_reply_to: nullable(Type.String(), 'Its In-Reply-To.'),
  references: Type.Array(Type.String(), { description: 'Its References, oldest first.' }),
  text: nullable(Type.String(), 'The plain-text body (from the html when it has none).'),
  html: nullable(Type.String(), 'The html body as sent: render it sandboxed, never as trusted html.'),
  reply_text: nullable(
    Type.String(),
    'The text without the quoted history and signature (best effort): the reply itself.',
  ),
  attachments: Type.Array(ReceivedAttachment, {
    description: 'Metadata only; GET /v1/received-emails/{id}/attachments/{index} answers the bytes.',
  }),
};
