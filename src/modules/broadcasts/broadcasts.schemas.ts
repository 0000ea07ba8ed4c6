import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { nullable, timestamp } from '../../http/schema-helpers.ts';

const addresses = (description: string) =>
  Type.Union(
    [Type.String({ maxLength: 998 }), Type.Array(Type.String({ maxLength: 998 }), { maxItems: 50 })],
    {
      description,
    },
  );

const content = {
  name: Type.String({
    minLength: 1,
    maxLength: 200,
    description: 'What the broadcast is called (not sent).',
  }),
  from: Type.String({
    minLength: 1,
    maxLength: 998,
    description: 'The sender (`Name <news@example.com>`); held to the sending-domain rules when it is sent.',
  }),
  reply_to: addresses('Reply-To address(es).'),
  subject: Type.String({
    minLength: 1,
    maxLength: 998,
    description: 'The subject (Liquid: `{{ contact.first_name }}`); with a template, overrides its subject.',
  }),
  preview_text: Type.String({
    maxLength: 500,
    description: 'The preview text (preheader) mail clients show after the subject; hidden in the message.',
  }),
  html: Type.String({ maxLength: 512 * 1024, description: 'The HTML body (Liquid).' }),
  text: Type.String({ maxLength: 512 * 1024, description: 'The plain-text body (Liquid).' }),
  template: Type.Object(
    {
      id: Type.String({ description: 'A template (`tpl_…`) with a published version: its content is sent.' }),
      variables: Type.Optional(
        Type.Record(Type.String(), Type.Unknown(), {
          description: 'Its variables, the same for every copy.',
        }),
      ),
    },
    { additionalProperties: false },
  ),
  segment_id: Type.String({ description: 'The segment (`seg_…`) whose contacts it goes to.' }),
  topic_id: Type.String({
    description:
      'A topic (`top_…`): only contacts subscribed to it receive the broadcast (by their choice, or the topic’s default opt-in); its unsubscribe link unsubscribes from the topic.',
  }),
  tracking: Type.Object(
    {
      opens: Type.Optional(Type.Boolean({ description: 'Track opens (default: TRACK_OPENS).' })),
      clicks: Type.Optional(Type.Boolean({ description: 'Track clicks (default: TRACK_CLICKS).' })),
    },
    { additionalProperties: false },
  ),
};

const schedule = Type.String({
  format: 'date-time',
  description: 'Send at this time (at most 30 days ahead) instead of now.',
});

export const CreateBroadcastBody = Type.Object(
  {
    name: Type.Optional(content.name),
    from: content.from,
    reply_to: Type.Optional(content.reply_to),
    subject: Type.Optional(content.subject),
    preview_text: Type.Optional(content.preview_text),
    html: Type.Optional(content.html),
    text: Type.Optional(content.text),
    template: Type.Optional(content.template),
    segment_id: content.segment_id,
    topic_id: Type.Optional(nullable(content.topic_id)),
    tracking: Type.Optional(content.tracking),
    send: Type.Optional(
      Type.Boolean({ description: 'Send it now (or at `scheduled_at`) rather than keep a draft.' }),
    ),
    scheduled_at: Type.Optional(schedule),
  },
  { additionalProperties: false, title: 'CreateBroadcastRequest' },
);
export type CreateBroadcastInput = Static<typeof CreateBroadcastBody>;

export const UpdateBroadcastBody = Type.Object(
  {
    name: Type.Optional(content.name),
    from: Type.Optional(content.from),
    reply_to: Type.Optional(content.reply_to),
    subject: Type.Optional(nullable(content.subject)),
    preview_text: Type.Optional(nullable(content.preview_text)),
    html: Type.Optional(nullable(content.html)),
    text: Type.Optional(nullable(content.text)),
    template: Type.Optional(nullable(content.template)),
    segment_id: Type.Optional(content.segment_id),
    topic_id: Type.Optional(nullable(content.topic_id)),
    tracking: Type.Optional(content.tracking),
  },
  { additionalProperties: false, title: 'UpdateBroadcastRequest' },
);
export type UpdateBroadcastInput = Static<typeof UpdateBroadcastBody>;

export const SendBroadcastBody = Type.Object(
  { scheduled_at: Type.Optional(schedule) },
  { additionalProperties: false, title: 'SendBroadcastRequest' },
);

const status = Type.Union(
  ['draft', 'scheduled', 'sending', 'sent', 'canceled'].map((value) => Type.Literal(value)),
  {
    description:
      '`draft` (editable), `scheduled` (to be sent at `scheduled_at`; can be canceled), `sending` (copies being made), `sent` (every copy made), `canceled`.',
  },
);

const count = (description: string) => Type.Integer({ description });

