import { type Static, Type } from '@sinclair/typebox';
import { INBOUND_STATUSES } from '../../db/schema.ts';
import { listEnvelope } from '../../http/list.ts';
import { nullable, timestamp } from '../../http/schema-helpers.ts';

const literals = <T extends string>(values: readonly T[], description: string) =>
  Type.Union(
    values.map((value) => Type.Literal(value)),
    { description },
  );

export const InboundMessage = Type.Object(
  {
    object: Type.Literal('inbound_message'),
    id: Type.String({ description: 'Identifier (`inb_…`), the cursor of the list.' }),
    received_at: timestamp('When the listener stored it, before answering 250.'),
    processed_at: nullable(timestamp('When it was read.')),
    mail_from: Type.String({
      description: 'The envelope sender; empty for the null sender `<>` that reports come from.',
    }),
    rcpt_to: Type.Array(Type.String(), { description: 'The envelope recipients: our return paths.' }),
    subject: nullable(Type.String({ description: 'Its Subject, cut to 200 characters.' })),
    size: Type.Integer({ description: 'Its size in bytes.' }),
    kind: nullable(
      literals(
        ['delivery_status', 'feedback', 'auto_reply', 'unsubscribe', 'dmarc_aggregate', 'unreadable'],
        "What it was read as: a delivery status notification (RFC 3464), a feedback report (RFC 5965), an auto-reply (RFC 3834), a mail to List-Unsubscribe's mailto, a DMARC aggregate report (RFC 7489, to `dmarc@<BOUNCE_DOMAIN>`), or nothing readable. Null until read.",
      ),
    ),
    status: literals(
      INBOUND_STATUSES,
      '`pending` (not read yet), `applied` (it changed a recipient and emitted an event), `no_change` (the recipient was already there), `unmatched`, `unverified` (it names a recipient by Message-ID without the signature of a provider that reports for it, and changed nothing), `ignored` (an auto-reply) or `unreadable`.',
    ),
    detail: nullable(Type.String({ description: 'How it was matched and what it changed, or why not.' })),
    email_id: nullable(Type.String({ description: 'The email it is about.' })),
    recipient: nullable(Type.String({ description: 'The recipient address it is about.' })),
  },
  { title: 'InboundMessage' },
);
export type InboundMessageView = Static<typeof InboundMessage>;

export const InboundMessageList = listEnvelope(InboundMessage);

export const InboundMessageParams = Type.Object({
  id: Type.String({ description: 'The message identifier (`inb_…`).' }),
});
