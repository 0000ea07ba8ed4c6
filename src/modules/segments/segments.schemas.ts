import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { apiObject } from '../../http/schema-helpers.ts';

export const MAX_SEGMENT_NAME = 200;

const name = Type.String({
  minLength: 1,
  maxLength: MAX_SEGMENT_NAME,
  description: 'What the segment is called (`Beta testers`); need not be unique.',
});

export const Segment = apiObject(
  'segment',
  'Segment',
  {
    id: 'Segment identifier (`seg_…`).',
    created: 'When the segment was created.',
    updated: 'When its name last changed.',
  },
  {
    name: Type.String({ description: 'What the segment is called.' }),
  },
);
export type SegmentView = Static<typeof Segment>;
export const SegmentList = listEnvelope(Segment);

export const CreateSegmentBody = Type.Object(
  { name },
  { additionalProperties: false, title: 'CreateSegmentRequest' },
);
export type CreateSegmentInput = Static<typeof CreateSegmentBody>;
export const UpdateSegmentBody = Type.Object(
  { name },
  { additionalProperties: false, title: 'UpdateSegmentRequest' },
);

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