export const BroadcastCounts = Type.Object(
  {
    copies: count('Copies made (emails, one per contact it went to).'),
    excluded: count(
      'Contacts of the segment it did not go to (GET …/exclusions lists them with the reason).',
    ),
    queued: count('Copies not yet handed on (queued or delayed).'),
    sent: count('Copies handed on (to the relay or the recipient’s server), delivered or not.'),
    delivered: count('Copies the recipient’s server accepted.'),
    opened: count('Recipients who opened it (people, not machines).'),
    clicked: count('Recipients who clicked a link in it (people, not machines).'),
    bounced: count('Copies that bounced.'),
    complained: count('Recipients who marked it as spam.'),
    unsubscribed: count('Recipients who unsubscribed through it.'),
    failed: count('Copies given up on.'),
  },
  { title: 'BroadcastCounts' },
);

const fields = {
  object: Type.Literal('broadcast'),
  id: Type.String({ description: 'Broadcast identifier (`bc_…`).' }),
  name: Type.String(),
  from: nullable(Type.String()),
  reply_to: Type.Array(Type.String()),
  subject: nullable(Type.String()),
  preview_text: nullable(Type.String()),
  html: nullable(Type.String()),
  text: nullable(Type.String()),
  template_id: nullable(Type.String()),
  segment_id: nullable(Type.String()),
  topic_id: nullable(Type.String()),
  tracking: Type.Object({ opens: Type.Boolean(), clicks: Type.Boolean() }),
  status,
  scheduled_at: nullable(timestamp('When it is (was) to be sent.')),
  started_at: nullable(timestamp('When its first copies were made.')),
  sent_at: nullable(timestamp('When its last copy was made.')),
  created_at: timestamp('When it was created.'),
  updated_at: timestamp('When it last changed.'),
};

export const Broadcast = Type.Object({ ...fields, counts: BroadcastCounts }, { title: 'Broadcast' });
export type BroadcastView = Static<typeof Broadcast>;
export const BroadcastSummary = Type.Object(fields, { title: 'BroadcastSummary' });
export type BroadcastSummaryView = Static<typeof BroadcastSummary>;
export const BroadcastList = listEnvelope(BroadcastSummary);

export const BroadcastParams = Type.Object({ id: Type.String({ description: 'Broadcast id (`bc_…`).' }) });

export const BroadcastRef = Type.Object(
  { object: Type.Literal('broadcast'), id: Type.String() },
  { title: 'BroadcastRef' },
);
export const DeletedBroadcast = Type.Object(
  { object: Type.Literal('broadcast'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedBroadcast' },
);

/**
 * What can happen to a broadcast's copy once it is sent: the recipients' filters of this API and of the Resend
 * API (src/modules/resend-compat) both read them.
 */
export const SENT_COPY_OUTCOMES = [
  'sent',
  'delivered',
  'opened',
  'clicked',
  'bounced',
  'complained',
  'unsubscribed',
] as const;

/** A copy not sent yet, what happened to it once it was, or given up on. */
export const RECIPIENT_FILTERS = ['queued', ...SENT_COPY_OUTCOMES, 'failed'] as const;

export const RecipientsQuery = Type.Composite([
  ListQuery,
  Type.Object({
    status: Type.Optional(
      Type.Union(
        RECIPIENT_FILTERS.map((value) => Type.Literal(value)),
        { description: 'Only the recipients this happened to.' },
      ),
    ),
    email: Type.Optional(Type.String({ description: 'Only this address.' })),
  }),
]);

export const BroadcastRecipient = Type.Object(
  {
    object: Type.Literal('broadcast_recipient'),
    email_id: Type.String({ description: 'The copy (`msg_…`): GET /v1/emails/{id} shows it.' }),
    contact_id: nullable(Type.String()),
    email: Type.String(),
    status: Type.String({ description: 'The copy’s recipient status (`queued`, `sent`, `delivered`, …).' }),
    opens: Type.Integer({ description: 'Opens by people.' }),
    clicks: Type.Integer({ description: 'Clicks by people.' }),
    unsubscribed_at: nullable(timestamp('When the recipient unsubscribed through it.')),
  },
  { title: 'BroadcastRecipient' },
);
export const BroadcastRecipientList = listEnvelope(BroadcastRecipient);

export const ExclusionsQuery = ListQuery;
export const BroadcastExclusion = Type.Object(
  {
    object: Type.Literal('broadcast_exclusion'),
    contact_id: Type.String(),
    email: Type.String(),
    reason: Type.Union(
      [Type.Literal('unsubscribed'), Type.Literal('topic_opt_out'), Type.Literal('suppressed')],
      {
        description:
          '`unsubscribed` (the contact is unsubscribed from all broadcasts), `topic_opt_out` (not subscribed to the broadcast’s topic), `suppressed` (the address is on the suppression list).',
      },
    ),
    created_at: timestamp('When it was excluded.'),
  },
  { title: 'BroadcastExclusion' },
);
export const BroadcastExclusionList = listEnvelope(BroadcastExclusion);

export const ClickedLink = Type.Object(
  {
    object: Type.Literal('clicked_link'),
    url: Type.String(),
    clicks: Type.Integer({ description: 'Clicks on it (people and machines).' }),
    unique_clicks: Type.Integer({ description: 'Recipients who clicked it.' }),
  },
  { title: 'ClickedLink' },
);
export const ClickedLinkList = listEnvelope(ClickedLink);
