import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope } from '../../http/list.ts';
import { apiObject, nullable } from '../../http/schema-helpers.ts';

export const MAX_TOPIC_NAME = 200;
export const MAX_TOPIC_DESCRIPTION = 1000;
/** The most topics one PATCH /v1/contacts/{id}/topics chooses for. */
export const MAX_TOPIC_CHOICES = 100;

const subscription = (description: string) =>
  Type.Union([Type.Literal('opt_in'), Type.Literal('opt_out')], { description });
const name = Type.String({
  minLength: 1,
  maxLength: MAX_TOPIC_NAME,
  description: 'What the topic is called, as a person sees it (`Product updates`).',
});
const description = nullable(
  Type.String({ maxLength: MAX_TOPIC_DESCRIPTION }),
  'What the topic sends, as a person sees it, or null.',
);

export const Topic = apiObject(
  'topic',
  'Topic',
  {
    id: 'Topic identifier (`top_…`).',
    created: 'When the topic was created.',
    updated: 'When its name or description last changed.',
  },
  {
    name: Type.String({ description: 'What the topic is called.' }),
    description: nullable(Type.String(), 'What it sends, or null.'),
    default_subscription: subscription(
      'The subscription of a contact that has made no choice: `opt_in` (subscribed until they opt out) or `opt_out` (not until they opt in). Fixed once created.',
    ),
  },
);
export type TopicView = Static<typeof Topic>;
export const TopicList = listEnvelope(Topic);

export const CreateTopicBody = Type.Object(
  {
    name,
    description: Type.Optional(description),
    default_subscription: subscription(
      'The subscription of a contact that has made no choice: `opt_in` or `opt_out`. Fixed once created.',
    ),
  },
  { additionalProperties: false, title: 'CreateTopicRequest' },
);
export type CreateTopicInput = Static<typeof CreateTopicBody>;

export const UpdateTopicBody = Type.Object(
  { name: Type.Optional(name), description: Type.Optional(description) },
  { additionalProperties: false, title: 'UpdateTopicRequest' },
);
export type UpdateTopicInput = Static<typeof UpdateTopicBody>;

export const TopicParams = Type.Object({ id: Type.String({ description: 'Topic id (`top_…`).' }) });

export const DeletedTopic = Type.Object(
  { object: Type.Literal('topic'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedTopic' },
);

export const ContactTopic = Type.Object(
  {
    object: Type.Literal('contact_topic'),
    topic_id: Type.String({ description: 'The topic (`top_…`).' }),
    name: Type.String({ description: 'The topic’s name.' }),
    description: nullable(Type.String(), 'The topic’s description, or null.'),
    subscription: subscription('Whether the contact is subscribed to it: `opt_in` or `opt_out`.'),
    chosen: Type.Boolean({
      description: 'True when the contact chose it; false when it is the topic’s default.',
    }),
  },
  { title: 'ContactTopic' },
);
export type ContactTopicView = Static<typeof ContactTopic>;
export const ContactTopicList = listEnvelope(ContactTopic);

export const TopicChoice = Type.Object(
  {
    id: Type.String({ minLength: 1, maxLength: 100, description: 'The topic (`top_…`).' }),
    subscription: subscription('`opt_in` to subscribe, `opt_out` to unsubscribe.'),
  },
  { additionalProperties: false },
);
export type TopicChoiceInput = Static<typeof TopicChoice>;
const topicChoices = Type.Array(TopicChoice, {
  minItems: 1,
  maxItems: MAX_TOPIC_CHOICES,
  description: 'The choices to make, one per topic; topics not named keep theirs.',
});
export { topicChoices as TopicChoices };

export const UpdateContactTopicsBody = Type.Object(
  { topics: topicChoices },
  { additionalProperties: false, title: 'UpdateContactTopicsRequest' },
);
