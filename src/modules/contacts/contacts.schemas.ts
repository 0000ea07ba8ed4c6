import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import {
  answeredStringOrNumber,
  answeredStringOrNumberOrNull,
  nullable,
  apiObject,
  timestamp,
} from '../../http/schema-helpers.ts';
import { RECIPIENT_STATUSES } from '../../db/schema.ts';

/** The most properties a project declares: every contact read and write looks them all up. */
export const MAX_CONTACT_PROPERTIES = 100;
export const MAX_NAME_LENGTH = 200;
/** The longest string value (and string fallback) of a property. */
export const MAX_PROPERTY_STRING = 2000;

/**
 * A property key: what personalization names (`{{{plan}}}`), Resend's rule (letters, digits and `_`, up to
 * 50). Never the shape of a property id, so `{id}` in a path is an id or a key without ambiguity.
 */
export const PROPERTY_KEY_PATTERN = '^(?!cprop_)[A-Za-z0-9_]{1,50}$';

const email = Type.String({
  minLength: 3,
  maxLength: 320,
  description: 'The email address, `ada@example.org`; stored lowercased, unique in the project in any case.',
});
const name = (which: string) =>
  Type.String({ maxLength: MAX_NAME_LENGTH, description: `The contact's ${which} name.` });
const unsubscribed = Type.Boolean({
  description: 'True when the contact receives no broadcast at all (transactional sends are not affected).',
});
const propertyValue = Type.Union([Type.String({ maxLength: MAX_PROPERTY_STRING }), Type.Number()], {
  description: 'A string or a number, as the property is declared.',
});
const propertyValues = (nulls: string) =>
  Type.Record(Type.String(), nullable(propertyValue), {
    description: `Values of declared properties (POST /v1/contact-properties), by key; each of the declared type. An undeclared key is refused (422). ${nulls}`,
  });

export const Contact = apiObject(
  'contact',
  'Contact',
  {
    id: 'Contact identifier (`con_…`).',
    created: 'When the contact was created.',
    updated: 'When the contact last changed.',
  },
  {
    email: Type.String({ description: 'The address, lowercased.' }),
    first_name: nullable(Type.String(), 'First name, or null.'),
    last_name: nullable(Type.String(), 'Last name, or null.'),
    unsubscribed,
    properties: Type.Record(Type.String(), answeredStringOrNumber('A string or a number, as declared.'), {
      description:
        'The values set, by property key (a property without a value is absent: its fallback applies).',
    }),
  },
);
export type ContactView = Static<typeof Contact>;
export const ContactList = listEnvelope(Contact);

export const CreateContactBody = Type.Object(
  {
    email,
    first_name: Type.Optional(nullable(name('first'))),
    last_name: Type.Optional(nullable(name('last'))),
    unsubscribed: Type.Optional({ ...unsubscribed, default: false }),
    properties: Type.Optional(propertyValues('A null value is the same as none.')),
  },
  { additionalProperties: false, title: 'CreateContactRequest' },
);
export type CreateContactInput = Static<typeof CreateContactBody>;

export const UpdateContactBody = Type.Object(
  {
    first_name: Type.Optional(nullable(name('first'), 'A new first name, or null to clear it.')),
    last_name: Type.Optional(nullable(name('last'), 'A new last name, or null to clear it.')),
    unsubscribed: Type.Optional(unsubscribed),
    properties: Type.Optional(
      propertyValues('Only the keys sent change; null removes a value (its fallback applies again).'),
    ),
  },
  { additionalProperties: false, title: 'UpdateContactRequest' },
);
export type UpdateContactInput = Static<typeof UpdateContactBody>;

