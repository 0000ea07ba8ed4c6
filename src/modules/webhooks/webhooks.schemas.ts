import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope } from '../../http/list.ts';
import { timestamp } from '../../http/schema-helpers.ts';
import { EventType } from '../event-kinds/event-payloads.ts';

export const WebhookFormat = Type.Union([Type.Literal('postwire'), Type.Literal('resend')], {
  title: 'WebhookFormat',
  description:
    "The payload deliveries have: `postwire` (`{ id, type, created_at, data }`, the event kinds' documented payloads) or `resend` (Resend's event names and `{ type, created_at, data }` payloads, for handlers written for Resend's webhooks; docs/api/resend.md). Both are signed the same way (Standard Webhooks).",
});

// The seed's fields (+ disabled_reason): the secret itself never appears, only whether one is stored.
export const Webhook = Type.Object(
  {
    id: Type.String({ description: 'Webhook identifier (`wh_…`).' }),
    url: Type.String({ description: 'URL that receives events.' }),
    enabled: Type.Boolean({ description: 'Whether the webhook is active.' }),
    events: Type.Array(EventType, { description: 'Event kinds the webhook is subscribed to.' }),
    format: WebhookFormat,
    created_at: timestamp('When the webhook was created.'),
    updated_at: timestamp('When the webhook last changed.'),
    has_secret: Type.Boolean({ description: 'True when a signing secret is stored.' }),
    disabled_reason: Type.Union([Type.String(), Type.Null()], {
      description:
        'Why the service disabled the webhook (the endpoint answered 410, or every attempt failed for days); null otherwise. Enabling it again clears this.',
    }),
    failing_since: Type.Union([timestamp('When its current failure streak began.'), Type.Null()], {
      description:
        'Since when every delivery attempt to it has failed (after days of it the service disables it and says so in disabled_reason); null while its deliveries succeed, or before any. A success or enabling it again clears this. Up to a second late.',
    }),
  },
  { title: 'Webhook' },
);

const url = Type.String({
  minLength: 1,
  maxLength: 2048,
  description: 'https URL that receives events (http and private hosts only when the operator allows them).',
});
const events = Type.Array(EventType, {
  minItems: 1,
  maxItems: 100,
  description: 'Event kinds to subscribe to (see GET /v1/event-kinds); duplicates are removed.',
});
const secret = Type.String({
  minLength: 1,
  maxLength: 512,
  description:
    'Write-only signing secret. `whsec_<base64>` is used as its base64 bytes (Standard Webhooks); any other string as its UTF-8 bytes.',
});

export const CreateWebhookBody = Type.Object(
  {
    url,
    events,
    enabled: Type.Optional(Type.Boolean({ default: true, description: 'Active flag; defaults to true.' })),
    format: Type.Optional(WebhookFormat),
    secret: Type.Optional(Type.Union([secret, Type.Null()])),
  },
  { additionalProperties: false, title: 'CreateWebhookRequest' },
);

export const UpdateWebhookBody = Type.Object(
  {
    url: Type.Optional(url),
    events: Type.Optional(events),
    enabled: Type.Optional(Type.Boolean()),
    format: Type.Optional(WebhookFormat),
    secret: Type.Optional(
      Type.Union([secret, Type.Null()], { description: 'A new signing secret, or null to remove it.' }),
    ),
  },
  { additionalProperties: false, title: 'UpdateWebhookRequest' },
);

export const WebhookParams = Type.Object({ webhook_id: Type.String() });

export const WebhookEnvelope = Type.Object({ data: Webhook }, { title: 'WebhookEnvelope' });
export const DeletedWebhookEnvelope = Type.Object(
  { data: Type.Object({ id: Type.String(), deleted: Type.Literal(true) }) },
  { title: 'DeletedWebhookEnvelope' },
);
export const WebhookList = listEnvelope(Webhook);

export type CreateWebhookInput = Static<typeof CreateWebhookBody>;
export type UpdateWebhookInput = Static<typeof UpdateWebhookBody>;
export type WebhookView = Static<typeof Webhook>;
