import { type Static, Type } from '@sinclair/typebox';
import { ListQuery, listEnvelope } from '../../http/list.ts';
import { timeFilter } from '../../http/schema-helpers.ts';
import { receivedContentFields, receivedSummaryFields } from '../event-kinds/received-fields.ts';

// A received email as the API and the `email.received` webhook show it (received-view.ts builds both).

export const ReceivedEmailSummary = Type.Object(
  { object: Type.Literal('received_email'), ...receivedSummaryFields },
  { title: 'ReceivedEmailSummary' },
);

export const ReceivedEmail = Type.Object(
  {
    object: Type.Literal('received_email'),
    ...receivedSummaryFields,
    ...receivedContentFields,
    headers: Type.Array(Type.Object({ name: Type.String(), value: Type.String() }), {
      description: 'The top-level header fields in order, as received (unfolded).',
    }),
  },
  { title: 'ReceivedEmail' },
);
export type ReceivedEmailView = Static<typeof ReceivedEmail>;
export type ReceivedEmailSummaryView = Static<typeof ReceivedEmailSummary>;

export const ReceivedEmailList = listEnvelope(ReceivedEmailSummary, 'ReceivedEmailList');

export const ReceivedEmailListQuery = Type.Object(
  {
    ...ListQuery.properties,
    route_id: Type.Optional(Type.String({ maxLength: 64, description: 'Only what this route took.' })),
    recipient: Type.Optional(
      Type.String({ maxLength: 320, description: 'Only what was received for this address (any case).' }),
    ),
    since: Type.Optional(timeFilter('Received at or after this time.')),
    until: Type.Optional(timeFilter('Received before this time.')),
  },
  { additionalProperties: false },
);

export const ReceivedEmailParams = Type.Object({
  id: Type.String({ description: 'The received email (`rcv_…`).' }),
});

export const ReceivedAttachmentParams = Type.Object({
  id: Type.String({ description: 'The received email (`rcv_…`).' }),
  index: Type.Integer({ minimum: 0, maximum: 100_000, description: 'The attachment’s `index`.' }),
});
