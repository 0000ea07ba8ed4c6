import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope } from '../../http/list.ts';
import { apiObject, nullable, timestamp } from '../../http/schema-helpers.ts';

export const MAX_EVENT_NAME = 100;
/** The most fields a payload schema declares. */
export const MAX_SCHEMA_FIELDS = 50;

export const EVENT_NAME_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._:-]*$';

const eventName = (description: string) =>
  Type.String({ minLength: 1, maxLength: MAX_EVENT_NAME, pattern: EVENT_NAME_PATTERN, description });

const fieldType = Type.Union(
  [Type.Literal('string'), Type.Literal('number'), Type.Literal('boolean'), Type.Literal('date')],
  { description: '`string`, `number`, `boolean` or `date` (an ISO 8601 date or date-time).' },
);
const schemaMap = nullable(
  Type.Record(Type.String({ minLength: 1, maxLength: 100 }), fieldType, { maxProperties: MAX_SCHEMA_FIELDS }),
  'Payload field → its type; a payload sent with this event must give each field it carries of that type. Null: any payload.',
);
export type EventSchemaMap = Record<string, 'string' | 'number' | 'boolean' | 'date'>;

export const CustomEvent = apiObject(
  'custom_event',
  'CustomEvent',
  {
    id: 'Custom event identifier (`cev_…`).',
    created: 'When the event name was declared.',
    updated: 'When its schema last changed.',
  },
  {
    name: Type.String({ description: 'The event’s name (`user.signed_up`).' }),
    schema: nullable(Type.Record(Type.String(), Type.String()), 'Payload field → its type, or null.'),
  },
);
export type CustomEventView = Static<typeof CustomEvent>;
export const CustomEventList = listEnvelope(CustomEvent);

export const CreateCustomEventBody = Type.Object(
  {
    name: eventName(
      'The event’s name: letters, digits and `._:-`, starting with a letter or digit (`user.signed_up`). Unique in the project; not one of the delivery event kinds (`email.sent`…).',
    ),
    schema: Type.Optional(schemaMap),
  },
  { additionalProperties: false, title: 'CreateCustomEventRequest' },
);
export type CreateCustomEventInput = Static<typeof CreateCustomEventBody>;

export const UpdateCustomEventBody = Type.Object(
  { schema: schemaMap },
  { additionalProperties: false, title: 'UpdateCustomEventRequest' },
);
export type UpdateCustomEventInput = Static<typeof UpdateCustomEventBody>;

export const CustomEventParams = Type.Object({
  id: Type.String({ description: 'Custom event id (`cev_…`) or name.' }),
});

export const DeletedCustomEvent = Type.Object(
  { object: Type.Literal('custom_event'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedCustomEvent' },
);

export const SendCustomEventBody = Type.Object(
  {
    event: eventName(
      'The event’s name. It need not be declared; when it is, the payload is checked against its schema.',
    ),
    contact_id: Type.Optional(
      Type.String({ description: 'The contact it happened to (`con_…`); or `email`.' }),
    ),
    email: Type.Optional(
      Type.String({ minLength: 3, maxLength: 320, description: 'The contact’s address; or `contact_id`.' }),
    ),
    create_contact: Type.Optional(
      Type.Boolean({
        default: false,
        description:
          'With `email`: create the contact when the project has none with that address (else 404).',
      }),
    ),
    payload: Type.Optional(
      Type.Record(Type.String(), Type.Unknown(), {
        description: 'What happened, as a JSON object: automations read it (conditions, email variables).',
      }),
    ),
  },
  { additionalProperties: false, title: 'SendCustomEventRequest' },
);
export type SendCustomEventInput = Static<typeof SendCustomEventBody>;

export const CustomEventSend = Type.Object(
  {
    object: Type.Literal('custom_event_send'),
    id: Type.String({ description: 'This sending’s identifier (`cevs_…`).' }),
    event: Type.String({ description: 'The event’s name.' }),
    contact_id: Type.String({ description: 'The contact it was sent for.' }),
    contact_created: Type.Boolean({ description: 'True when the contact was created by this send.' }),
    payload: Type.Record(Type.String(), Type.Unknown()),
    runs_started: Type.Integer({
      description: 'Automation runs it started (one per enabled automation it triggers).',
    }),
    runs_resumed: Type.Integer({ description: 'Runs of the contact that waited for this event and go on.' }),
    created_at: timestamp('When it was sent.'),
  },
  { title: 'CustomEventSend' },
);
export type CustomEventSendView = Static<typeof CustomEventSend>;