export const ContactListQuery = Type.Object(
  {
    ...ListQuery.properties,
    unsubscribed: Type.Optional(
      Type.Boolean({ description: 'Only the contacts that are (or are not) unsubscribed.' }),
    ),
    email_prefix: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 320,
        description: 'Only the contacts whose address starts with this, in any case (`ada`, `ada@exa`).',
      }),
    ),
    property: Type.Optional(
      Type.String({
        minLength: 2,
        maxLength: 60 + MAX_PROPERTY_STRING,
        pattern: '^[A-Za-z0-9_]{1,50}:',
        description:
          'Only the contacts whose property has this value, as `key:value` (`plan:pro`, `seats:5`); the value is read as the property’s type.',
      }),
    ),
    segment_id: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 100,
        description: 'Only the contacts in this segment (`seg_…`).',
      }),
    ),
    topic_id: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 100,
        description:
          'Only the contacts subscribed to this topic (`top_…`): opted in, or without a choice when the topic’s default is `opt_in`.',
      }),
    ),
  },
  { additionalProperties: false },
);
export type ContactListFilter = Omit<Static<typeof ContactListQuery>, 'limit' | 'after' | 'before'>;

const { limit: _limit, after: _after, before: _before, ...filters } = ContactListQuery.properties;
export const ContactExportQuery = Type.Object(filters, { additionalProperties: false });

export const ContactParams = Type.Object({
  id: Type.String({ description: 'Contact id (`con_…`) or email address (any case).' }),
});

export const DeletedContact = Type.Object(
  { object: Type.Literal('contact'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedContact' },
);

const propertyType = Type.Union([Type.Literal('string'), Type.Literal('number')], {
  description: 'What its values are: `string` or `number`. Fixed once declared.',
});
const fallbackDescription = 'What personalization uses for a contact without a value, or null.';
const fallback = nullable(propertyValue, fallbackDescription);

export const ContactProperty = apiObject(
  'contact_property',
  'ContactProperty',
  {
    id: 'Property identifier (`cprop_…`).',
    created: 'When it was declared.',
    updated: 'When its fallback last changed.',
  },
  {
    key: Type.String({ description: 'Its key in contacts’ `properties` and in personalization.' }),
    type: propertyType,
    fallback_value: answeredStringOrNumberOrNull(fallbackDescription),
  },
);
export type ContactPropertyView = Static<typeof ContactProperty>;
export const ContactPropertyList = listEnvelope(ContactProperty);

export const CreateContactPropertyBody = Type.Object(
  {
    key: Type.String({
      pattern: PROPERTY_KEY_PATTERN,
      description:
        'Unique in the project: 1–50 letters, digits or `_` (case counts), not starting with `cprop_`.',
    }),
    type: propertyType,
    fallback_value: Type.Optional(fallback),
  },
  { additionalProperties: false, title: 'CreateContactPropertyRequest' },
);
export type CreateContactPropertyInput = Static<typeof CreateContactPropertyBody>;

export const UpdateContactPropertyBody = Type.Object(
  { fallback_value: fallback },
  { additionalProperties: false, title: 'UpdateContactPropertyRequest' },
);
export type UpdateContactPropertyInput = Static<typeof UpdateContactPropertyBody>;

export const ContactPropertyParams = Type.Object({
  id: Type.String({ description: 'Property id (`cprop_…`) or key.' }),
});

export const DeletedContactProperty = Type.Object(
  { object: Type.Literal('contact_property'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedContactProperty' },
);

export const ContactActivity = Type.Object(
  {
    object: Type.Literal('contact_activity'),
    id: Type.String({ description: 'The email (`msg_…`): GET /v1/emails/{id} shows all of it.' }),
    from: Type.String({ description: 'Its From.' }),
    subject: Type.String({ description: 'Its subject, as sent.' }),
    broadcast_id: nullable(
      Type.String(),
      'The broadcast it is a copy of (`bc_…`), or null for any other email.',
    ),
    status: Type.Union(
      RECIPIENT_STATUSES.map((status) => Type.Literal(status)),
      { description: 'Where it stands at the contact’s address (`queued`, `delivered`, `bounced`, …).' },
    ),
    created_at: timestamp('When the email was accepted.'),
    events: Type.Array(
      Type.Object({
        id: Type.String({ description: 'The event (`evt_…`): GET /v1/events/{id} has its data.' }),
        type: Type.String({ description: 'What happened: `email.delivered`, `email.opened`, …' }),
        created_at: timestamp('When.'),
      }),
      { description: 'What happened to it at the contact’s address, newest first.' },
    ),
  },
  { title: 'ContactActivity' },
);
export type ContactActivityView = Static<typeof ContactActivity>;
export const ContactActivityList = listEnvelope(ContactActivity);
