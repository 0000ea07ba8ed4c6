import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { apiObject } from '../../http/schema-helpers.ts';
import {
  CONDITION_TYPES,
  MAX_CONDITIONS,
  MAX_WITHIN_DAYS,
  PROPERTY_OPERATORS,
} from '../contacts/contact-filter.ts';

export const MAX_SEGMENT_NAME = 200;

const name = Type.String({
  minLength: 1,
  maxLength: MAX_SEGMENT_NAME,
  description: 'What the segment is called (`Beta testers`); need not be unique.',
});

const Condition = Type.Object(
  {
    type: Type.Union(
      CONDITION_TYPES.map((type) => Type.Literal(type)),
      {
        description:
          'What the condition looks at: `property` (a declared contact property: `key`, `operator`, `value`), `topic` (a subscription: `topic_id`, `subscribed`), `opened` or `clicked` (any mail to the address, within `within_days`), `created` (the contact created at `since` or later).',
      },
    ),
    key: Type.Optional(Type.String({ description: '`property`: the declared property’s key.' })),
    operator: Type.Optional(
      Type.Union(
        PROPERTY_OPERATORS.map((operator) => Type.Literal(operator)),
        {
          description:
            '`property`: `equals`, `not_equals`, `greater`, `less` (number properties) compare the contact’s value, or the property’s fallback when it has none; `exists`: the contact has a value of its own.',
        },
      ),
    ),
    value: Type.Optional(
      Type.Union([Type.String(), Type.Number()], {
        description: '`property`: what to compare with, of the property’s type (none for `exists`).',
      }),
    ),
    topic_id: Type.Optional(Type.String({ description: '`topic`: the topic (`top_…`).' })),
    subscribed: Type.Optional(
      Type.Boolean({
        description: '`topic`: true, subscribed (by choice, or by an opt-in default); false, not.',
      }),
    ),
    within_days: Type.Optional(
      Type.Integer({
        description: `\`opened\`, \`clicked\`: in the last this many days (1 to ${MAX_WITHIN_DAYS}), counted from when the segment is read (a broadcast: when its fan-out starts).`,
      }),
    ),
    since: Type.Optional(
      Type.String({ format: 'date-time', description: '`created`: the earliest creation time (ISO 8601).' }),
    ),
  },
  { additionalProperties: false, title: 'SegmentFilterCondition' },
);

const Filter = Type.Object(
  {
    match: Type.Union([Type.Literal('all'), Type.Literal('any')], {
      description: 'A contact matches every condition (`all`) or at least one (`any`).',
    }),
    conditions: Type.Array(Condition, { minItems: 1, maxItems: MAX_CONDITIONS }),
  },
  {
    additionalProperties: false,
    title: 'SegmentFilter',
    description:
      'A filter segment’s conditions, evaluated whenever its members are read: when a broadcast to it is sent, when its contacts are listed.',
  },
);

export const Segment = apiObject(
  'segment',
  'Segment',
  {
    id: 'Segment identifier (`seg_…`).',
    created: 'When the segment was created.',
    updated: 'When its name or filter last changed.',
  },
  {
    name: Type.String({ description: 'What the segment is called.' }),
    filter: Type.Union([Filter, Type.Null()], {
      description: 'A filter segment’s filter; null for a list, which contacts are added to.',
    }),
  },
);
export type SegmentView = Static<typeof Segment>;
export const SegmentList = listEnvelope(Segment);

export const CreateSegmentBody = Type.Object(
  {
    name,
    // With it, a filter segment (its members are the contacts that match); without it, a list.
    filter: Type.Optional(Filter),
  },
  { additionalProperties: false, title: 'CreateSegmentRequest' },
);
export type CreateSegmentInput = Static<typeof CreateSegmentBody>;
export const UpdateSegmentBody = Type.Object(
  {
    name: Type.Optional(name),
    // A filter segment's new filter (a list stays a list).
    filter: Type.Optional(Filter),
  },
  { additionalProperties: false, minProperties: 1, title: 'UpdateSegmentRequest' },
);
export type UpdateSegmentInput = Static<typeof UpdateSegmentBody>;
/** A segment's name alone (Resend's segments: lists only). */
export const SegmentNameBody = Type.Object({ name }, { additionalProperties: false });

export const SegmentParams = Type.Object({ id: Type.String({ description: 'Segment id (`seg_…`).' }) });
export const MembershipParams = Type.Object({
  id: Type.String({ description: 'Contact id (`con_…`) or email address (any case).' }),
  segment_id: Type.String({ description: 'Segment id (`seg_…`).' }),
});

export const DeletedSegment = Type.Object(
  { object: Type.Literal('segment'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedSegment' },
);

export const SegmentMembership = Type.Object(
  {
    object: Type.Literal('segment_membership'),
    segment_id: Type.String({ description: 'The segment (`seg_…`).' }),
    contact_id: Type.String({ description: 'The contact (`con_…`).' }),
    added: Type.Boolean({ description: 'False when the contact was in the segment already.' }),
  },
  { title: 'SegmentMembership' },
);
export const RemovedSegmentMembership = Type.Object(
  {
    object: Type.Literal('segment_membership'),
    segment_id: Type.String(),
    contact_id: Type.String(),
    deleted: Type.Literal(true),
  },
  { title: 'RemovedSegmentMembership' },
);

export { ListQuery as SegmentListQuery };
