import { type Static, Type } from '@sinclair/typebox';
import { nullable } from '../../http/schema-helpers.ts';

const contact = Type.String({
  minLength: 1,
  maxLength: 320,
  description: 'A contact of the project: its id (`con_…`) or its email address.',
});

export const PreviewBroadcastBody = Type.Object(
  { contact },
  { title: 'PreviewBroadcastRequest', additionalProperties: false },
);

export const TestBroadcastBody = Type.Object(
  {
    to: Type.String({
      minLength: 1,
      maxLength: 998,
      description: 'The one address the test goes to (`me@example.com` or `Me <me@example.com>`).',
    }),
    contact: Type.Optional({
      ...contact,
      description:
        "Whose copy it is (personalized as this contact); absent: the project's contact with the `to` address, else a stand-in with only that address (names empty, properties their fallbacks).",
    }),
  },
  { title: 'TestBroadcastRequest', additionalProperties: false },
);

export const BroadcastPreview = Type.Object(
  {
    object: Type.Literal('broadcast_preview'),
    broadcast_id: Type.String(),
    contact_id: Type.String({ description: 'The contact it is personalized as.' }),
    to: Type.String({ description: "The contact's address: where its copy would go." }),
    from: nullable(Type.String(), 'The From (null while the draft has none).'),
    reply_to: Type.Array(Type.String()),
    subject: Type.String({ description: 'The subject as the contact’s copy carries it.' }),
    html: nullable(
      Type.String(),
      'The html as the copy carries it (the preview text hidden at the top of the body). The two per-contact links stay placeholders: `{{ unsubscribe_url }}` and `{{ preferences_url }}`.',
    ),
    text: nullable(Type.String(), 'The text as the copy carries it, with the same placeholders.'),
  },
  { title: 'BroadcastPreview' },
);
export type BroadcastPreviewView = Static<typeof BroadcastPreview>;

export const BroadcastTest = Type.Object(
  {
    object: Type.Literal('broadcast_test'),
    broadcast_id: Type.String(),
    email_id: Type.String({
      description: 'The test email (`GET /v1/emails/{id}`), tagged `broadcast_test`.',
    }),
    to: Type.String(),
    contact_id: nullable(Type.String(), 'The contact it was personalized as; null: a stand-in.'),
  },
  { title: 'BroadcastTest' },
);
export type BroadcastTestView = Static<typeof BroadcastTest>;
export type TestBroadcastInput = Static<typeof TestBroadcastBody>;
