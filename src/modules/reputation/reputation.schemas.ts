import { type Static, Type } from '@sinclair/typebox';
import { nullable, timestamp } from '../../http/schema-helpers.ts';
import { reputationThresholds } from '../event-kinds/reputation-fields.ts';

const level = Type.Union(
  ['ok', 'warning', 'paused'].map((value) => Type.Literal(value)),
  { description: '`ok`, `warning` (past a warning threshold) or `paused` (past a limit, until resumed).' },
);

export const ReputationScope = Type.Object(
  {
    domain: nullable(Type.String(), 'The From domain; null: the project as a whole.'),
    state: level,
    reason: nullable(
      Type.String(),
      'The rate that moved it to its state: `hard_bounce_rate` or `complaint_rate`.',
    ),
    holds: Type.Union(
      ['nothing', 'broadcasts', 'all'].map((value) => Type.Literal(value)),
      { description: 'What a send from it meets now: nothing refused, broadcasts refused, or every send.' },
    ),
    sent: Type.Integer({ description: 'Messages sent over the window (since the last resume).' }),
    bounced: Type.Integer({ description: 'Messages bounced, of any type.' }),
    bounced_hard: Type.Integer({ description: 'Hard bounces.' }),
    complained: Type.Integer({ description: 'Complaints.' }),
    hard_bounce_rate: nullable(
      Type.Number(),
      'Hard bounces per sent or bounced message, counted now; null below the minimum volume.',
    ),
    complaint_rate: nullable(
      Type.Number(),
      'Complaints per sent message, counted now; null below the minimum volume.',
    ),
    changed_at: nullable(timestamp('When its state last changed.')),
    resumed_at: nullable(timestamp('When it was last resumed.')),
  },
  { title: 'ReputationScope' },
);

export const Reputation = Type.Object(
  {
    object: Type.Literal('reputation'),
    since: Type.String({ description: "The window's first UTC day (YYYY-MM-DD); today is its last." }),
    sending_paused: Type.Boolean({ description: 'Whether the project or any of its domains is paused.' }),
    pause_all_sending: Type.Boolean({
      description: 'Whether a pause holds every send (true) or only broadcasts (false).',
    }),
    project: ReputationScope,
    domains: Type.Array(ReputationScope, {
      description: 'Each From domain the project sent as in the window.',
    }),
    thresholds: reputationThresholds({
      description: 'The configured window, thresholds and minimum volumes (REPUTATION_*).',
    }),
  },
  { title: 'Reputation' },
);

export const ResumeBody = Type.Object(
  {
    domain: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 253,
        description: 'Resume only this From domain; absent: every paused scope of the project.',
      }),
    ),
  },
  { title: 'ResumeSendingRequest', additionalProperties: false },
);

export const Resumed = Type.Object(
  {
    object: Type.Literal('reputation_resume'),
    resumed: Type.Array(nullable(Type.String()), {
      description: 'The scopes resumed: null for the project as a whole, else the domain.',
    }),
  },
  { title: 'ReputationResume' },
);

export const ReputationSettingsBody = Type.Object(
  {
    pause_all_sending: nullable(
      Type.Boolean(),
      'Whether a pause holds every send (true) or only broadcasts (false); null: REPUTATION_PAUSE_ALL_SENDING.',
    ),
  },
  { title: 'UpdateReputationSettingsRequest', additionalProperties: false },
);

export type ReputationView = Static<typeof Reputation>;
