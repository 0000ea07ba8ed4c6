import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { nullable, timestamp } from '../../http/schema-helpers.ts';

export const SUPPRESSION_REASONS = ['hard_bounce', 'complaint', 'unsubscribe', 'manual'] as const;
const reason = Type.Union(
  SUPPRESSION_REASONS.map((value) => Type.Literal(value)),
  {
    description:
      '`hard_bounce` (the address does not exist), `complaint` (marked as spam), `unsubscribe`, or `manual`.',
  },
);

/** The most entries one POST adds. */
export const MAX_SUPPRESSIONS_PER_REQUEST = 1000;

const address = Type.String({
  minLength: 3,
  maxLength: 320,
  description: 'An email address, `a@example.com`.',
});

export const Suppression = Type.Object(
  {
    object: Type.Literal('suppression'),
    id: Type.String({ description: 'Entry identifier (`sup_…`), the cursor of the list.' }),
    address: Type.String({ description: 'The suppressed address, lowercased: it matches in any case.' }),
    reason,
    email_id: nullable(Type.String({ description: 'The email whose bounce or complaint added it.' })),
    detail: nullable(
      Type.String({ description: "What caused it: the server's reply, the report's diagnostic." }),
    ),
    created_at: timestamp('When the address was added.'),
  },
  { title: 'Suppression' },
);
export type SuppressionView = Static<typeof Suppression>;

export const SuppressionList = listEnvelope(Suppression);

export const SuppressionListQuery = Type.Object(
  { ...ListQuery.properties, reason: Type.Optional(reason) },
  { additionalProperties: false },
);

export const SuppressionParams = Type.Object({
  address: Type.String({ description: 'The address, in any case.' }),
});

export const AddSuppressionsBody = Type.Object(
  {
    addresses: Type.Array(address, {
      minItems: 1,
      maxItems: MAX_SUPPRESSIONS_PER_REQUEST,
      description: `Addresses to stop sending to (reason \`manual\`), 1–${MAX_SUPPRESSIONS_PER_REQUEST}. One already on the list keeps its entry.`,
    }),
  },
  { additionalProperties: false, title: 'CreateSuppressionsRequest' },
);
export type AddSuppressionsInput = Static<typeof AddSuppressionsBody>;

export const DeletedSuppression = Type.Object(
  { object: Type.Literal('suppression'), address: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedSuppression' },
);
