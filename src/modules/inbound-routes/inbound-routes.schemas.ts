import { type Static, Type } from '@sinclair/typebox';
import { ROUTE_ACTIONS } from '../../db/schema.ts';
import { listEnvelope } from '../../http/list.ts';
import { apiObject, nullable } from '../../http/schema-helpers.ts';

const action = Type.Union(
  ROUTE_ACTIONS.map((value) => Type.Literal(value)),
  {
    description:
      '`webhook`: store it and emit `email.received` to the webhooks subscribed to it; `store`: store it, emit nothing; `reject`: refuse it at RCPT with a 550 saying `reject_message`.',
  },
);
const match = Type.String({
  minLength: 3,
  maxLength: 320,
  description:
    "Which recipients: an address (`support@acme.example`), every address of a domain (`*@acme.example`), or a local-part pattern where `*` stands for any characters (`reply-*@acme.example`). A sub-address (`support+1234@…`) matches as its base address, its tag given as `mailbox_hash`. The domain must be one of this project's domains; mail arrives once it is verified with `receiving` on and its MX published.",
});
const priority = Type.Integer({
  minimum: 0,
  maximum: 1_000_000,
  description: 'Routes are tried lowest first; the first that matches decides. Ties: the older route.',
});
const rejectMessage = Type.String({
  minLength: 1,
  maxLength: 200,
  pattern: '^[\\x20-\\x7e]+$',
  description: 'The text of the 550 a `reject` route answers (printable ASCII).',
});
const spamRejectScore = Type.Number({
  minimum: -1000,
  maximum: 1000,
  description:
    'With SPAMD_URL set: a message SpamAssassin scores at or above this is refused at DATA (550), not stored. Null: never.',
});

export const InboundRoute = apiObject(
  'inbound_route',
  'InboundRoute',
  {
    id: 'Identifier (`rte_…`).',
    created: 'When the route was created.',
    updated: 'When the route last changed.',
  },
  {
    match: Type.String({ description: 'The recipients it takes, as given (lowercased).' }),
    priority,
    action,
    reject_message: nullable(Type.String(), 'What a `reject` route answers; null for the others.'),
    spam_reject_score: nullable(Type.Number(), 'Refuse at or above this spam score; null: never.'),
    enabled: Type.Boolean({ description: 'A disabled route matches nothing.' }),
  },
);
export type InboundRouteView = Static<typeof InboundRoute>;

export const InboundRouteList = listEnvelope(InboundRoute);

export const CreateInboundRouteBody = Type.Object(
  {
    match,
    action,
    priority: Type.Optional({ ...priority, default: 100 }),
    reject_message: Type.Optional(nullable(rejectMessage)),
    spam_reject_score: Type.Optional(nullable(spamRejectScore)),
    enabled: Type.Optional(Type.Boolean({ default: true })),
  },
  { additionalProperties: false, title: 'CreateInboundRouteRequest' },
);
export type CreateInboundRouteInput = Static<typeof CreateInboundRouteBody>;

export const UpdateInboundRouteBody = Type.Object(
  {
    match: Type.Optional(match),
    action: Type.Optional(action),
    priority: Type.Optional(priority),
    reject_message: Type.Optional(nullable(rejectMessage)),
    spam_reject_score: Type.Optional(nullable(spamRejectScore)),
    enabled: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false, title: 'UpdateInboundRouteRequest' },
);
export type UpdateInboundRouteInput = Static<typeof UpdateInboundRouteBody>;

export const InboundRouteParams = Type.Object({
  id: Type.String({ description: 'The route identifier (`rte_…`).' }),
});

export const DeletedInboundRoute = Type.Object(
  { object: Type.Literal('inbound_route'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedInboundRoute' },
);
